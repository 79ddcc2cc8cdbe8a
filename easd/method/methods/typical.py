"""Typical acceptance (Cai et al., Medusa, arXiv 2401.10774, §3.3.1; vLLM's TypicalAcceptanceSampler): a draft is kept
where the target's probability of it exceeds min(ε, α·exp(−H(p))). EASD's mirror image: where the target is unsure
(H high) the bar falls and it keeps *more* drafts, where EASD refuses more. vLLM's defaults: ε = 0.09 (its posterior
threshold), α = 0.3 (its posterior alpha, √ε as Medusa recommends). A rejected draft's place takes the target's own
token, and a block whose drafts are all kept its bonus token (relaxing.py). H is the exact entropy of p (vLLM adds
1e-5 inside its logarithm). Medusa also keeps its first token unconditionally; vLLM tests every draft, as here.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import acceptance as acc
from ..knobs import Control, knob
from ..origins import BONUS, DRAFT_ACCEPTED
from ..trace import recorded
from .relaxing import TARGET_OWN, Relaxing, kept_origin


@dataclass(frozen=True)
class TypicalSettings:
    threshold: float = knob(
        0.09,
        "typical acceptance's hard bar ε: a draft whose target probability exceeds min(ε, α·exp(−H)) is kept",
        low=0,
        high=1,
        label="typical ε",
        short="posterior threshold",
        control=Control("slider", 0, 0.5, 0.01),
        sweep=(0.05, 0.09, 0.15),
    )  # vLLM's default posterior threshold; Medusa's ablation sweeps 0.01 to 0.25
    alpha: float = knob(
        0.3,
        "typical acceptance's entropy-scaled bar α: the bar is α·exp(−H(p)) where that is lower than ε",
        low=0,
        high=1,
        label="typical α",
        short="entropy-scaled bar",
        control=Control("slider", 0, 1, 0.05),
    )  # vLLM's default posterior alpha, √0.09


TYPICAL_KEPT = kept_origin(
    "typical_kept",
    "draft kept: typical acceptance",
    "background: #cde8f8; border-bottom: 3px double #CC79A7;",  # sky blue, a double reddish-purple line
    "typical acceptance (p(c) above min(ε, α·e^(−H)))",
    ("typical_p", "typical_bar"),
)


@dataclass
class TypicalRecord:
    typical_p: float = recorded(
        "p(c), the target's probability of the drafted token as the rule reads it (the run's temperature; 1 where greedy)",
        "float",
        low=0,
        high=1,
        label="p(c) judged",
    )
    typical_bar: float = recorded("min(ε, α·exp(−H(p))), the bar p(c) had to exceed", "float", low=0, high=1, label="bar")


@dataclass(frozen=True, kw_only=True)
class Typical(Relaxing):
    strict: bool = True  # vLLM's and Medusa's test: p(c) > the bar

    def bar(self, top, entropy, settings):
        own = self.own(settings)
        return acc.typical_bar(entropy, own.threshold, own.alpha)

    def record_of(self, p_c, bar, certificate, settings):
        return TypicalRecord(p_c, bar)

    def lane_title(self, settings) -> str:
        own = self.own(settings)
        return f"{self.title} (ε {own.threshold:g}, α {own.alpha:g})"

    def explains(self, record, settings) -> str:
        own, found = self.own(settings), record.own
        if not isinstance(found, TypicalRecord) or found.typical_p is None or found.typical_bar is None:
            return "This row's draft was not judged by typical acceptance (a bonus token), or its record lacks the bar."
        kept = found.typical_p > found.typical_bar
        return (
            f"Typical acceptance: the target gives the draft p(c) = {found.typical_p:.4f} against the bar "
            f"min(ε {own.threshold:g}, α {own.alpha:g} · e^(−H)) = {found.typical_bar:.4f}, so it was "
            f"{'kept' if kept else 'rejected'}; the margin p(c) − bar is {found.typical_p - found.typical_bar:+.4f} "
            "(a margin, not a certificate: the bar moves with p's entropy)."
        )


TYPICAL = Typical(
    name="typical",
    title="typical acceptance",
    models="TM + DM",
    origins=(DRAFT_ACCEPTED, TARGET_OWN, TYPICAL_KEPT, BONUS),
    intervention_origins=(TYPICAL_KEPT.name,),
    intervention=("draft kept off the target's top", "drafts kept off the target's top"),
    grid=("typical_threshold",),
    bench="typical_threshold",
    bench_against="sd",
    settings=TypicalSettings,
    record=TypicalRecord,
)
