"""The statistics of the evaluation: Wilson intervals, the exact McNemar test, a paired bootstrap, majority votes;
of `study`: how many problems a paired comparison needs (McNemar's power); of `acceptance`: Spearman's ρ and a
bootstrap that resamples whole questions; and of `bench`: a figure's spread over repetitions."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

Z95 = 1.959963984540054  # z_{1−α/2} at α = 0.05
Z80 = 0.8416212335729143  # z_{1−β} at 80% power


def wilson(correct: int, total: int, z: float = Z95) -> tuple[float, float, float]:
    """(accuracy, low, high): the Wilson score interval, sensible even at 0% or 100%."""
    if total == 0:
        return math.nan, math.nan, math.nan
    p = correct / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return p, centre - half, centre + half


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value from the discordant pairs: a binomial test of only_a vs only_b at 1/2."""
    n = only_a + only_b
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(only_a, only_b) + 1)) / 2**n
    return min(1.0, 2 * tail)


# --- how many problems: the power of McNemar's test ----------------------------------------------

# The gain the lab sizes a comparison for by default, in points (`study --effect`, eval's paired.csv): the EASD paper's
# average gain over the target alone with its Qwen2.5 7B → 32B pair (its Table 1); greedy SD equals the target, so it
# is a gain over SD too
EFFECT_POINTS = 3.5


def mcnemar_problems(discordant: float, difference: float, z_alpha: float = Z95, z_power: float = Z80) -> int | None:
    """The pairs (problems) McNemar's test needs to tell two methods apart at α = 0.05, two-sided, with 80% power
    (the z's say otherwise), where they disagree on a share ψ = `discordant` of the problems and their accuracies
    differ by δ = `difference` (a share: 0.035 for 3.5 points). Connor (1987), the normal approximation:

        n = [z_{1−α/2} √ψ + z_{1−β} √(ψ − δ²)]² / δ²

    rounded up. None where no n can: δ = 0, or |δ| > ψ (a difference needs at least as many disagreements: δ is
    the share where only one method is right minus the share where only the other is, and ψ their sum)."""
    need = _mcnemar_need(discordant, abs(difference), z_alpha, z_power)
    return None if need is None else math.ceil(need - 1e-9)  # a float a hair over a whole number is that number


def detectable_difference(discordant: float, problems: int, z_alpha: float = Z95, z_power: float = Z80) -> float | None:
    """The smallest |δ| that `problems` pairs detect at that power (`mcnemar_problems`' formula solved for δ, by
    bisection: the pairs it needs fall as δ grows); None where even δ = ψ, every disagreement one way, needs more
    pairs than there are (or no disagreement was seen: ψ = 0)."""
    fits = lambda delta: _mcnemar_need(discordant, delta, z_alpha, z_power) <= problems  # noqa: E731
    if problems < 1 or not 0 < discordant <= 1 or not fits(discordant):
        return None
    low, high = 0.0, discordant  # high always fits, low never does
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (low, middle) if fits(middle) else (middle, high)
    return high


def _mcnemar_need(discordant: float, difference: float, z_alpha: float, z_power: float) -> float | None:
    if not 0 < difference <= discordant <= 1:
        return None
    return (z_alpha * math.sqrt(discordant) + z_power * math.sqrt(discordant - difference**2)) ** 2 / difference**2


