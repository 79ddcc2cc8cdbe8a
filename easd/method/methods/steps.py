"""Reasoning steps, the unit RSD and SpecGuard check: text up to a delimiter ("\\n\\n" by default), or an end token,
and what both do with them: the draft writes a step, and where the step is not kept the target writes it again, a
token a block (`Stepwise`; each says how it judges a step).

The draft writes a step over as many of the batch's steps as it needs, `k` positions each, as an SD row drafts
(`Drafted`): a step of 40 tokens drafted in one go would hold every other row of the batch for 40 draft passes, and a
class's SD lane beside it would wait. The rows keep their drafts between the batch's steps (each row's `given`), and
the step is judged once every row's version of it has ended.

Matched on the decoded text, not on token ids: Qwen's tokenizer merges "\\n\\n" into tokens such as ".\\n\\n".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import acceptance as acc
from ..judging import Block, Proposal
from ..trace import TokenRecord
from .base import Method, draw_one


def step_text(generation, start: int, new: list[int]) -> str:
    """The text of the current step: the generation's tokens from `start` on, then `new`."""
    return generation.pair.tokenizer.decode(generation.tokens[start:] + new)


def step_ends(generation, start: int, new: list[int], delimiter: str) -> bool:
    """Whether the step that began at `start` ends with the tokens `new` after the generation's: its text holds the
    delimiter, or an end token came."""
    if new and new[-1] in generation.pair.eos_ids:
        return True
    return delimiter in step_text(generation, start, new)


@dataclass
class Drafted:
    """A row's version of the current step as the draft writes it, over the batch's steps: its tokens, their
    draft-only records, the least normalised log-probability among them (SpecGuard's confidence; 1 for none yet), and
    whether it ended (its delimiter, an end token, or no room left)."""

    tokens: list[int] = field(default_factory=list)
    records: list[TokenRecord] = field(default_factory=list)
    confidence: float = 1.0
    ended: bool = False

    def copy(self) -> Drafted:
        return Drafted(list(self.tokens), list(self.records), self.confidence, self.ended)

    def take(self, plan) -> int:
        """The tokens the row drafted in this batch step (after its `given`, the version so far), with their records;
        -> how many (their logits are plan.q_logits[:n])."""
        generation, new = plan.generation, plan.drafted[len(self.tokens) :]
        self.records += [
            generation.recorder.single_record(plan.block, plan.position + len(self.tokens) + i, token, plan.q_logits[i], "draft")
            for i, token in enumerate(new)
        ]
        self.tokens += new
        self.ended = plan.drafting_done or not new or len(self.tokens) >= generation.room()
        return len(new)


@dataclass(frozen=True, kw_only=True)
class Stepwise(Method):
    """A method of reasoning steps. Its generation's state says who writes the current step (`writer`: "draft" or
    "target"), where the step began (`start`), each row's version of it so far (`drafts`, one per row) and its
    settings (`settings.delimiter`)."""

    def plan_member(self, generation, member: int) -> tuple[int, bool]:
        """While the draft writes the step, each row whose version goes on drafts `k` more positions (at most the room
        left), with no target pass; the target writes a token a block, on the first row, of a step it writes again."""
        state = generation.state
        if state.writer != "draft":
            return (0, True) if member == 0 else (0, False)
        drafted = state.drafts[member]
        return (0, False) if drafted.ended else (min(generation.settings.k, generation.room() - len(drafted.tokens)), False)

    def given(self, generation, member: int = 0) -> list[int]:
        """The row's version of the step so far, which its caches hold and its drafts follow."""
        state = generation.state
        return list(state.drafts[member].tokens) if state.writer == "draft" else []

    def drafting(self, plans: list, ended: str) -> Block:
        """The step is not written yet: every row keeps what it drafted, and nothing is emitted."""
        for plan in plans:
            plan.keep = plan.drafted
        return Block(plans[0].block, [], [], ended, plans[0].generation)

    def draft_sampling(self, settings) -> acc.Sampling:
        """How the draft samples a step: at the run's temperature and top-p (SpecGuard's own temperature)."""
        return acc.Sampling(settings.temperature, settings.top_p)

    def propose(self, plan, logits) -> Proposal:
        """The step's next token; the step ends at its delimiter or an end token. Its q̃ is not kept: no token test
        reads it (a step is judged whole).  logits: [1, V]"""
        generation, state = plan.generation, plan.generation.state
        token = draw_one(generation, logits, self.draft_sampling(generation.settings))
        plan.drafting_done = step_ends(generation, state.start, [*plan.drafted, token], state.settings.delimiter)
        return Proposal(token, None)
