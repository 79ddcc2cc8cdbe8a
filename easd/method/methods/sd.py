"""Speculative decoding (Leviathan et al., 2023; Chen et al., 2023): the draft proposes k tokens, the target checks
them in one pass and keeps those its standard test accepts; lossless.

`Speculative` is every method of that block. What one such method may change, each in a hook:
  sampling(settings)       each model's temperature and top-p (SD: the run's, for both)
  propose(plan, logits)    how c_i is drawn, and the q̃_i it was drawn from (None for a deterministic draft)
  refusal(plan, signals)   a rule against drafts the standard test kept (EASD's, easd.py; SD has none)
  test(plan)               a test of its own in place of the standard one (typical acceptance, relaxing.py)
and `signals`, whether its records carry EASD's signals (SD's do, so its lane can say what EASD would do).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import acceptance as acc
from ..judging import Block, Proposal, Refusal, Signals, Test, block_signals, judge_block
from ..origins import SPECULATIVE
from .base import Method


@dataclass(frozen=True, kw_only=True)
class Speculative(Method):
    """A block of k drafts checked by one target pass and judged by `judging.judge_block`."""

    verifies: bool = True

    def plan(self, generation) -> tuple[int, bool]:
        """k drafts, one fewer than the room left (the block's last token is the target's), and the target's pass."""
        return min(generation.settings.k, generation.room() - 1), True

    def sampling(self, settings) -> tuple[acc.Sampling, acc.Sampling]:
        """How (draft, target) draw their tokens: SD samples both at the run's temperature and top-p."""
        both = acc.Sampling(settings.temperature, settings.top_p)
        return both, both

    def propose(self, plan, logits: torch.Tensor) -> Proposal:
        """c_i drawn from q̃_i, with the generation's own random numbers; a greedy draft's q̃_i is none (one-hot at c_i).
        logits: [1, V]"""
        draft, _ = self.sampling(plan.generation.settings)
        q_tilde = draft.probs(logits)  # [1, V]
        token = int(acc.draw(q_tilde, plan.generation.generator, draft.greedy))
        return Proposal(token, None if draft.greedy else q_tilde)

    def refusal(self, plan, signals: Signals | None) -> Refusal | None:
        """Its rule against drafts the standard test kept: SD has none."""
        return None

    def test(self, plan) -> Test | None:
        """Its test of the drafts in place of the standard one: SD has none (the standard test decides)."""
        return None

    def judge(self, plan) -> Block:
        generation = plan.generation
        _, target = self.sampling(generation.settings)
        k = len(plan.drafted)
        q_logits = torch.cat(plan.q_logits[:k]) if k else plan.p_logits[:0]  # [k, V]; k = 0 near the end
        drafted = torch.tensor(plan.drafted, dtype=torch.long, device=plan.p_logits.device)  # [k]
        q_tilde = None if k == 0 or plan.q_tilde[0] is None else torch.cat(plan.q_tilde)  # [k, V]
        signals = block_signals(q_logits, plan.p_logits, generation.settings, generation.pair.rounding) if self.signals else None
        verdict = judge_block(
            target.probs(plan.p_logits),
            q_tilde,
            drafted,
            generation.generator,
            target.greedy,
            self.refusal(plan, signals),
            self.test(plan),
        )
        records = generation.recorder.block_records(
            plan.block, plan.position, plan.drafted, verdict, q_logits, plan.p_logits, signals
        )
        return Block(plan.block, plan.drafted, records, verdict.origin, generation)

    def lane_facts(self, trace, summary: dict) -> list[tuple[str, object]]:
        """Speculative decoding's two figures (tokens a target pass, the share of drafts kept), then the base's."""
        figures = [("mean acceptance length", "mean_acceptance_length"), ("draft acceptance rate", "draft_acceptance_rate")]
        return [(words, summary[key]) for words, key in figures] + super().lane_facts(trace, summary)


SD = Speculative(name="sd", title="SD", models="TM + DM", origins=SPECULATIVE, signals=True, bench="k")
