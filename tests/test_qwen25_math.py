"""`--grader qwen25-math`: the Qwen2.5-Math harness's rules, written again (easd.lab.grading.qwen25_math).

Each case's verdict is the harness's own (github.com/QwenLM/Qwen2.5-Math `evaluation/`, strip_string then math_equal,
run in its Python with sympy 1.12 and antlr4 4.11.1 on 2026-12-05); docs/benchmarks.md has the agreement measured
on many more answers, and the one kind of case where this rewrite parts from it.
"""

import random
import re

import pandas as pd
import pytest

from easd.lab.grading.answers import is_correct, same_answer
from easd.lab.grading.qwen25_math import _sub_braced, strip_answer
from easd.lab.reports.report import grader_lines, graders_compared

# (answer, gold, our format, the harness's verdict)
HARNESS = [
    ("10", "1000", "gsm8k", True),
    ("1000", "10", "gsm8k", True),
    ("12", "0.12", "gsm8k", True),
    ("11", "1000", "gsm8k", False),
    ("18.00", "18", "gsm8k", True),
    ("$1,000", "1000", "gsm8k", True),
    ("12 apples", "12", "gsm8k", True),
    ("\\text{five}", "5", "gsm8k", False),
    ("five", "5", "gsm8k", True),
    ("x = 3", "3", "math", True),
    ("\\frac12", "0.5", "math", True),
    ("3/4", "\\frac{3}{4}", "math", True),
    ("\\dfrac{3}{4}", "0.75", "math", True),
    ("(1,2)", "(1, 2)", "math", True),
    ("[1,2]", "(1,2)", "math", True),
    ("(2,1)", "(1,2)", "math", False),
    ("\\textbf{(113)}", "113", "aime", False),
    ("113", "113", "aime", True),
    ("\\begin{pmatrix}1\\\\2\\end{pmatrix}", "\\begin{pmatrix}1\\\\2.0\\end{pmatrix}", "math", True),
    ("2x+1=0", "-2x-1=0", "math", True),
    ("\\frac{x+2}{7}", "\\frac{x}{7}+\\frac{2}{7}", "math", True),
    ("\\sqrt{8}", "2\\sqrt{2}", "math", True),
    ("5 \\text{ m}", "5", "minerva", True),
    ("5 m", "5", "minerva", False),
    ("5 m", "5", "math", True),
    ("\\infty", "inf", "math", True),
    ("", "5", "gsm8k", False),
    ("B", "B", "math", True),
    ("(B) iron", "B", "math", True),
    ("50\\%", "0.5", "math", True),
]


@pytest.mark.parametrize(("answer", "gold", "format", "verdict"), HARNESS)
def test_the_harness_verdicts(answer, gold, format, verdict):
    assert is_correct(answer or None, gold, format, "qwen25-math") is verdict


def test_where_the_two_graders_part():
    # the harness takes the gold ÷ or × 100 (its include_percentage) and a number written out; ours takes neither
    assert is_correct("10", "1000", "gsm8k", "qwen25-math") and not is_correct("10", "1000", "gsm8k")
    assert is_correct("five", "5", "gsm8k", "qwen25-math") and not is_correct("five", "5", "gsm8k")
    # ours reads \\textbf{(113)} as 113; the harness does not
    assert is_correct("\\textbf{(113)}", "113", "aime") and not is_correct("\\textbf{(113)}", "113", "aime", "qwen25-math")
    # options: the harness has no grader for them, so both compare the letter
    assert is_correct("(C)", "C", "choice", "qwen25-math") and not is_correct("(C) 10", "B", "choice", "qwen25-math")
    assert same_answer("10", "1000", "gsm8k", "qwen25-math") and not same_answer("10", "1000", "gsm8k")


def test_the_harness_normalisation_cuts_unit_words_as_patterns():
    assert strip_answer("12 apples") == "12"
    assert strip_answer("\\frac{a}{b}") == "\\frac{}{b}"  # "a" is in its unit list, matched as a word
    assert strip_answer("5 m", cut_units=False) == "5m"  # Minerva Math keeps its units
    assert strip_answer("\\frac12") == "\\frac{1}{2}" and strip_answer("3/4") == "\\frac{3}{4}"


def test_the_linear_rewrites_of_the_harness_regexes_give_their_results():
    """The harness's \\text{...} and \\mbox{...} substitutions read to the end from every opening (quadratic on a
    model's answer of many openings); _sub_braced reads each character once, to the same result."""
    pieces = ["\\text{", "\\mbox{", "}", "{", "a", "1", ".", " "]
    rng = random.Random(0)
    for _ in range(20_000):
        s = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 10)))
        assert _sub_braced(s, "\\text{", lambda text: text) == re.sub(r"\\text\{(.*?)\}", r"\1", s), s
        assert _sub_braced(s, "\\mbox{", lambda _: "") == re.sub(r"\\mbox{.*?}", "", s), s
    # the trailing \text{} (a unit), numbers' trailing zeros: as the harness cuts them
    assert strip_answer("5\\text{ cm}\\text{ x}", cut_units=False) == "5" and strip_answer("\\text{5}") == "5"
    assert strip_answer("3.00x + 12.0", cut_units=False) == "3x+12" and strip_answer("1.50") == "1.50"


def test_the_reports_print_both_graders_where_they_part():
    rows = pd.DataFrame(
        {
            "problem_id": ["1", "2", "3", "1", "2", "3"],
            "method": ["sd"] * 3 + ["easd"] * 3,
            "sample": [0] * 6,
            "prediction": ["10", "7", "", "1000", "8", "5"],
            "gold": ["1000", "7", "5", "1000", "7", "5"],
        }
    )
    rows["correct"] = [is_correct(p or None, g, "gsm8k") for p, g in zip(rows["prediction"], rows["gold"])]
    compared = graders_compared(rows, "gsm8k", "math-verify")
    assert compared["other"] == "qwen25-math"
    assert compared["accuracy"] == {"sd": (1 / 3, 2 / 3), "easd": (2 / 3, 2 / 3)}
    assert [(r["problem_id"], r["method"], r["correct"]) for r in compared["disagree"]] == [("1", "sd", False)]
    lines = grader_lines(compared)
    assert lines[0] == "graded by math-verify; by qwen25-math instead: sd 33.3% → 66.7%, easd 66.7% → 66.7%"
    assert "1 sd s0: '10' vs gold '1000': math-verify wrong, qwen25-math right" in lines[2]
