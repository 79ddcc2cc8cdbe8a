"""The statistics of the evaluation: Wilson intervals, the exact McNemar test, a paired bootstrap, majority votes."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable

import numpy as np

Z95 = 1.959963984540054


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
