"""Wilson intervals, the exact McNemar test and its power, the paired bootstrap and majority votes, against known values."""

import numpy as np
import pytest

from easd.lab.reports.stats import (
    detectable_difference,
    majority,
    mcnemar_exact,
    mcnemar_problems,
    paired_bootstrap,
    spread,
    wilson,
)


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


@pytest.mark.parametrize(
    "discordant, difference, problems",
    [
        # ψ = 0.25, δ = 0.10: [1.959964 × 0.5 + 0.841621 × √0.24]² / 0.01 = [0.979982 + 0.412308]² / 0.01 = 193.85
        (0.25, 0.10, 194),
        (0.25, -0.10, 194),  # either method's gain
        (0.20, 0.08, 243),
        (0.10, 0.035, 639),
        (0.05, 0.05, 155),  # every discordant problem one way: [1.959964 √0.05 + 0.841621 √0.0475]² / 0.0025
    ],
)
def test_mcnemar_problems_by_connors_formula(discordant, difference, problems):
    assert mcnemar_problems(discordant, difference) == problems


def test_mcnemar_problems_refuses_to_extrapolate_where_no_n_can():
    assert mcnemar_problems(0.0, 0.035) is None  # no discordant problem seen: the discordance must be assumed
    assert mcnemar_problems(0.02, 0.035) is None  # a gain larger than the share of problems where the two part
    assert mcnemar_problems(0.2, 0.0) is None
    assert detectable_difference(0.0, 100) is None and detectable_difference(1.0, 3) is None  # 3.84 pairs at the least


@pytest.mark.parametrize("discordant, problems", [(0.1, 100), (0.3, 500), (1.0, 4)])
def test_the_detectable_difference_is_the_formula_solved_for_it(discordant, problems):
    delta = detectable_difference(discordant, problems)
    assert 0 < delta <= discordant
    assert mcnemar_problems(discordant, delta) <= problems < mcnemar_problems(discordant, 0.999 * delta)


def simulated_power(discordant: float, difference: float, problems: int, runs: int = 4000) -> float:
    """The share of simulated studies of `problems` pairs whose exact McNemar test rejects at α = 0.05."""
    rng = np.random.default_rng(0)
    shares = [(discordant + difference) / 2, (discordant - difference) / 2, 1 - discordant]
    return float(np.mean([mcnemar_exact(int(a), int(b)) < 0.05 for a, b, _ in rng.multinomial(problems, shares, size=runs)]))


@pytest.mark.parametrize("discordant, difference", [(0.2, 0.08), (0.1, 0.035), (0.05, 0.05)])
def test_the_problems_it_gives_reach_80_percent_power_in_simulation(discordant, difference):
    """Connor's n, simulated: the exact test rejects in about 80% of studies of that many problems (a few points
    fewer: the exact test is conservative, the formula its normal approximation), and in far fewer with half as many."""
    problems = mcnemar_problems(discordant, difference)
    assert simulated_power(discordant, difference, problems) == pytest.approx(0.8, abs=0.05)
    assert simulated_power(discordant, difference, problems // 2) < 0.6


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
