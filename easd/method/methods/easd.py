"""Entropy-aware speculative decoding (Su, Zhang and He, arXiv 2512.23765): SD, but a draft the standard test kept is
refused where both models are unsure and agree (the rule fires: easd.method.acceptance.rule_fires), and the target
chooses another token. The one difference from SD is its `refusal`."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from .. import acceptance as acc
from ..judging import Refusal, Signals
from ..origins import BONUS, DRAFT_ACCEPTED, TARGET_RESAMPLE, TESTED, Origin
from ..settings import RULES
from .sd import Speculative

EASD_PENALTY = Origin(
    "easd_penalty",
    "EASD penalty",
    "background: #f2b8a0; font-weight: bold; border-bottom: 3px solid #D55E00;",  # vermilion, bold and underlined
    "refused",
    "The draft proposed {drafted} {odds} and the target's test accepted it, but both models were uncertain and "
    "agreed, so EASD refused it and the target chose {chosen} instead.",
    ended="EASD refused a draft the standard test had accepted",
    needs=TESTED,
)


@dataclass(frozen=True, kw_only=True)
class Refusing(Speculative):
    """SD whose drafts, kept by the standard test, are refused where EASD's rule fires."""

    refuses: bool = True
    signals: bool = True  # its rule reads them

    def refusal(self, plan, signals: Signals | None) -> Refusal:
        """Where the rule fires, the kept draft c_i is refused: the target draws from p̃_i with c_i masked."""
        _, target = self.sampling(plan.generation.settings)  # the replacement is drawn as the target draws its tokens
        logits = plan.p_logits  # [k+1, V]

        def instead(n: int) -> torch.Tensor:  # [1, V]
            refused = torch.tensor([plan.drafted[n]], device=logits.device)
            return acc.penalty_probs(logits[n : n + 1], refused, target.temperature, target.top_p)

        return Refusal(signals.triggered, instead, EASD_PENALTY.name)

    def lane_title(self, settings) -> str:
        return f"{self.title}, rule {settings.rule}"  # its rule decides what it refuses

    def variant(self, spec: str, settings):
        """easd:RULE: one of the paper's ablations of the rule."""
        if spec not in RULES:
            raise ValueError(f"the rule must be one of {', '.join(RULES)}")
        return replace(settings, method=self.name, rule=spec)


EASD = Refusing(
    name="easd",
    title="EASD",
    models="TM + DM",
    origins=(DRAFT_ACCEPTED, TARGET_RESAMPLE, EASD_PENALTY, BONUS),
    intervention_origins=(EASD_PENALTY.name,),
    intervention=("penalty", "penalties"),
    grid=("tau_h", "tau_o"),
    bench="tau_h",
    bench_against="sd",
    variant_form=f"easd:RULE (RULE: {', '.join(RULES)})",
    follows="sd",  # the same decisions and random numbers until the first penalty: easd.method.prefix resumes SD's run
)
