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

from .decoding import Batch, Block, Generation
from .pair import ModelPair
from .settings import DecodeSettings
from .trace import TokenRecord, Trace

LANES = ("left", "right")
DEFAULT_METHODS = {"left": "sd", "right": "easd"}  # the comparison the app opens with: EASD's one line against SD


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
