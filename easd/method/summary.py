"""A run's summary metrics, counted in one place: the trace summary, the CLI's line, eval's results, the lanes' figures
and the API's brief read them. Speculative decoding's own figures come from easd.method.spec_metrics, under vLLM's
names; interventions are what the run's method (its table entry) says are its own."""

from __future__ import annotations

from .methods import METHODS
from .spec_metrics import SpecMetrics, refused
from .trace import Trace


def intervened(origin: str, method: str) -> bool:
    """Whether a token is an intervention of its run's method (easd.method.methods: EASD's penalty, MTI's guided token,
    a token of a step RSD's target wrote again after the PRM refused the draft's)."""
    return method in METHODS and METHODS[method].intervened(origin)


def summarize(trace: Trace) -> dict:
    """The summary metrics (docs/app-and-api.md, "Trace files"). Speculative decoding's own figures (mean acceptance
    length, draft acceptance rate, conditional acceptance by position, the acceptance-length histogram) come from
    easd.method.spec_metrics, under vLLM's names.

    `examined` counts the drafted tokens the standard test looked at, `accepted` those it kept.
    """
    records, stats = trace.records, trace.stats
    spec = SpecMetrics.of([trace])  # counts the drafts once: what the standard test examined and what it kept
    examined, accepted = sum(spec.reached_per_position), spec.num_accepted_tokens
    penalized = [r.position for r in records if refused(r)]  # EASD's penalties, or any method's refusals
    interventions = sum(intervened(r.origin, trace.settings.method) for r in records)
    fired = sum(bool(r.triggered) for r in records if r.draft_token_id is not None)
    fragile = sum(bool(r.fragile) for r in records if r.draft_token_id is not None)
    fragile_penalties = sum(bool(r.fragile) for r in records if refused(r))
    blocks = len({r.block for r in records})
    seconds = stats.seconds
    return {
        "new_tokens": len(records),
        "accepted": accepted,
        "examined": examined,
        "blocks": blocks,
        "seconds": seconds,
        "tokens_per_s": len(records) / seconds if seconds else None,
        "target_calls": stats.target_calls,
        "draft_calls": stats.draft_calls,
        **spec.summary(),
        "penalized": len(penalized),
        "penalized_rate": len(penalized) / len(records) if records else None,
        "interventions": interventions,  # tokens a method chose on purpose (`intervened`)
        "first_penalty_position": penalized[0] if penalized else None,
        "fired": fired,  # drafted positions where the rule fired (in SD runs too)
        "fragile": fragile,  # drafted positions whose decision (fired or not) could flip by rounding
        "fragile_penalties": fragile_penalties,
        "stop_reason": stats.stop_reason,
    }
