"""Two methods side by side (SD | EASD unless asked otherwise): two generations with the same prompt, seed and
settings, streamed together.

The two are the two rows of one batch: every draft and target pass serves both lanes, so a
comparison costs about one lane's passes, and both lanes grow together in a UI. Events come one
per emitted token; closing the iterator (or `stop()`) ends both at once and keeps everything
emitted so far in `traces`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from .generation import Generation
from .judging import Block
from .methods import METHODS
from .methods.relaxing import Relaxing
from .pair import ModelPair
from .references import PROPOSED, REFERENCE
from .settings import DecodeSettings
from .spec_metrics import SpecMetrics
from .step import Batch
from .summary import intervened
from .trace import TokenRecord, Trace

LANES = ("left", "right")
DEFAULT_METHODS = {"left": REFERENCE, "right": PROPOSED}  # the comparison the app opens with: EASD's one line against SD


@dataclass
class TokenEvent:
    lane: str  # left | right
    record: TokenRecord
    block: Block  # the block it came from (drafts, end reason)


class Comparison:
    """Iterate for TokenEvents; `traces` maps each lane to its trace so far. `methods` says which method each lane
    runs (DEFAULT_METHODS: SD | EASD); everything else is the same `settings`."""

    def __init__(
        self, pair: ModelPair, prompt: str, settings: DecodeSettings, chat: bool = True, methods: dict[str, str] | None = None
    ):
        self.pair = pair
        methods = methods or DEFAULT_METHODS
        self.generations = {lane: Generation(pair, prompt, replace(settings, method=methods[lane]), chat=chat) for lane in LANES}

    @property
    def traces(self) -> dict[str, Trace]:
        return {lane: generation.trace for lane, generation in self.generations.items()}

    def stop(self) -> None:
        for generation in self.generations.values():
            generation.stop()

    def __iter__(self) -> Iterator[TokenEvent]:
        """Decode both as a batch of their own (the app instead hands `generations` to its shared batch)."""
        lanes = {id(generation): lane for lane, generation in self.generations.items()}
        blocks = iter(Batch(self.pair, self.generations.values()))
        try:
            for block in blocks:
                lane = lanes[id(block.generation)]
                for record in block.records:
                    yield TokenEvent(lane, record, block)
        finally:
            blocks.close()  # marks an unfinished generation as stopped

    def run(self) -> dict[str, Trace]:
        for _ in self:
            pass
        return self.traces


def first_difference(left: Trace | None, right: Trace | None) -> int | None:
    """The first position where the two lanes' tokens differ (None while they agree): EASD's fork from SD."""
    if left is None or right is None:
        return None
    for position, (a, b) in enumerate(zip(left.records, right.records)):
        if a.token_id != b.token_id:
            return position
    return None


def verifying(traces: dict[str, Trace | None]) -> Trace | None:
    """The first lane's run of a method that drafts and verifies (SD or EASD): the one the speed model explains."""
    return next(
        (t for t in traces.values() if t is not None and t.settings.method in METHODS and METHODS[t.settings.method].verifies),
        None,
    )


def whatif_lane(traces: dict[str, Trace | None]) -> str | None:
    """The lane whose run the what-if re-reads: the first of a method that records EASD's signals, refuses nothing and
    keeps by the strict test (SD's, wherever it is), where EASD's rule or a relaxed one can be asked what it would
    have done otherwise."""
    return next((lane for lane, t in traces.items() if t is not None and shows_rule(t.settings.method)), None)


def shows_rule(name: str) -> bool:
    """Whether the what-if can re-read a run of this method: SD's."""
    method = METHODS.get(name)
    return method is not None and method.signals and not method.refuses and not isinstance(method, Relaxing)


def whatif_method(traces: dict[str, Trace | None]) -> str:
    """The method the what-if reads SD's run as, beside these lanes' runs (`reads_as`)."""
    return reads_as([t.settings.method for t in traces.values() if t is not None])


def reads_as(methods: list[str]) -> str:
    """The method the what-if reads SD's run as beside lanes running `methods`: a relaxed rule where one runs (which
    drafts SD refused would it keep?), else EASD's rule at the sliders' settings (which drafts SD kept would it refuse?)."""
    return next((name for name in methods if isinstance(METHODS.get(name), Relaxing)), PROPOSED)


def brief(traces: dict[str, Trace]) -> dict:
    """A comparison in a few kilobytes, for a caller that reads rather than renders (the app's MCP tool): each lane's
    method, text, stop reason, its interventions (position, origin, the token chosen and the drafted token it
    replaced), the runs' speculative-decoding figures under vLLM's names (easd.method.spec_metrics), penalties
    beside them; and the first position where the lanes differ. No candidates and no per-token rows: that is the
    whole trace's job (easd-trace JSON)."""
    lanes = {}
    for lane, trace in traces.items():
        method, spec = trace.settings.method, SpecMetrics.of([trace])
        lanes[lane] = {
            "method": method,
            "text": trace.text,
            "new_tokens": len(trace.records),
            "stop_reason": trace.stats.stop_reason,
            "interventions": [_intervention(r) for r in trace.records if intervened(r.origin, method)],
            **spec.summary(),
            "penalties": spec.penalties,
        }
    left, right = (traces.get(lane) for lane in LANES)
    return {"lanes": lanes, "first_difference": first_difference(left, right)}


def _intervention(record: TokenRecord) -> dict:
    return {
        "position": record.position,
        "origin": record.origin,
        "token": record.token_text,
        "drafted": record.draft_token_text,  # None where no draft was examined (MTI's guided token)
    }
