"""Loading problems, extracting answers and grading them."""

import json

import pytest

from easd.errors import EasdError
from easd.lab.problems import choice_letter, extract_answer, is_correct, last_boxed, load_problems, normalize_number


@pytest.mark.parametrize(
    "text, answer, rule",
    [
        ("so \\boxed{72}.", "72", "boxed"),
        ("first \\boxed{3} then \\boxed{5}", "5", "boxed"),  # several boxes: the last one
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}", "boxed"),  # nested braces
        ("\\boxed{\\dfrac{\\sqrt{3}}{2}} done", "\\dfrac{\\sqrt{3}}{2}", "boxed"),
        ("\\boxed{ \\{1, 2\\} }", "\\{1, 2\\}", "boxed"),
        ("unbalanced \\boxed{5 and more text", "5", "last_number"),
        ("She pays $1,200 then gets 35.5 back", "35.5", "last_number"),  # no box: the last number
        ("it drops to −4 degrees", "-4", "last_number"),
        ("no numbers at all", None, "none"),
        ("\\fbox{B}", "B", "boxed"),
    ],
)
def test_extraction(text, answer, rule):
    assert extract_answer(text) == (answer, rule)


def test_last_boxed_skips_an_unclosed_last_box():
    assert last_boxed("\\boxed{1} and \\boxed{2") == "1"


@pytest.mark.parametrize(
    "prediction, gold, correct",
    [
        ("72", "72", True),
        ("\\$1,080", "1080", True),  # dollar sign and thousands separator
        ("1{,}080", "1080", True),
        ("18.00", "18", True),  # trailing .0
        ("18 dollars", "18", True),  # units
        ("\\text{18 apples}", "18", True),
        ("18\\text{ apples}", "18", True),
        ("25\\%", "25", True),  # percentages
        ("-3", "-3", True),
        ("−3", "-3", True),  # a unicode minus
        ("0.5", ".5", True),
        ("\\frac{3}{4}", "0.75", True),
        ("\\dfrac{3}{4}", "0.75", True),
        ("-\\frac{1}{2}", "-0.5", True),
        ("x = 18", "18", True),
        ("17", "18", False),
        ("", "18", False),
    ],
)
def test_gsm8k_grading(prediction, gold, correct):
    assert is_correct(prediction, gold, "gsm8k") is correct


def test_normalize_number_of_nothing_is_none():
    assert normalize_number("no number") is None


@pytest.mark.parametrize(
    "prediction, gold, correct",
    [("B", "B", True), ("(B)", "B", True), ("B) iron rusting", "B", True), ("\\text{C}", "B", False), ("(c)", "C", False)],
)
def test_choice_grading(prediction, gold, correct):
    assert is_correct(prediction, gold, "choice") is correct


def test_choice_letter_needs_a_standalone_letter():
    assert choice_letter("Because") is None


@pytest.mark.parametrize(
    "prediction, gold, correct",
    [
        ("\\frac{1}{2}", "0.5", True),
        ("\\dfrac{2}{4}", "\\frac{1}{2}", True),
        ("x^2+2x+1", "(x+1)^2", True),
        ("3", "\\sqrt{9}", True),
        ("4", "\\sqrt{9}", False),
    ],
)
def test_math_grading_with_math_verify_in_a_thread_safe_way(prediction, gold, correct):
    assert is_correct(prediction, gold, "math") is correct


def write_jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_loading_every_format(tmp_path):
    gsm = load_problems(write_jsonl(tmp_path / "g.jsonl", [{"question": "Q?", "answer": "work\n#### 1,234"}]), "gsm8k")
    assert gsm[0].gold == "1,234" and "\\boxed{}" in gsm[0].prompt and gsm[0].id == "0"
    math = load_problems(
        write_jsonl(
            tmp_path / "m.jsonl", [{"problem": "P", "solution": "so \\boxed{\\frac{1}{2}}"}, {"problem": "P2", "answer": 7}]
        ),
        "math",
    )
    assert [p.gold for p in math] == ["\\frac{1}{2}", "7"]
    choice = load_problems(
        write_jsonl(
            tmp_path / "c.jsonl",
            [
                {"question": "Q", "options": ["x", "y"], "answer": 1},
                {"question": "Q", "choices": {"A": "x", "B": "y"}, "label": "(a)"},
            ],
        ),
        "choice",
    )
    assert [p.gold for p in choice] == ["B", "A"] and "(B) y" in choice[0].prompt


def test_shuffle_offset_and_limit_keep_line_ids(tmp_path):
    path = write_jsonl(tmp_path / "g.jsonl", [{"question": f"Q{i}", "answer": f"#### {i}"} for i in range(20)])
    first = load_problems(path, "gsm8k", limit=5, shuffle=3)
    assert [p.id for p in first] == [p.id for p in load_problems(path, "gsm8k", limit=5, shuffle=3)]
    assert [p.id for p in load_problems(path, "gsm8k", limit=2, offset=3, shuffle=3)] == [p.id for p in first[3:5]]
    assert all(p.gold == p.id for p in first)


@pytest.mark.parametrize(
    "rows, format, message",
    [
        ([{"question": "Q", "answer": "no marker"}], "gsm8k", "line 1 .* is not a gsm8k problem"),
        ([{"problem": "P", "solution": "none"}], "math", "not a math problem"),
    ],
)
def test_bad_data_is_named(tmp_path, rows, format, message):
    with pytest.raises(EasdError, match=message):
        load_problems(write_jsonl(tmp_path / "d.jsonl", rows), format)


def test_missing_file_and_empty_selection(tmp_path):
    with pytest.raises(EasdError, match="--data: no such file"):
        load_problems(tmp_path / "none.jsonl", "gsm8k")
    path = write_jsonl(tmp_path / "g.jsonl", [{"question": "Q", "answer": "#### 1"}])
    with pytest.raises(EasdError, match="no problems left"):
        load_problems(path, "gsm8k", offset=5)
