"""What a tool is: ``read``, ``search``, ``write``, ``poll``, ``exec``, ``model``, ``noop`` (or
``other``).

The layers judge "no progress" differently by kind: a poll whose answer does not change is waiting,
not looping, for a while; a short acknowledgement is progress for a write with new arguments but
not for a search; the same content written again is a loop even when every receipt is new. A write
that succeeds changes the state of the world, so that calls repeated after it may answer anew
(``fuzeguard.layers._evidence.changes_state``); a ``noop`` tool (``think``, a scratchpad, a
calculator) changes nothing and tells nothing about the world: the layers look through it.

A function's kind is declared with ``kind = "poll"`` (``[functions.NAME]`` or ``guard(kind=...)``);
left at ``"auto"``, it is inferred from the function's name and, for tools that take an ``action``
or a shell ``command``, from that argument on each call (``process(action="poll")``,
``bash(command="kubectl get pods --watch")``). Inference only ever picks a kind; a declared kind is
used as it is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal

Kind = Literal["read", "search", "write", "poll", "exec", "model", "noop", "other"]
KINDS: Final = ("read", "search", "write", "poll", "exec", "model", "noop", "other")
AUTO: Final = "auto"

# Name words, by the kind they suggest. A name's first word decides when it is a verb of a known
# kind ("update_status" writes); otherwise poll words win ("get_status" polls), then the first
# word of any kind, wherever it stands ("flight_booking" is no verb, "book_flight" is).
_WORDS: Final[dict[str, Kind]] = {}
for _kind, _words in (
    ("noop", "think thinking thought thoughts scratchpad scratch reflect reflection reason "
             "reasoning calculate calculator calc math noop"),
    ("model", "output outputs generate generation completion chat llm model respond reply "
              "answer ask prompt"),
    ("poll", "poll polling status wait await health healthcheck heartbeat ping progress watch "
             "sleep"),
    ("write", "write edit patch create update insert replace delete remove rm send post put save "
              "set submit commit append upload apply move rename mkdir notify email publish "
              "deploy modify add message book reserve cancel transfer pay purchase buy refund "
              "assign unassign approve reject schedule reschedule register unregister "
              "enable disable reset restart install uninstall merge checkout exchange archive "
              "clear drop grant revoke invite share subscribe unsubscribe lock unlock mark tag "
              "attach detach link unlink copy cp mv touch chmod chown truncate close "
              "sign confirm change"),
    ("search", "search find grep glob query lookup locate retrieve rg seek"),
    ("read", "read open get fetch view cat list ls show load download describe scroll goto "
             "browse head tail inspect scan"),
    ("exec", "bash shell sh zsh exec execute run terminal command cmd python ipython code javac "
             "java mvn gradle npm node make pytest test script cell jupyter console powershell"),
):
    for _w in _words.split():
        _WORDS.setdefault(_w, _kind)  # type: ignore[arg-type]

# Verbs with effects decide a name on their own: "update_status" writes, "run_status" runs,
# "think_about_status" changes nothing.
_VERB_KINDS: Final = frozenset({"write", "exec", "noop"})
_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")

# Arguments that say what a multi-purpose tool does on this call.
_ACTION_ARGS: Final = ("action", "operation", "op", "method", "mode", "verb")
_COMMAND_ARGS: Final = ("command", "cmd", "commands", "script", "input")
# A shell command that waits on something: a sleep, a process list or a job queue as the command;
# a status, health or wait subcommand (git status, systemctl status x, kubectl rollout status y);
# a --watch, --wait or --status flag. Searches and prints of those words are not polls. The
# command is looked for at the start and after a separator (``;``, ``&``, ``|``, ``(``): one match
# at the start, then one search led by a separator or a flag's space, which the engine skips to
# (one pattern with ``^`` in it would be tried at every character).
_POLL_WORDS: Final = r"(?:sleep|watch|squeue|qstat|jobs|top|ps)(?=$|[\s;&|)])"
_POLL_SUBCOMMAND: Final = (
    r"(?!(?:grep|rg|ag|find|sed|awk|cat|echo|printf|python\d*|node)\b)"
    r"[\w./-]+(?:\s+[\w./-]+)?\s+(?:status|health|healthz|wait|poll|ps)(?=$|[\s;&|)])"
)
_POLL_AT_START = re.compile(f"{_POLL_WORDS}|{_POLL_SUBCOMMAND}")
_POLL_LATER = re.compile(
    rf"[;&|(]\s*(?:{_POLL_WORDS}|{_POLL_SUBCOMMAND})|\s--?(?:watch|wait|status)\b"
)


def polls(command: str) -> bool:
    """Whether a shell command waits on something (see ``_POLL_WORDS`` and ``_POLL_SUBCOMMAND``)."""
    command = command[:500].strip()
    return _POLL_AT_START.match(command) is not None or _POLL_LATER.search(command) is not None


# A shell command that changes files or the environment: output redirected to a file (not to
# /dev/null or another descriptor), a here-document, a tee, an in-place edit, a command of the
# file system or version control that writes, a package install, a build. Looked for with quoted
# strings blanked out (``grep 'a > b'`` writes nothing), except for a Python one-liner that opens
# a file for writing.
_REDIRECT: Final = r"""(?:^|[^<>&0-9-])[12]?>>?\s*(?!\s*(?:/dev/null|&))[\w"'./$~{-]
    | <<-?\s*(?:''|""|\w)"""
_WRITER: Final = r"""(?:^|[;&|(`]\s*|\bsudo\s+|\bxargs\s+)(?:
        tee|rm|rmdir|mv|cp|mkdir|touch|chmod|chown|ln|truncate|dd|unzip|patch|install
      | sed\s+(?:-\w+\s+)*-i | perl\s+(?:-\w+\s+)*-\w*i
      | git\s+(?:apply|am|checkout|switch|restore|reset|stash|commit|add|rm|mv|merge|rebase
          |cherry-pick|revert|clean|pull|init|clone)
      | (?:pip3?|python3?\s+-m\s+pip|uv\s+pip|conda|npm|yarn|pnpm|apt|apt-get|brew|gem|cargo)
          \s+(?:install|add|uninstall|remove|build)
      | make | cmake | mvn | gradle | \./gradlew | \./mvnw | javac | tar\s+-?\w*x
      | python3?\s+setup\.py
      )(?=$|[\s;&|)])"""
_WRITE_COMMAND = re.compile(f"{_REDIRECT}\n    | {_WRITER}", re.VERBOSE | re.MULTILINE)
# A command without ``>`` or ``<<`` redirects nothing: only the writing commands are looked for.
_WRITER_ONLY = re.compile(_WRITER, re.VERBOSE | re.MULTILINE)
_QUOTED = re.compile(r"'[^'\n]*'|\"[^\"\n]*\"")
_CODE_WRITE = re.compile(r"\bopen\([^)]*,\s*['\"][wax]b?\+?['\"]|\.write_(?:text|bytes)\(")


def writes(command: str) -> bool:
    """Whether a shell command changes files or the environment (see ``_WRITE_COMMAND``)."""
    command = command[:4000]
    unquoted = _QUOTED.sub("''", command)
    pattern = _WRITE_COMMAND if ">" in unquoted or "<<" in unquoted else _WRITER_ONLY
    if pattern.search(unquoted) is not None:
        return True
    return ("open(" in command or ".write_" in command) and _CODE_WRITE.search(command) is not None


def words(name: str) -> list[str]:
    """The lower-case words of a function name: ``searchDir`` and ``search_dir`` give the same."""
    return [w.lower() for w in _SPLIT.split(name) if w]


def infer_kind(name: str) -> Kind:
    """The kind a function's name suggests (``other`` when it suggests none)."""
    if name.startswith("__output"):
        return "model"
    parts = words(name)
    found = [_WORDS[w] for w in parts if w in _WORDS]
    if not found:
        return "other"
    if found[0] in _VERB_KINDS and parts[0] in _WORDS:
        return found[0]
    if "poll" in found:
        return "poll"
    return found[0]


def may_refine(parameters: Iterable[str] | None) -> bool:
    """Whether a function with these parameter names (``None``: unknown, or ``**kwargs``) can
    have its kind refined by its arguments; if not, its calls need not be asked."""
    if parameters is None:
        return True
    names = set(parameters)
    return not names.isdisjoint(_ACTION_ARGS) or not names.isdisjoint(_COMMAND_ARGS)


def call_kind(kind: Kind, arguments: Mapping[str, Any]) -> Kind:
    """Refine an inferred kind with what one call's arguments say it does.

    ``message(action="send")`` writes and ``process(action="poll")`` polls; a shell command that
    checks a status, lists processes or sleeps is a poll, and one that writes a file, installs a
    package or builds is a write (``writes``).
    """
    for key in _ACTION_ARGS:
        value = arguments.get(key)
        if type(value) is str and value:
            found = infer_kind(value)
            if found != "other":
                return found
            break
    if kind == "exec" or kind == "other":
        for key in _COMMAND_ARGS:
            value = arguments.get(key)
            if type(value) is str:
                return command_kind(value) or kind
    return kind


# An agent runs the same commands again and again (a test, a build, a status check): the verdict
# on each command is kept (a bounded number of them, forgotten all at once when full).
_COMMAND_KINDS: dict[str, Kind | None] = {}
_COMMANDS_REMEMBERED: Final = 1024
_COMMAND_REMEMBERED: Final = 1024  # characters: at most about 1 MB kept in all


def command_kind(command: str) -> Kind | None:
    """What a shell command does when it is not what its tool's name says: ``poll`` (it checks a
    status, lists processes, sleeps), ``write`` (``writes``), or None."""
    try:
        return _COMMAND_KINDS[command]
    except KeyError:
        pass
    if polls(command):
        verdict: Kind | None = "poll"
    else:
        verdict = "write" if writes(command) else None
    if len(command) <= _COMMAND_REMEMBERED:
        if len(_COMMAND_KINDS) >= _COMMANDS_REMEMBERED:
            _COMMAND_KINDS.clear()
        _COMMAND_KINDS[command] = verdict
    return verdict