def paired_bootstrap(a: np.ndarray, b: np.ndarray, samples: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """95% interval of mean(a) − mean(b), resampling paired items (problems) with replacement."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) == 0:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(a), size=(samples, len(a)))
    differences = a[picks].mean(axis=1) - b[picks].mean(axis=1)
    low, high = np.percentile(differences, [2.5, 97.5])
    return float(low), float(high)


def average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n of `values`, tied values sharing the mean of their ranks (as scipy.stats.rankdata's default)."""
    _, tie_group, sizes = np.unique(values, return_inverse=True, return_counts=True)
    last = np.cumsum(sizes)  # the rank of the last value of each tie group, groups in ascending order
    return (last - (sizes - 1) / 2)[tie_group]


def spearman(x, y) -> float:
    """Spearman's ρ: Pearson's correlation of the two variables' average ranks (scipy.stats.spearmanr's ρ); NaN with
    fewer than two pairs or where either variable is constant, which no correlation describes."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 2:
        return math.nan
    rx, ry = average_ranks(x), average_ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return math.nan
    return float(np.corrcoef(rx, ry)[0, 1])


def cluster_bootstrap(
    statistic: Callable[..., float], clusters: list[tuple[np.ndarray, ...]], samples: int = 2_000, seed: int = 0
) -> tuple[float, float]:
    """95% percentile interval of `statistic` over resamples of whole clusters (questions) with replacement: each
    cluster holds its observations' columns, and a resample joins the chosen clusters' columns. Observations within a
    cluster are dependent (tokens of one answer), so they are drawn together, never one by one. Resamples where the
    statistic is NaN (a constant variable) are left out; NaN for both ends where fewer than half remain."""
    if not clusters:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    found = []
    for _ in range(samples):
        picks = rng.integers(0, len(clusters), size=len(clusters))
        columns = (np.concatenate([clusters[i][c] for i in picks]) for c in range(len(clusters[0])))
        found.append(statistic(*columns))
    values = np.asarray(found)
    values = values[~np.isnan(values)]
    if len(values) < samples / 2:
        return math.nan, math.nan
    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high)


def majority(answers: list[str | None], same: Callable[[str, str], bool] = operator.eq) -> str | None:
    """The most common answer, answers that `same` takes for one counted together (the group's first answer speaks for
    it: a grader's equivalence, so that "B" and "(B)" are one vote); the earliest group among ties; None if there is
    no answer."""
    groups: list[list[str]] = []
    for answer in answers:
        if answer is None:
            continue
        group = next((g for g in groups if same(answer, g[0])), None)
        if group is None:
            groups.append([answer])
        else:
            group.append(answer)
    return max(groups, key=len)[0] if groups else None  # max keeps the first of equals: the earliest group


# --- repeated timings ---------------------------------------------------------------------------

T95 = {2: 12.706, 3: 4.303, 4: 3.182, 5: 2.776, 6: 2.571, 7: 2.447, 8: 2.365, 9: 2.306, 10: 2.262}  # Student's t, n − 1 df


@dataclass(frozen=True)
class Spread:
    """A figure measured once per repetition: its median, its range, and how sure the mean is.

    `half_width` is the 95% interval of the mean, as a share of the median (Student's t over the repetitions);
    `needed` is how many repetitions would bring it within `within` (±3%), at the spread seen."""

    median: float
    low: float
    high: float
    n: int
    half_width: float  # NaN with one repetition
    needed: int | None  # None with one repetition

    def line(self, form: str = "{:.2f}") -> str:
        shown = form.format(self.median)
        if self.n == 1:
            return f"{shown} (one repetition: no spread)"
        return (
            f"{shown} (median; {form.format(self.low)}–{form.format(self.high)} over {self.n} repetitions, "
            f"mean ±{100 * self.half_width:.1f}% at 95%; {self.needed} for ±3%)"
        )


def spread(values: list[float], within: float = 0.03) -> Spread:
    """The Spread of a figure's per-repetition values."""
    x = np.asarray(values, dtype=float)
    median, n = float(np.median(x)), len(x)
    if n < 2:
        return Spread(median, median, median, n, math.nan, None)
    sd = float(x.std(ddof=1))
    if not median:
        return Spread(median, float(x.min()), float(x.max()), n, math.nan, None)
    width = lambda m: T95.get(m, Z95) * sd / math.sqrt(m) / abs(median)  # noqa: E731
    needed = next((m for m in range(2, 10_000) if width(m) <= within), 10_000)
    return Spread(median, float(x.min()), float(x.max()), n, width(n), needed)
