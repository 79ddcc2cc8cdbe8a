"""Reasoning steps, the unit RSD and SpecGuard check: text up to a delimiter ("\\n\\n" by default), or an end token,
and what both do with them: the draft writes a step (its passes until the step ends), and where the step is not kept
the target writes it again, a token a block (`Stepwise`; each says how it judges a step).

Matched on the decoded text, not on token ids: Qwen's tokenizer merges "\\n\\n" into tokens such as ".\\n\\n".
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import acceptance as acc
from ..judging import Proposal
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


@dataclass(frozen=True, kw_only=True)
class Stepwise(Method):
    """A method of reasoning steps. Its generation's state says who writes the current step (`writer`: "draft" or
    "target"), where the step began (`start`) and its settings (`settings.delimiter`)."""

    def plan(self, generation) -> tuple[int, bool]:
        """The draft writes on until its step ends (at most the room left), with no target pass; the target writes a
        token a block of a step it writes again."""
        return (generation.room(), False) if generation.state.writer == "draft" else (0, True)

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
