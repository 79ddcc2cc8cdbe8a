"""RSD, reward-guided speculative decoding (Liao et al., 2025): the draft writes a whole reasoning segment, a process
reward model scores it, and the target writes the segment again, a token a block, where the reward is below δ.

Words: a *segment* is what RSD's paper calls a reasoning step, text up to the delimiter (settings.rsd_delimiter,
"\n\n"); this code says segment so that "step" keeps its one meaning, a round of the batch. A trace keeps the
paper's word in its column `rsd_step` (the segment's index) and in the stop reason `max_steps`, so that saved files
read as before. These are RSD's own parts; the table entry is methods.METHODS["rsd"], the batch's PRM pass
decoding.Batch._score.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from .pair import ModelPair
from .settings import DecodeSettings
from .trace import TokenRecord

MAX_SEGMENTS = 100  # RSD's cap on reasoning steps, as in its authors' code (stop reason "max_steps")


class Writing(Protocol):
    """What a segment needs of its generation (easd.method.decoding.Generation)."""

    pair: ModelPair
    settings: DecodeSettings
    tokens: list[int]  # its prompt and the tokens emitted so far


@dataclass
class Segments:
    """An RSD generation's segments: who writes the current one, where it began, and the finished ones."""

    start: int  # the index in the generation's tokens where the current segment begins
    writer: str = "draft"  # "draft", or "target" once the PRM refused the draft's version of this segment
    reward: float | None = None  # the PRM's reward for the draft's version of the current segment
    texts: list[str] = field(default_factory=list)  # the finished segments, as the PRM reads them

    @property
    def full(self) -> bool:
        """The run has written as many segments as RSD allows."""
        return len(self.texts) >= MAX_SEGMENTS

    def copy(self) -> Segments:
        return Segments(self.start, self.writer, self.reward, list(self.texts))

    def ends(self, generation: Writing, new: list[int]) -> bool:
        """Whether the current segment ends with the tokens `new` after the generation's: its text holds the delimiter
        (matched on text: Qwen's tokenizer merges "\n\n" into tokens such as ".\n\n"), or an end token came."""
        if new and new[-1] in generation.pair.eos_ids:
            return True
        return generation.settings.rsd_delimiter in self.text(generation, new)

    def text(self, generation: Writing, new: list[int]) -> str:
        return generation.pair.tokenizer.decode(generation.tokens[self.start :] + new)

    def reward_for(self, generation: Writing, drafted: list[int], question: str) -> float:
        """The PRM's reward for the draft's version of the current segment, given the question and the segments
        before it (one PRM pass per segment: the PRM is a model of its own, outside the batch's caches)."""
        return generation.pair.prm.reward(question, [*self.texts, self.text(generation, drafted).strip()])

    def judge_draft(self, generation: Writing, drafted: list[int], reward: float, records: list[TokenRecord]) -> bool:
        """The draft's segment is kept whole if its reward reaches δ (True); else the target writes it again. Marks
        the records with the segment and its reward."""
        for record in records:
            record.rsd_step, record.rsd_reward = len(self.texts), reward
        if reward >= generation.settings.rsd_delta:
            self._finish(self.text(generation, drafted), len(generation.tokens) + len(drafted))
            return True
        self.writer, self.reward = "target", reward
        return False

    def take_target(self, generation: Writing, record: TokenRecord) -> None:
        """One token of the target's version of the segment; the segment ends with the delimiter or an end token."""
        record.rsd_step, record.rsd_reward = len(self.texts), self.reward
        if self.ends(generation, [record.token_id]):
            self._finish(self.text(generation, [record.token_id]), len(generation.tokens) + 1)

    def _finish(self, text: str, next_start: int) -> None:
        """The current segment is done (kept or written again): the next one is the draft's, from `next_start`."""
        self.texts.append(text.strip())
        self.start, self.writer, self.reward = next_start, "draft", None
