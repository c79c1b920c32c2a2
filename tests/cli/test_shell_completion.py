"""``fuze completion bash|zsh|fish`` prints a script that completes commands, options and option
values; the bash one is run in a real bash."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from fuzeguard._private.cli import main

FUZE = [sys.executable, "-m", "fuzeguard"]


def _complete(words: list[str]) -> list[str]:
    script = subprocess.run([*FUZE, "completion", "bash"], capture_output=True, text=True,
                            check=True).stdout
    line = " ".join(f"'{w}'" for w in words)
    probe = f'{script}\nCOMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; _fuze; echo "${{COMPREPLY[@]}}"'
    bash = shutil.which("bash")
    assert bash is not None
    return subprocess.run([bash, "-c", probe], capture_output=True, text=True, check=True).stdout.split()


@pytest.mark.parametrize(("words", "expected"), [
    (["fuze", "rep"], ["replay", "report"]),
    (["fuze", "repl"], ["replay"]),
    (["fuze", "c"], ["check", "completion"]),
    (["fuze", "replay", "--fail"], ["--fail-on-detect"]),
    (["fuze", "replay", "--format", ""], ["text", "json"]),
    (["fuze", "check", "--im"], ["--import"]),
    (["fuze", "completion", "--h"], ["--help"]),
])
def test_bash_completes_commands_options_and_choices(words: list[str], expected: list[str]) -> None:
    assert _complete(words) == expected


def test_zsh_and_fish_scripts_name_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", "zsh"]) == 0
    zsh = capsys.readouterr().out
    assert "bashcompinit" in zsh and "complete -o filenames -F _fuze fuze" in zsh
    assert main(["completion", "fish"]) == 0
    fish = capsys.readouterr().out
    for command in ("demo", "check", "replay", "completion"):
        assert f"-a {command} -d '" in fish
    assert "-l format -x -a 'text json'" in fish


def test_an_unknown_shell_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", "tcsh"]) == 2
    assert "invalid choice: 'tcsh'" in capsys.readouterr().err
