"""Layer 5, ``semantic``: rephrased repeats and outputs that repeat themselves (Ralph's fuzzy
output check; Fuze layer 5, enforced).

The text of each call's arguments and result is prepared once, when the call completes (see
``fuzeguard.layers._similarity`` for the similarity measure and its cost). Optional: it is not in
the default layer stack; add it with ``layers = [..., "semantic"]`` or ``guard(..., layers=...)``.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from fuzeguard._private.judging.layer import LayerSettings, RunView, setting
from fuzeguard._private.meaning.records import Call, CallRecord, Detection
from fuzeguard._private.publish.log import emit
from fuzeguard.layers._similarity import ChantScanner, Embedder, Text, chant_of, similarity, text_of


@dataclass(frozen=True, slots=True)
class Semantic(LayerSettings):
    """Flag near-identical outputs, rephrased requests, and an output that chants one passage.

    Before each call, against the last ``similarity_window`` completed calls:

    * **Outputs** (Ralph): the latest result is compared with the earlier results in the window;
      one at least ``similarity_threshold`` similar makes the next call to either function a loop.
    * **Requests**: the pending call's arguments are compared with those of the calls in the
      window (exact repeats are left to ``dedup``); it is a loop when it rephrases at least two
      earlier requests whose results were alike too: rephrasing did not help. Two agents bouncing
      variations of one request (A, A', A''… across two tools) are caught this way and by outputs.
    * **Chanting**: when the latest result repeats one passage over and over, the next call to the
      same function is a loop. Guarded generators are watched as they stream (see ``watch``).

    Texts shorter than ``similarity_min_length`` characters are never compared: "OK" twice is not a
    loop. With ``embed`` set, similarity is the cosine of embedding vectors instead of the fuzzy
    ratio, with the same threshold semantics.
    """

    name: ClassVar[str] = "semantic"

    similarity_threshold: float = setting(
        0.9, type="float", minimum=0.0, maximum=1.0, origin="Ralph (loopThreshold = 0.9)",
        doc="Similarity (0 to 1) at which two texts count as the same.",
    )
    similarity_window: int = setting(
        5, type="int", minimum=1, origin="Ralph (maxRecentOutputs = 5)",
        doc="How many recent calls the texts are compared against.",
    )
    similarity_min_length: int = setting(
        10, type="int", minimum=1, origin="fuzeguard",
        doc='Texts shorter than this many characters are never compared ("OK" twice is no loop).',
    )
    embed: Any = setting(
        None, type="str", optional=True, origin="Fuze layer 5 (embedding similarity)",
        doc='An embedding function, as an import path "package.module:function" (in code also '
        "the function): text -> vector; similarity becomes cosine similarity.",
    )

    def __post_init__(self) -> None:
        if isinstance(self.embed, str):
            object.__setattr__(self, "embed", _import(self.embed))
        elif self.embed is not None and not callable(self.embed):
            raise ValueError(f"embed must be a function or an import path, got {self.embed!r}")

    @property
    def history_needed(self) -> int:
        return self.similarity_window

    # ------------------------------------------------------------------ what calls leave behind

    def _prepare(self, value: Any) -> Text | None:
        text = text_of(value).strip()
        if len(text) < self.similarity_min_length:
            return None
        return Text.of(text, self.embed)

    def observe_call(
        self, arguments: Mapping[str, Any], result: Any, error: BaseException | None
    ) -> Any:
        """Prepare the text of the call's arguments and of its result (or error), and note
        whether the result chants. If that fails (an embedding function that raises), the call
        is kept without texts and the failure logged: the call itself is never lost."""
        try:
            outcome = f"{type(error).__name__}: {error}" if error is not None else result
            result_text = text_of(outcome).strip()
            chant = chant_of(result_text) if error is None else None
            prepared = (
                Text.of(result_text, self.embed) if len(result_text) >= self.similarity_min_length
                else None
            )
            return (self._prepare(arguments), prepared, chant)
        except Exception as exc:
            emit("error", "fuzeguard.internal_error", layer=self.name, phase="observe",
                 error=repr(exc))
            return None

    def watch(self, call: Call) -> ChantWatch:
        """A watcher for the chunks of a guarded generator (see ``watch.StreamWatch``): text chunks go to a
        bounded chanting scanner, nothing else is kept."""
        return ChantWatch(call.fn, self.similarity_threshold)

    # ------------------------------------------------------------------ the check

    def check(self, run: RunView, call: Call) -> Detection | None:
        history = run.history
        if not history:
            return None
        try:
            return self._check(run, call)
        except Exception as exc:  # an embedding function that raises on the pending text
            emit("error", "fuzeguard.internal_error", layer=self.name, phase="check",
                 error=repr(exc))
            return None

    def _check(self, run: RunView, call: Call) -> Detection | None:
        history = run.history
        window = [
            r for r in list(history)[-self.similarity_window:]
            if r.features.get(self.name) is not None
        ]
        if not window:
            return None
        latest = window[-1]
        if latest is history[-1]:
            _, latest_result, chant = latest.features[self.name]
            if chant is not None and call.fn == latest.fn:
                return Detection(
                    layer=self.name, fn=call.fn, count=chant.count, similarity=chant.share,
                    threshold=self.similarity_threshold, pattern=("chant", latest.fn),
                    message=(
                        f"The last output of `{latest.fn}` repeats the same passage "
                        f"{chant.count} times ({_size(chant.passage)}). It is stuck "
                        "repeating itself: change the request instead of asking again."
                    ),
                )
            if latest_result is not None:
                found = self._output_repeat(call, latest, latest_result, window[:-1])
                if found is not None:
                    return found
        return self._rephrased(call, window)

    def _output_repeat(
        self, call: Call, latest: CallRecord, text: Text, earlier: list[CallRecord]
    ) -> Detection | None:
        threshold = self.similarity_threshold
        for record in reversed(earlier):
            if call.fn != latest.fn and call.fn != record.fn:
                continue
            other = record.features[self.name][1]
            if other is None:
                continue
            score = similarity(text, other, threshold)
            if score >= threshold:
                tools = sorted({latest.fn, record.fn})
                return Detection(
                    layer=self.name, fn=call.fn, count=2, similarity=round(score, 3),
                    threshold=threshold, pattern=("outputs", *tools),
                    message=(
                        f"The last output of `{latest.fn}` is {score:.0%} similar to an earlier "
                        f"one of `{record.fn}`: you are getting the same answer again. Use it, or "
                        "change approach instead of asking again."
                    ),
                )
        return None

    def _rephrased(self, call: Call, window: list[CallRecord]) -> Detection | None:
        pending = self._prepare(call.arguments)
        if pending is None:
            return None
        threshold = self.similarity_threshold
        alike: list[tuple[CallRecord, float]] = []
        for record in window:
            if record.args_fp == call.args_fp:
                continue
            args = record.features[self.name][0]
            if args is None:
                continue
            score = similarity(pending, args, threshold)
            if score >= threshold:
                alike.append((record, score))
        if len(alike) < 2:
            return None
        for i in range(len(alike) - 1, 0, -1):
            newer = alike[i][0]
            newer_result = newer.features[self.name][1]
            for j in range(i):
                older = alike[j][0]
                older_result = older.features[self.name][1]
                same = newer.result_fp is not None and newer.result_fp == older.result_fp
                if not same and (newer_result is None or older_result is None):
                    continue
                if same or similarity(newer_result, older_result, threshold) >= threshold:
                    best = max(score for _, score in alike)
                    tools = sorted({call.fn, *(r.fn for r, _ in alike)})
                    return Detection(
                        layer=self.name, fn=call.fn, count=len(alike) + 1,
                        similarity=round(best, 3), threshold=threshold,
                        pattern=("requests", *tools),
                        message=(
                            f"This request is a rephrasing of {len(alike)} recent ones "
                            f"({', '.join(f'`{t}`' for t in tools)}) that got the same answer. "
                            "Rewording it will not help: change what you ask, or use what you "
                            "have."
                        ),
                    )
        return None


class ChantWatch:
    """Feeds a stream's text chunks to a ``ChantScanner`` and words the detection."""

    __slots__ = ("fn", "scanner", "threshold")

    def __init__(self, fn: str, threshold: float) -> None:
        self.fn = fn
        self.threshold = threshold
        self.scanner = ChantScanner()

    def feed(self, chunk: Any) -> Detection | None:
        if not isinstance(chunk, str):
            return None
        chant = self.scanner.feed(chunk)
        if chant is None:
            return None
        return Detection(
            layer=Semantic.name, fn=self.fn, count=chant.count, similarity=chant.share,
            threshold=self.threshold, pattern=("chant", self.fn),
            message=(
                f"The output of `{self.fn}` keeps repeating the same passage ({chant.count} times "
                f"so far, {_size(chant.passage)}). It was stopped: ask differently."
            ),
        )


def _size(passage: str) -> str:
    """How a message names a passage: by its length, never by quoting it. Messages are logged
    and raised, and a tool's output may hold secrets (``log_values = false`` keeps them out)."""
    return f"a passage of {len(passage)} characters"


def _import(path: str) -> Embedder:
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ValueError(f'embed: expected "package.module:function", got "{path}"')
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f'embed: cannot import module "{module_name}": {exc}') from None
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ValueError(f'embed: module "{module_name}" has no "{attr}"') from None
    if not callable(target):
        raise ValueError(f'embed: "{path}" is not a function')
    fn: Embedder = target
    return fn
