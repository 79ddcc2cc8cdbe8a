"""Relaxed acceptance: speculative decoding whose drafts are judged by a rule on the target's own distribution instead
of the standard test. Serving systems ship such rules (vLLM's typical acceptance, typical.py); a theory of them names
the family (arXiv 2606.30265: additive, multiplicative and top-m, relaxed.py). Each keeps the drafted token c outright
where the target's probability p(c) reaches the rule's bar, and where it does not, the target emits its own token, drawn
from its sampling distribution p̃ (its argmax where greedy), as vLLM's recovered token; a block whose drafts are all
kept ends with the bonus token, as SD's. None of these is lossless: they keep drafts the standard test would reject.

The distribution the rules read: the target's at the run's temperature and top-p, at temperature 1 where the run is
greedy (vLLM's sampler judges a greedy request's probabilities at temperature 1). A kept draft that is not the target's
likeliest token, which the strict greedy test would reject, has the method's own origin: its interventions.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import acceptance as acc
from ..judging import Block, Test
from ..origins import TESTED, Origin
from .sd import Speculative

BAR_TOP = 20  # the largest probabilities a bar may read: a top-m rule's m at most (the page keeps 20 candidates)

TARGET_OWN = Origin(
    "target_own",
    "target's own token (rule rejected)",
    "background: #f7d9a0; border-bottom: 2px solid #CC79A7;",  # orange, a reddish-purple line: a relaxed rule's rejection
    "rejected",
    "The draft proposed {drafted} {odds}; the rule rejected it, so the target drew {chosen} from its own distribution "
    "(vLLM's recovered token: no residual).",
    ended="the rule rejected a draft, and the target added its own token",
    needs=TESTED,
)


@dataclass(frozen=True, kw_only=True)
class Relaxing(Speculative):
    """SD judged by a rule of its own on p: its `bar` (the least p(c) it keeps), `record_of` (what its records say)."""

    strict: bool = False  # keep where p(c) > bar (typical acceptance's test), else where p(c) ≥ bar
    signals: bool = True  # its records carry the entropies too, as SD's, for the inspector and the what-if

    def judged(self, settings, p_logits: torch.Tensor) -> torch.Tensor:
        """p, the distribution the rule reads: the run's temperature and top-p, temperature 1 where greedy.  [k, V]"""
        return acc.Sampling(settings.temperature or 1.0, settings.top_p).probs(p_logits)

    def bar(self, top: torch.Tensor, entropy: torch.Tensor, settings) -> torch.Tensor:
        """The least p(c) the rule keeps at each drafted position, from p's largest probabilities in order and its
        entropy in nats (what a greedy trace records, so the what-if reads the same bar: easd.method.whatif).
        [k, n], [k] -> [k]"""
        raise NotImplementedError

    def keeps(self, p_c, bar):
        """Whether p(c) clears the bar (tensors or arrays, element-wise)."""
        return p_c > bar if self.strict else p_c >= bar

    def bars(self, p: torch.Tensor, settings) -> torch.Tensor:
        """`bar` of a whole distribution.  [k, V] -> [k]"""
        top = p.topk(min(BAR_TOP, p.shape[-1]), dim=-1).values
        return self.bar(top, acc.entropy_of_probs(p), settings)

    def certificate(self, p: torch.Tensor, drafted: torch.Tensor, settings) -> torch.Tensor | None:
        """For each kept draft, the least KL(p′ ‖ p) under which the rule would reject it (in nats), where it has a closed
        form; None where it has none (the inspector then gives the margin p(c) − bar, said to be one).  -> [k] or None"""
        return None

    def record_of(self, p_c: float, bar: float, certificate: float | None, settings):
        """Its own record of one examined draft: p(c) as the rule read it, its bar and certificate."""
        raise NotImplementedError

    def test(self, plan) -> Test:
        settings, k = plan.generation.settings, len(plan.drafted)
        drafted = torch.tensor(plan.drafted, dtype=torch.long, device=plan.p_logits.device)
        p = self.judged(settings, plan.p_logits[:k])  # [k, V]
        p_c, bar = acc.picked(p, drafted), self.bars(p, settings)
        keeps = self.keeps(p_c, bar)
        _, target = self.sampling(settings)
        p_tilde = target.probs(plan.p_logits)  # [k+1, V] where a rejected draft's token is drawn

        def instead(n: int) -> torch.Tensor:  # [1, V]
            return p_tilde[n : n + 1]

        return Test(keeps, instead, TARGET_OWN.name)

    def judge(self, plan) -> Block:
        """SD's block under its test; then each examined draft's record says p(c), the bar and the certificate, and a
        kept draft off the target's likeliest token takes the method's own origin."""
        block = super().judge(plan)
        settings = plan.generation.settings
        examined = [r for r in block.records if r.draft_token_id is not None]
        if not examined:
            return block
        drafted = torch.tensor([r.draft_token_id for r in examined], device=plan.p_logits.device)
        p = self.judged(settings, plan.p_logits[: len(examined)])
        p_c, bar = acc.picked(p, drafted).tolist(), self.bars(p, settings).tolist()
        certificates = self.certificate(p, drafted, settings)
        top = p.argmax(dim=-1).tolist()
        for i, record in enumerate(examined):
            certificate = None if certificates is None else float(certificates[i])
            if certificate is not None and not (0 <= certificate < float("inf")):  # rejected (NaN), or never (inf)
                certificate = None
            record.own = self.record_of(p_c[i], bar[i], certificate, settings)
            if record.origin == "draft_accepted" and record.draft_token_id != top[i]:
                record.origin = self.intervention_origins[0]
        return block

    def bench_line(self, traces: list) -> str:
        """SD's figures under vLLM's names, and the share of kept drafts that were not the target's likeliest."""
        kept = [r for t in traces for r in t.records if r.origin in ("draft_accepted", *self.intervention_origins)]
        off = sum(r.origin in self.intervention_origins for r in kept)
        return f"{super().bench_line(traces)}  kept off the target's top {off / max(len(kept), 1):.2f}"


def kept_origin(name: str, label: str, style: str, rule: str, judged: tuple[str, ...]) -> Origin:
    """The origin of a draft a relaxed rule kept although it is not the target's likeliest token; its rows carry the
    rule's `judged` fields (p(c) and the bar) beside the standard test's."""
    return Origin(
        name,
        label,
        style,
        "accepted",
        "The draft proposed {drafted} {odds}; it is not the target's likeliest token, which the strict test asks for, "
        f"but {rule} kept it.",
        ended="the run ended inside the block (an end token, or the token limit)",
        needs=(*TESTED, *judged),
        writer="draft",
    )
