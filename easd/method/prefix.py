"""Shared-prefix evaluation: EASD runs that reuse the SD run they agree with.

With the same prompt, seed and settings, SD and EASD make identical decisions and draw identical
random numbers until EASD's first penalty (docs/method.md, "The method": randomness). The SD trace says where that is: the
first draft SD kept where the rule fires. So an EASD run (any rule, τ_H or τ_O, at the SD run's n)
can start from the SD run's checkpoint at the start of that block instead of from the prompt.
Its output equals a run from scratch; its time and call counts include the SD run's for the
shared part, so tokens/s stay comparable. `saved_seconds` is the decoding that was not repeated.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace

from .generation import Generation
from .methods import lookup
from .settings import DecodeSettings
from .trace import Trace
from .whatif import entropy_margins, first_penalty_block, would_be_fragile, would_fire


@dataclass
class PrefixRun:
    trace: Trace
    saved_seconds: float  # SD decoding time reused instead of repeated


@dataclass
class PrefixStart:
    """How an EASD variant starts from a finished SD run: done already, or a run to decode from a checkpoint."""

    saved_seconds: float  # SD decoding time it reuses
    trace: Trace | None = None  # the finished trace, when the rule never fires where SD kept a draft
    generation: Generation | None = None  # else: the run to decode, starting at the first penalty's block


def easd_start(sd: Generation, settings: DecodeSettings) -> PrefixStart:
    """The EASD run with `settings` (method easd, the SD run's seed, k, n, sampling) built on `sd`,
    which has finished and kept its caches (Generation(..., keep_kv=True))."""
    _check_compatible(sd.settings, settings)
    block = first_penalty_block(sd.trace, settings.rule, settings.tau_h, settings.tau_o)
    if block is None:  # EASD would never intervene: its run is the SD run
        return PrefixStart(sd.trace.stats.seconds, trace=_relabelled(sd.trace, settings))
    checkpoint = next(c for c in sd.checkpoints if c.block == block)
    easd = sd.resume_at(checkpoint, settings)
    _retrigger(easd.trace, settings)
    return PrefixStart(checkpoint.stats.seconds, generation=easd)


def easd_after_sd(sd: Generation, settings: DecodeSettings) -> PrefixRun:
    """`easd_start`, decoded to the end on its own."""
    start = easd_start(sd, settings)
    return PrefixRun(start.trace or start.generation.run(), start.saved_seconds)


def _check_compatible(sd: DecodeSettings, easd: DecodeSettings) -> None:
    same = ("k", "top_n", "temperature", "top_p", "max_new_tokens", "seed", "entropy")  # entropy: the H its trace holds
    if lookup(easd.method).follows != sd.method or any(getattr(sd, f) != getattr(easd, f) for f in same):
        raise ValueError(f"an EASD run can reuse an SD run only with the same {', '.join(same)}")


def _relabelled(trace: Trace, settings: DecodeSettings) -> Trace:
    relabelled = replace(trace, settings=settings, records=copy.deepcopy(trace.records), blocks=copy.deepcopy(trace.blocks))
    relabelled.stats = replace(trace.stats)
    _retrigger(relabelled, settings)
    return relabelled


def _retrigger(trace: Trace, settings: DecodeSettings) -> None:
    """Recompute `triggered`, the entropy margins and `fragile` on rows copied from the SD run,
    under this run's rule and thresholds, with the same functions the loop uses."""
    fires = would_fire(trace, settings.rule, settings.tau_h, settings.tau_o, settings.top_n)
    fragile = would_be_fragile(trace, settings.rule, settings.tau_h, settings.tau_o)
    h_draft_margin, h_target_margin = entropy_margins(trace, settings.tau_h)
    for i, record in enumerate(trace.records):
        if record.draft_token_id is None:
            continue
        record.triggered = bool(fires[i])
        if record.h_draft_tol is not None:
            record.fragile = bool(fragile[i])
            record.h_draft_margin, record.h_target_margin = float(h_draft_margin[i]), float(h_target_margin[i])
