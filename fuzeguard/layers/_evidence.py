"""Evidence of progress shared by the layers that judge repeats (``dedup``, ``cycle``, ``iterations``).

Three questions, answered the same way everywhere:

* ``repeat_key``: when the same call comes back, is its outcome the same as last time? A failure
  is compared by what failed (its masked error text: ``outcome.failure_fingerprint``), or, for
  the very same call failing again, is simply a failure again (however its message drifts), an
  identical write is a repeat whatever receipt it got (a new revision number or message id is not
  progress), and anything else is compared by its skeleton (``fuzeguard._private.meaning.outcome``).
* ``changes_state``: did a completed call change the world, so that a read repeated after it may
  answer anew? A write that did not fail does (a call of kind ``write``: by its name, a shell
  command that writes, or declared). Reads, searches, failures and ``noop`` tools do not.
* ``novelty``: did a completed call bring something the run had not seen? A result not seen
  before does; so does a write or a command (``exec``) with new arguments that did not fail (it
  may have changed something, whatever it answered: ``sed -i`` prints nothing) and a call with new
  arguments whose result is unknown (a replayed trace without results: batch work
  is no accusation). A failure never does (trying is not progress), nor does a repeated result or
  an unknown outcome of a repeated call.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from fuzeguard._private.meaning.kinds import infer_kind
from fuzeguard._private.meaning.records import Call, CallRecord

#: Kinds whose calls act on the world: new arguments are new work, whatever the answer.
ACTING = frozenset({"write", "exec"})
#: Kinds whose answers are information: an answer that only echoes the arguments ("No matches
#: found for 'x'") says nothing new. Other kinds may answer a new item with an acknowledgement
#: that names it ("converted a.png"), which is progress.
INFORMING = frozenset({"read", "search", "model", "poll"})
#: Kinds whose answer to new arguments may be a bare acknowledgement ("OK"): progress all the same.
#: A tool whose name says nothing (``other``) is given that benefit of the doubt.
ACKNOWLEDGING = frozenset({"write", "exec", "other"})
#: Kinds that change nothing and tell nothing about the world (``think``, a scratchpad): the
#: layers look through them.
TRANSPARENT = frozenset({"noop"})
FAILED = b"\x00failed"
WRITTEN = b"\x00written"


def repeat_key(record: CallRecord, failures_alike: bool = False) -> Hashable | None:
    """What a repeated call's outcome is compared by; ``None`` when it is unknown.
    ``failures_alike``: every failure is the same outcome (the very same call failing again is a
    repeat, whatever its message says this time)."""
    if record.error is not None:
        return FAILED if failures_alike else (record.error, record.result_fp)
    if record.kind == "write":
        return WRITTEN
    return record.result_fp


def changes_state(record: CallRecord) -> bool:
    """Whether a call changed the world: a write that did not fail (or is still running), or a
    shell command that writes and then failed: a compound command (a here-document written,
    then run) fails in its last part, after the file changed."""
    return record.kind == "write" and (record.error is None or _shell(record.fn))


def _shell(fn: str) -> bool:
    kind = _SHELL.get(fn)
    if kind is None:
        if len(_SHELL) >= 1024:
            _SHELL.clear()
        kind = _SHELL[fn] = infer_kind(fn) == "exec"
    return kind


_SHELL: dict[str, bool] = {}


def side_effect(call: Call) -> bool:
    """Whether a call acts on the world beyond the run's own workspace, so that doing it twice
    does it twice (a payment, an email, an event booked): a write by its name or declared kind.
    A shell command that writes a file is a write too, but running the same one again rewrites
    the same file: repeating it is judged like any repeat."""
    return call.kind == "write" and not _shell(call.fn)


def last_change(history: Sequence[CallRecord], args_fp: bytes, after: int) -> int:
    """The index of the latest call in ``history`` after call ``after`` that changed the world
    (``changes_state``) and is not the call ``args_fp`` itself (repeating an identical write
    changes nothing more), or ``after`` when there is none."""
    for i in range(len(history) - 1, -1, -1):
        record = history[i]
        if record.index <= after:
            break
        if changes_state(record) and record.args_fp != args_fp:
            return record.index
    return after


def novelty(history: Sequence[CallRecord]) -> list[bool]:
    """For each record of ``history`` (oldest first), whether it brought something new."""
    seen_results: set[bytes] = set()
    seen_calls: set[tuple[str, bytes]] = set()
    out: list[bool] = []
    for record in history:
        call = (record.fn, record.args_fp)
        fp = record.result_fp
        if record.error is not None:
            new = False
        elif fp is None or record.kind in ACTING:
            new = call not in seen_calls
        else:
            new = fp not in seen_results
        out.append(new)
        seen_calls.add(call)
        if fp is not None:
            seen_results.add(fp)
    return out
