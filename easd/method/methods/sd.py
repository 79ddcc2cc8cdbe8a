"""Speculative decoding (Leviathan et al., 2023; Chen et al., 2023): the draft proposes k tokens, the target checks
them in one pass and keeps those its standard test accepts; lossless.

`Speculative` is every method of that block: EASD is the same object with `refuses` set (easd.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import acceptance as acc
from ..judging import Block, judge_block
from .base import Method


@dataclass(frozen=True, kw_only=True)
class Speculative(Method):
    """A block of k drafts checked by one target pass and judged by `judging.judge_block`."""

    verifies: bool = True

    def plan(self, generation) -> tuple[int, bool]:
        """k drafts, one fewer than the room left (the block's last token is the target's), and the target's pass."""
        return min(generation.settings.k, generation.room() - 1), True

    def propose(self, plan, logits: torch.Tensor) -> None:
        """c_i drawn from q̃_i, with the generation's own random numbers.  logits: [1, V]"""
        settings = plan.generation.settings
        plan.q_logits.append(logits)
        probs = acc.sampling_probs(logits, settings.temperature, settings.top_p)
        plan.drafted.append(int(acc.draw(probs, plan.generation.generator, settings.greedy)))

    def judge(self, plan) -> Block:
        generation = plan.generation
        q_logits = torch.cat(plan.q_logits) if plan.q_logits else plan.p_logits[:0]  # [k, V]; k = 0 near the end
        drafted = torch.tensor(plan.drafted, dtype=torch.long, device=plan.p_logits.device)  # [k]
        verdict = judge_block(
            q_logits, plan.p_logits, drafted, generation.settings, self.refuses, generation.generator, generation.pair.rounding
        )
        records = generation.recorder.block_records(plan.block, plan.position, plan.drafted, verdict)
        return Block(plan.block, plan.drafted, records, verdict.origin, generation)


SD = Speculative(name="sd", title="SD", models="TM + DM", origins=("draft_accepted", "target_resample", "bonus"))
