"""Wilson intervals, the exact McNemar test, the paired bootstrap and majority votes, against known values."""

import numpy as np
import pytest

from easd.lab.stats import majority, mcnemar_exact, paired_bootstrap, spread, wilson


@pytest.mark.parametrize(
    "correct, total, low, high",
    [(0, 10, 0.0, 0.2775), (5, 10, 0.2366, 0.7634), (8, 10, 0.4902, 0.9433), (10, 10, 0.7225, 1.0), (81, 263, 0.2553, 0.3662)],
)
def test_wilson_matches_published_values(correct, total, low, high):
    p, lo, hi = wilson(correct, total)
    assert p == correct / total and lo == pytest.approx(low, abs=1e-4) and hi == pytest.approx(high, abs=1e-4)


@pytest.mark.parametrize("only_a, only_b, p", [(1, 8, 0.0390625), (0, 5, 0.0625), (3, 3, 1.0), (0, 0, 1.0), (2, 10, 0.0385742)])
def test_exact_mcnemar(only_a, only_b, p):
    assert mcnemar_exact(only_a, only_b) == pytest.approx(p, abs=1e-6)


def test_paired_bootstrap_brackets_the_difference():
    a = np.array([1] * 60 + [0] * 40)
    b = np.array([1] * 50 + [0] * 50)
    low, high = paired_bootstrap(a, b, samples=4000)
    assert low <= 0.1 <= high and high - low < 0.25
    assert paired_bootstrap(a, a) == (0.0, 0.0)


def test_majority_vote():
    assert majority(["3", "4", "4", None]) == "4"
    assert majority(["3", "4"]) == "3"  # ties go to the earliest
    assert majority([None, None]) is None
    same_letter = lambda a, b: a.strip("()") == b.strip("()")  # noqa: E731
    assert majority(["A", "(B)", "B", "A"], same_letter) == "A"  # a tie of two groups: the earliest
    assert majority(["A", "(B)", "B", "(B)"], same_letter) == "(B)"  # one group of three, whatever its spelling


def test_a_figures_spread_over_repetitions():
    steady, noisy = spread([10.0, 10.1, 9.9, 10.0, 10.0]), spread([8.0, 9.2, 10.0, 11.0, 9.0])
    assert (steady.median, steady.low, steady.high, steady.n) == (10.0, 9.9, 10.1, 5)
    assert steady.half_width < 0.03 and steady.needed == 3  # within ±3% from 3 on (t with 1 df is 12.7)
    # the noisy one: t(4 df) · sd / √5 / median, and more repetitions than it had to reach ±3%
    sd = np.std([8.0, 9.2, 10.0, 11.0, 9.0], ddof=1)
    assert noisy.half_width == pytest.approx(2.776 * sd / np.sqrt(5) / 9.2) and noisy.needed > 5
    assert "over 5 repetitions" in noisy.line() and spread([3.0]).line() == "3.00 (one repetition: no spread)"
