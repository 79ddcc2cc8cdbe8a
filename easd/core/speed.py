"""Why SD is faster, or slower, than the target alone on this machine: Leviathan et al.'s arithmetic with measured costs.

Words, in target-pass units (one unit: a target pass over 1 token, measured alone):
  c       what a draft pass costs, per drafted token
  r       what the verify pass over k + 1 tokens costs (1 on a GPU, where a few more tokens are nearly free;
          about k + 1 on a small CPU, where a pass costs per token)
  α       the chance the target accepts a drafted token, per draft position (then averaged)

A block drafts k tokens and verifies them in one pass: it costs k·c + r units and emits
(1 − α^{k+1}) / (1 − α) tokens on average (Leviathan et al. 2023, eq. 1, there with r = 1).
Target-only emits one token per unit. So SD's expected speed-up over target-only is

    S(α, k, c, r) = (1 − α^{k+1}) / ((1 − α) · (k·c + r))

Every figure here comes from a run's own trace: its blocks (α per position, tokens per target
pass), its pass times (`RunStats.draft_seconds` and `target_seconds`, the wall time of the passes
it took part in), and one 1-token target pass on the same machine (`ONE_PASS` in the trace's info:
the app measures it as a pair loads, `python -m easd bench` from its target-only runs).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .pair import ModelPair
from .trace import Trace

ONE_PASS = "target_pass_s"  # the trace info's key: seconds of a 1-token target pass, measured alone
MEASURE_TOKENS = 64  # the prefix a measured pass reads: a short prompt's length
MEASURE_REPEATS = 5  # passes timed; the median is kept (the first pass of a context also sets it up)


def predicted_speedup(alpha: float, k: int, c: float, r: float) -> float:
    """S(α, k, c, r) above: SD's expected tokens per unit of target-pass time, target-only's being 1."""
    tokens = k + 1 if alpha >= 1 else (1 - alpha ** (k + 1)) / (1 - alpha)
    return tokens / (k * c + r)


def judged_by_position(trace: Trace) -> tuple[list[int], list[int]]:
    """Per draft position i (1..k): how many blocks judged the draft there, and how many accepted it. A block judges
    its drafts in order up to the first it refuses (or all of them): positions 1..n+1 with n accepted."""
    accepted: dict[int, int] = {}
    for record in trace.records:
        if record.origin == "draft_accepted":
            accepted[record.block] = accepted.get(record.block, 0) + 1
    k = max((len(block.drafted) for block in trace.blocks), default=0)
    judged, kept = [0] * k, [0] * k
    for block in trace.blocks:
        n = accepted.get(block.index, 0)
        for i in range(min(n + 1, len(block.drafted))):
            judged[i] += 1
            kept[i] += i < n
    return judged, kept


@dataclass(frozen=True)
class Speed:
    """A speculative run's speed, taken apart (see above); None fields were not measured."""

    k: int
    alpha_by_position: list[float]  # NaN where no block reached the position
    alpha: float  # accepted drafts / judged drafts, over all positions
    tokens_per_pass: float  # tokens emitted per target pass
    c: float
    r: float
    predicted: float  # S(α, k, c, r) with this machine's measured c and r
    measured: float  # the runs' tokens/s against target-only's
    gpu_like: float  # S with r = 1: a machine where verifying k + 1 tokens costs one pass

    @classmethod
    def of(cls, traces: list[Trace], one_pass: float, target_rate: float | None = None) -> Speed | None:
        """The breakdown of finished runs of one speculative setting (one, or one per prompt), given a 1-token target
        pass's seconds and, where it was measured, target-only's tokens/s (else 1 / `one_pass`); None where the
        traces lack what it needs (not speculative, no pass times)."""
        if not traces or not one_pass or any(t.settings.method not in ("sd", "easd") or not t.blocks for t in traces):
            return None
        stats = [t.stats for t in traces]
        sums = {name: sum(getattr(s, name) or 0 for s in stats) for name in TIMES}
        if not all(sums.values()):
            return None
        k, tokens = traces[0].settings.k, sum(len(t.records) for t in traces)
        judged, kept = [0] * k, [0] * k
        for trace in traces:
            for i, (j, a) in enumerate(zip(*judged_by_position(trace))):
                judged[i], kept[i] = judged[i] + j, kept[i] + a
        alpha = sum(kept) / sum(judged)
        c = sums["draft_seconds"] / sums["draft_calls"] / one_pass
        r = sums["target_seconds"] / sums["target_calls"] / one_pass
        return cls(
            k=k,
            alpha_by_position=[a / j if j else float("nan") for a, j in zip(kept, judged)],
            alpha=alpha,
            tokens_per_pass=tokens / sums["target_calls"],
            c=c,
            r=r,
            predicted=predicted_speedup(alpha, k, c, r),
            measured=tokens / sums["seconds"] / (target_rate or 1 / one_pass),
            gpu_like=predicted_speedup(alpha, k, c, 1.0),
        )

    @classmethod
    def of_trace(cls, trace: Trace | None) -> Speed | None:
        """One finished run's breakdown, with the 1-token pass its info carries (`ONE_PASS`); None without one."""
        one_pass = trace.info.get(ONE_PASS) if trace is not None else None
        if isinstance(one_pass, bool) or not isinstance(one_pass, (int, float)) or not 0 < one_pass < float("inf"):
            return None
        return cls.of([trace], float(one_pass))


TIMES = ("seconds", "target_seconds", "draft_seconds", "target_calls", "draft_calls")


def measure_one_pass(pair: ModelPair, tokens: int = MEASURE_TOKENS, repeats: int = MEASURE_REPEATS) -> float:
    """Seconds of one target pass over 1 new token after `tokens` tokens, alone: the median of `repeats`."""
    prefix = [pair.tokenizer.pad_id] * tokens
    caches = pair.target.caches(pair.vocab_size)
    caches.add_row(prefix, tokens + 2)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        caches.logits({0: [*prefix, prefix[-1]]}, {0: 1})
        times.append(time.perf_counter() - started)
        caches.truncate(0, tokens)
    return sorted(times)[len(times) // 2]
