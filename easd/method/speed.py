"""Why SD is faster, or slower, than the target alone on this machine: Leviathan et al.'s arithmetic with measured costs.

Words, in target-pass units (one unit: a target pass over 1 token for each row of the batch, so that a run that
shared its passes with other rows, as the page's two lanes do, is compared like with like: see `PassCost`):
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
it took part in, and `draft_rows` and `target_rows`, how many rows those passes served), and the
1-token target pass on the same machine (`PassCost` in the trace's info: the app measures it for
one row and for several as a pair loads, `python -m easd bench` from its one-row target-only runs).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .methods import METHODS
from .pair import ModelPair
from .seam import Caches
from .spec_metrics import SpecMetrics
from .trace import Trace

ONE_PASS = "target_pass_s"  # the trace info's key: seconds of a 1-token target pass over one row, measured alone
EXTRA_ROW = "target_pass_s_per_extra_row"  # the info's key: what each further row of the same pass adds
MEASURE_TOKENS = 64  # the prefix a measured pass reads: a short prompt's length
MEASURE_REPEATS = 5  # passes timed; the median is kept (the first pass of a context also sets it up)
MEASURE_ROWS = 8  # the wider pass measured: a class's few users, two lanes each


@dataclass(frozen=True)
class PassCost:
    """The unit of cost: seconds of a 1-token target pass over `rows` rows at once, taken as a line through the two
    passes measured, one row and `MEASURE_ROWS` rows. On a GPU the extra rows are nearly free; on a small CPU each
    adds nearly a row's cost. A run's passes are divided by the unit at the batch they ran in, so a draft pass shared
    by two lanes is compared with a target pass over two rows, not with a target pass over one: the page's c and r
    then agree with `bench`'s, which runs one row alone."""

    one_row: float
    per_extra_row: float = 0.0

    def at(self, rows: float) -> float:
        return self.one_row + self.per_extra_row * max(rows - 1, 0)

    def info(self) -> dict:
        return {ONE_PASS: self.one_row, EXTRA_ROW: self.per_extra_row}

    @classmethod
    def of_info(cls, info: dict) -> PassCost | None:
        """The cost a trace's info carries; None without a measured one-row pass (a trace from before the extra row
        was measured counts its passes as one row's)."""
        one_row, extra = info.get(ONE_PASS), info.get(EXTRA_ROW, 0.0)
        if not _positive(one_row) or not (_positive(extra) or extra == 0):
            return None
        return cls(float(one_row), float(extra))


def _positive(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < float("inf")


def predicted_speedup(alpha: float, k: int, c: float, r: float) -> float:
    """S(α, k, c, r) above: SD's expected tokens per unit of target-pass time, target-only's being 1."""
    tokens = k + 1 if alpha >= 1 else (1 - alpha ** (k + 1)) / (1 - alpha)
    return tokens / (k * c + r)


@dataclass(frozen=True)
class Speed:
    """A speculative run's speed, taken apart (see above); None fields were not measured."""

    k: int
    alpha_by_position: list[float]  # spec_metrics' conditional acceptance at draft positions 1..k; NaN where none reached
    alpha: float  # accepted drafts / judged drafts, over all positions
    tokens_per_pass: float  # tokens emitted per target pass
    c: float
    r: float
    predicted: float  # S(α, k, c, r) with this machine's measured c and r
    measured: float  # the runs' tokens/s against target-only's
    gpu_like: float  # S with r = 1: a machine where verifying k + 1 tokens costs one pass
    rows: float  # the rows its target passes served, on average: its unit is a 1-token target pass over as many

    @classmethod
    def of(cls, traces: list[Trace], cost: PassCost, target_rate: float | None = None) -> Speed | None:
        """The breakdown of finished runs of one speculative setting (one, or one per prompt), given the 1-token target
        pass's cost and, where it was measured, target-only's tokens/s alone (else 1 / the unit at the run's batch);
        None where the traces lack what it needs (not speculative, no pass times)."""
        if not traces or any(not METHODS[t.settings.method].verifies or not t.blocks for t in traces):
            return None
        stats = [t.stats for t in traces]
        sums = {name: sum(getattr(s, name) or 0 for s in stats) for name in TIMES}
        if not all(sums.values()):
            return None
        k, tokens = traces[0].settings.k, sum(len(t.records) for t in traces)
        metrics = SpecMetrics.of(traces)  # α per position is the conditional acceptance there
        if not metrics.num_drafts:
            return None
        alpha = sum(metrics.accepted_per_position) / sum(metrics.reached_per_position)
        by_position = metrics.conditional_acceptance
        # the batch a run's passes served, on average (a trace without the counts ran alone: one row)
        rows = sum(s.target_rows or s.target_calls for s in stats) / sums["target_calls"]
        draft_unit = cost.at(sum(s.draft_rows or s.draft_calls for s in stats) / sums["draft_calls"])
        target_unit = cost.at(rows)
        c = sums["draft_seconds"] / sums["draft_calls"] / draft_unit
        r = sums["target_seconds"] / sums["target_calls"] / target_unit
        return cls(
            k=k,
            alpha_by_position=by_position + [float("nan")] * (k - len(by_position)),
            alpha=alpha,
            tokens_per_pass=tokens / sums["target_calls"],
            c=c,
            r=r,
            predicted=predicted_speedup(alpha, k, c, r),
            measured=tokens / sums["seconds"] / (target_rate or 1 / target_unit),
            gpu_like=predicted_speedup(alpha, k, c, 1.0),
            rows=rows,
        )

    @classmethod
    def of_trace(cls, trace: Trace | None) -> Speed | None:
        """One finished run's breakdown, with the pass cost its info carries (`PassCost`); None without one."""
        cost = PassCost.of_info(trace.info) if trace is not None else None
        return cls.of([trace], cost) if cost is not None else None


TIMES = ("seconds", "target_seconds", "draft_seconds", "target_calls", "draft_calls")


def measure_pass_cost(pair: ModelPair, rows: int = MEASURE_ROWS) -> PassCost:
    """The 1-token target pass over one row and over `rows` rows, each alone on the machine, after a prefix of
    MEASURE_TOKENS tokens. The prefix is computed once, for the first row, and copied into the others: computed for
    each (untimed), it was most of the measuring, and where a prompt's token costs a decoded one's (llama.cpp's exact
    mode on a CPU) it held the app's start with the embedded pair for 26 s on 2 cores."""
    prefix = [pair.tokenizer.pad_id] * MEASURE_TOKENS
    caches = pair.target.caches(pair.vocab_size)
    caches.add_row(prefix, len(prefix) + 2)
    one_row = median_pass(caches, prefix)
    if rows <= 1:
        return PassCost(one_row)
    computed = caches.save_row(0)
    for _ in range(rows - 1):
        caches.add_row(prefix, len(prefix) + 2, start=computed)
    return PassCost(one_row, max(median_pass(caches, prefix) - one_row, 0.0) / (rows - 1))


def median_pass(caches: Caches, prefix: list[int], repeats: int = MEASURE_REPEATS) -> float:
    """Seconds of one pass over 1 new token for each row of `caches`, each holding `prefix`: the median of `repeats`."""
    rows = range(caches.rows)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        caches.logits(dict.fromkeys(rows, [*prefix, prefix[-1]]), dict.fromkeys(rows, 1))
        times.append(time.perf_counter() - started)
        for row in rows:
            caches.truncate(row, len(prefix))
    return sorted(times)[len(times) // 2]
