"""The relaxed acceptance rules of "When Is a Draft Accepted? A Theory of Acceptance in Speculative Decoding" (arXiv
2606.30265; only its abstract was reachable here): where the strict greedy test keeps a draft only if it is the
target's likeliest token, these keep it where its target probability p(c) is close enough to the top:
  additive        p(c) ≥ max p − δ
  multiplicative  p(c) ≥ λ·max p
  top-m           c is among the target's m likeliest tokens
δ = 0, λ = 1 and m = 1 are the strict test itself (greedy, they equal SD token for token). The abstract's "exact KL
divergence required for rejection" is each kept draft's certificate here: the least KL(p′ ‖ p) over every p′ under
which the rule rejects c, in closed form (easd.method.acceptance.relaxed_certificate; derived in docs/method.md,
checked against a numerical optimum in the tests). The rule is a setting (`rule`), each with its own strength;
rejections and bonus tokens as relaxing.py says.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .. import acceptance as acc
from ..knobs import Control, knob
from ..origins import BONUS, DRAFT_ACCEPTED
from ..trace import recorded
from .relaxing import BAR_TOP, TARGET_OWN, Relaxing, kept_origin

SYMBOLS = {"additive": "δ", "multiplicative": "λ", "top_m": "m"}


@dataclass(frozen=True)
class RelaxedSettings:
    rule: str = knob(
        "multiplicative",
        "which relaxed rule keeps a draft: additive (p(c) ≥ max p − δ), multiplicative (p(c) ≥ λ·max p) or top_m "
        "(c among the target's m likeliest)",
        choices=acc.RELAXED_RULES,
        label="relaxed rule",
        short="how a draft near the top is kept",
        control=Control("choice"),
    )
    delta: float = knob(
        0.1,
        "the additive rule's δ: a draft is kept where its target probability is within δ of the top's (0: strict)",
        low=0,
        high=1,
        label="relaxed δ",
        short="additive: within δ of the top",
        control=Control("slider", 0, 0.5, 0.01),
    )
    ratio: float = knob(
        0.5,
        "the multiplicative rule's λ: a draft is kept where its target probability is at least λ times the top's (1: strict)",
        low=0,
        high=1,
        label="relaxed λ",
        short="multiplicative: at least λ of the top",
        control=Control("slider", 0, 1, 0.05),
        sweep=(0.25, 0.5, 0.75),
    )
    top: int = knob(
        2,
        "the top-m rule's m: a draft is kept where it is among the target's m likeliest tokens (1: strict)",
        low=1,
        high=BAR_TOP,
        label="relaxed m",
        short="top-m: among the m likeliest",
        control=Control("slider", 1, 10, 1),
    )


RELAXED_KEPT = kept_origin(
    "relaxed_kept",
    "draft kept: relaxed rule",
    "background: #cde8f8; border-bottom: 3px dashed #CC79A7;",  # sky blue, a dashed reddish-purple line
    "the relaxed rule",
    ("relaxed_p", "relaxed_bar"),
)


@dataclass
class RelaxedRecord:
    relaxed_p: float = recorded(
        "p(c), the target's probability of the drafted token as the rule reads it (the run's temperature; 1 where greedy)",
        "float",
        low=0,
        high=1,
        label="p(c) judged",
    )
    relaxed_bar: float = recorded("the least p(c) the rule keeps at this position", "float", low=-1, high=1, label="bar")
    relaxed_certificate: float = recorded(
        "a kept draft's certificate: the least KL(p′ ‖ p) in nats under which the rule would reject it (empty: rejected, "
        "or no move of p rejects it)",
        "float",
        low=0,
        label="KL to reject (nats)",
    )


@dataclass(frozen=True, kw_only=True)
class Relaxed(Relaxing):
    def bar(self, top, entropy, settings):
        own = self.own(settings)
        return acc.relaxed_bar(top, own.rule, own.delta, own.ratio, own.top)

    def certificate(self, p, drafted, settings):
        own = self.own(settings)
        return acc.relaxed_certificate(p, drafted, own.rule, own.delta, own.ratio, own.top)

    def record_of(self, p_c, bar, certificate, settings):
        return RelaxedRecord(p_c, bar, certificate)

    def lane_title(self, settings) -> str:
        own = self.own(settings)
        return f"{self.title} ({own.rule}, {SYMBOLS[own.rule]} {strength(own):g})"

    def variant(self, spec: str, settings):
        """relaxed:RULE: one of the rules, at its strength's setting."""
        if spec not in acc.RELAXED_RULES:
            raise ValueError(f"the rule must be one of {', '.join(acc.RELAXED_RULES)}")
        return replace(settings, method=self.name).with_own(self.name, replace(self.own(settings), rule=spec))

    def explains(self, record, settings) -> str:
        own, found = self.own(settings), record.own
        if not isinstance(found, RelaxedRecord) or found.relaxed_p is None or found.relaxed_bar is None:
            return "This row's draft was not judged by the relaxed rule (a bonus token), or its record lacks the bar."
        rule = {
            "additive": f"max p − δ ({own.delta:g})",
            "multiplicative": f"λ ({own.ratio:g}) · max p",
            "top_m": f"the {ordinal(own.top)} likeliest token's probability",
        }[own.rule]
        kept = found.relaxed_p >= found.relaxed_bar
        said = f"Relaxed acceptance ({own.rule}): the target gives the draft p(c) = {found.relaxed_p:.4f} against {rule} = {found.relaxed_bar:.4f}, so it was "
        if not kept:
            return said + f"rejected, by a margin of {found.relaxed_p - found.relaxed_bar:+.4f} (a margin, not a certificate)."
        if found.relaxed_certificate is None:
            return said + "kept; no move of the target's distribution could reject it."
        return said + (
            f"kept. Certificate: the target's distribution would have to move by KL {found.relaxed_certificate:.4f} nats "
            "before the rule rejected it."
        )


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, …, 11th, 12th, 13th, 21st."""
    ending = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{ending}"


def strength(own: RelaxedSettings) -> float:
    """The setting of its rule that says how far from the top it keeps: δ, λ or m."""
    return {"additive": own.delta, "multiplicative": own.ratio, "top_m": own.top}[own.rule]


RELAXED = Relaxed(
    name="relaxed",
    title="relaxed",
    models="TM + DM",
    origins=(DRAFT_ACCEPTED, TARGET_OWN, RELAXED_KEPT, BONUS),
    intervention_origins=(RELAXED_KEPT.name,),
    intervention=("draft kept off the target's top", "drafts kept off the target's top"),
    grid=("relaxed_ratio",),
    bench="relaxed_ratio",
    bench_against="sd",
    variant_form=f"relaxed:RULE (RULE: {', '.join(acc.RELAXED_RULES)})",
    settings=RelaxedSettings,
    record=RelaxedRecord,
)
