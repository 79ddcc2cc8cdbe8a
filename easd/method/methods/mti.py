"""MTI, minimal test-time intervention (Yang et al., 2025): target-only, but where the target is unsure it is guided.

Where the target's entropy exceeds τ, the target reads the row once more with a negative prompt after the context
(the step's second look), and the token is drawn from log p_u + ω (log p_c − log p_u) (classifier-free guidance:
`guided_logits`), p_u being the target's distribution after the negative prompt; ω = 1 is plain
target-only. MTI's reference code sets neither default; the EASD paper searches an "intervention scale β" in
{0.5, 1.0, 1.5, 2.0}, which may be τ or ω − 1: `sweep --grid mti` sweeps both (docs/method.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...errors import SettingsError
from .. import acceptance as acc
from ..judging import Block
from ..knobs import Control, knob
from ..origins import TARGET, Origin
from ..trace import Candidate, recorded
from .base import Method, draw_one

MTI_GUIDED = Origin(
    "mti_guided",
    "MTI guided",
    "background: #f6eea0; font-weight: bold; border-bottom: 3px dotted #0072B2;",  # yellow, blue dots
    "chosen",
    "The target was unsure here, so MTI also read it after the negative prompt and pushed away from that: {chosen} "
    "came from the guided distribution.",
    needs=("h_target",),
)


@dataclass
class MtiRecord:
    guided_top: list[Candidate] = recorded(
        "MTI's guided distribution's top candidates where it guided (target_top holds the target's without guidance)",
        "candidates",
        label="guided token",
        beside="target token, unguided",
    )


@dataclass(frozen=True)
class MtiSettings:
    tau: float = knob(
        1.0,
        "MTI guides a token where the target's entropy (nats) exceeds this",
        low=0,
        unit="nats",
        label="MTI τ",
        short="guide where the target's entropy exceeds (nats)",
        control=Control("slider", 0, 4, 0.05),
        sweep=(0.1, 0.5, 1.0, 1.5, 2.0),
    )
    # ω < 1 would pull towards the negative prompt; past 10 the guidance swamps the model's own distribution
    omega: float = knob(
        1.5,
        "MTI's guidance strength ω: 1 is none",
        low=1,
        high=10,
        label="MTI ω",
        short="guidance strength (1 = none)",
        control=Control("slider", 1, 10, 0.1),
    )  # swept at its one value unless told: the paper's β grid {0.5, 1, 1.5, 2} read as ω − 1 is 1.5,2,2.5,3
    # a short instruction: its tokens take cache room at every guided position
    negative: str = knob(
        "OUTPUT ERROR",
        "MTI's negative prompt, read after the context where the target is unsure",
        low=1,
        high=1_000,
        nonblank=True,
        label="MTI negative prompt",
        short="read after the context",
        control=Control("text"),
    )


@dataclass(frozen=True, kw_only=True)
class Guided(Method):
    """Target-only, with a second look where the target is unsure (its state: the negative prompt's token ids)."""

    def start(self, generation) -> list[int]:
        """The negative prompt as token ids (no special tokens added); SettingsError if it leaves the prompt no room."""
        pair = generation.pair
        ids = pair.tokenizer.encode(self.own(generation.settings).negative)
        if generation.prompt_length + len(ids) >= pair.context_length:
            raise SettingsError(
                "mti_negative",
                f"is {len(ids):,} tokens; after the prompt's {generation.prompt_length:,} the model's context of "
                f"{pair.context_length:,} tokens has no room left for it and a new token: shorten one of them",
            )
        return ids

    def extra_room(self, generation) -> int:
        return len(generation.state)

    def second_look(self, plan) -> list[int] | None:
        """The negative prompt, where the target's entropy (nats, temperature 1) exceeds τ."""
        return plan.generation.state if unsure(plan.p_logits, self.own(plan.generation.settings).tau) else None

    def judge(self, plan) -> Block:
        """The token from the guided logits where the target looked again, else from its own."""
        generation = plan.generation
        omega = self.own(generation.settings).omega
        guided = None if plan.second_logits is None else guided_logits(plan.p_logits, plan.second_logits, omega)
        token = draw_one(generation, plan.p_logits if guided is None else guided)
        record = generation.recorder.single_record(plan.block, plan.position, token, plan.p_logits, "target")
        if guided is not None:
            record.origin = MTI_GUIDED.name
            record.own = MtiRecord(generation.recorder.top(acc.raw_probs(guided))[0])
        return Block(plan.block, [], [record], record.origin, generation)

    def explains(self, record, settings) -> str:
        own = self.own(settings)
        if not isinstance(record.h_target, (int, float)) or isinstance(record.h_target, bool):
            return "This row does not record the target's entropy."
        if record.origin != MTI_GUIDED.name:
            return f"H_target = {record.h_target:.3f} nats ≤ τ = {own.tau:g}: MTI did not intervene, so this is the target's own choice."
        return (
            f"H_target = {record.h_target:.3f} nats > τ = {own.tau:g}: one more target pass read the context followed by "
            f"the negative prompt “{own.negative}” (p_u), and the token came from log p_u + ω (log p − log p_u) "
            f"with ω = {own.omega:g}."
        )

    def bench_line(self, traces: list) -> str:
        """The share of tokens it guided, and its target passes per token (its second looks are its cost)."""
        tokens = sum(len(t.records) for t in traces)
        guided = sum(self.intervened(r.origin) for t in traces for r in t.records)
        passes = sum(t.stats.target_calls for t in traces)
        return f"guided {guided / tokens:.3f}  target passes/token {passes / tokens:.3f}"


def unsure(p_logits: torch.Tensor, tau: float) -> bool:
    """Whether MTI guides this token: the target's entropy (nats, temperature 1) exceeds τ.  p_logits: [1, V]"""
    return bool(acc.entropy(p_logits)[0] > tau)


def guided_logits(conditional: torch.Tensor, negative: torch.Tensor, omega: float) -> torch.Tensor:
    """MTI's guided distribution, as logits: log p̃ = log p_u + ω (log p_c − log p_u), up to a constant.  [B, V] -> [B, V]

    p_c is the target's distribution after the context (`conditional`), p_u after the context and the
    negative prompt (`negative`). Written as log p_c + (ω − 1)(log p_c − log p_u) and shifted by
    log-sum-exp (softmax ignores a constant), so that ω = 1 gives back `conditional` bit for bit. A token
    that either model rules out (−inf) gets no push either way.
    """
    conditional = conditional.float()
    push = torch.log_softmax(conditional, dim=-1) - torch.log_softmax(negative.float(), dim=-1)
    push = torch.where(torch.isfinite(push), push, torch.zeros_like(push))
    return conditional + (omega - 1) * push


MTI = Guided(
    name="mti",
    title="MTI",
    models="TM",
    origins=(TARGET, MTI_GUIDED),
    intervention_origins=(MTI_GUIDED.name,),
    intervention=("guided token", "guided tokens"),
    grid=("mti_tau", "mti_omega"),  # the paper's "intervention scale β" may be either ω or τ: docs/method.md
    bench="mti_tau",
    settings=MtiSettings,
    record=MtiRecord,
)
