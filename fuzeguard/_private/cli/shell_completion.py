"""Shell completion for ``fuze``: ``fuze completion bash|zsh|fish`` prints a script that completes
the commands, their options, option values with a fixed set of choices, and file names.

The scripts are written from the command's own argument parser, so an option added to ``fuze``
completes without a change here.
"""

from __future__ import annotations

import argparse

SHELLS = ("bash", "zsh", "fish")


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _helps(parser: argparse.ArgumentParser) -> dict[str, str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {a.dest: a.help or "" for a in action._choices_actions}
    return {}


def _options(parser: argparse.ArgumentParser) -> list[tuple[str, tuple[str, ...]]]:
    """Each long option of ``parser`` with its choices (empty: a free value or a switch)."""
    found = []
    for action in parser._actions:
        for flag in action.option_strings:
            if flag.startswith("--"):
                found.append((flag, tuple(map(str, action.choices or ()))))
    return found


def _bash(parser: argparse.ArgumentParser) -> str:
    commands = _commands(parser)
    cases = []
    for name, sub in commands.items():
        flags = " ".join(flag for flag, _ in _options(sub))
        choices = "".join(
            f'\n            {flag}) COMPREPLY=($(compgen -W "{" ".join(values)}" -- "$cur")); return;;'
            for flag, values in _options(sub) if values
        )
        cases.append(f'        {name})\n            opts="{flags}"\n            case "$prev" in{choices}\n'
                     "            esac;;")
    top = " ".join([*commands, *(flag for flag, _ in _options(parser))])
    body = "\n".join(cases)
    return f"""# fuze completion for bash: eval "$(fuze completion bash)" (e.g. in ~/.bashrc)
_fuze() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}" opts=""
    if [[ $COMP_CWORD -eq 1 ]]; then
        COMPREPLY=($(compgen -W "{top}" -- "$cur"))
        return
    fi
    case "${{COMP_WORDS[1]}}" in
{body}
    esac
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$opts" -- "$cur"))
    else
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}}
complete -o filenames -F _fuze fuze
"""


def _fish(parser: argparse.ArgumentParser) -> str:
    lines = ["# fuze completion for fish: fuze completion fish > ~/.config/fish/completions/fuze.fish"]
    commands = _commands(parser)
    helps = _helps(parser)
    for name, sub in commands.items():
        description = helps.get(name, "").replace("'", "")
        lines.append(f"complete -c fuze -n __fish_use_subcommand -a {name} -d '{description}'")
        for flag, values in _options(sub):
            choice = f" -x -a '{' '.join(values)}'" if values else ""
            lines.append(f"complete -c fuze -n '__fish_seen_subcommand_from {name}' -l {flag[2:]}{choice}")
    return "\n".join(lines) + "\n"


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    """The completion script for ``shell`` (one of ``SHELLS``)."""
    if shell == "fish":
        return _fish(parser)
    if shell == "zsh":
        return ("# fuze completion for zsh: eval \"$(fuze completion zsh)\" (e.g. in ~/.zshrc)\n"
                "autoload -U +X bashcompinit && bashcompinit\n" + _bash(parser).split("\n", 1)[1])
    return _bash(parser)
