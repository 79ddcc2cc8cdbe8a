"""Loading problems, extracting answers and grading them."""

import json

import pytest

from easd.errors import EasdError
from easd.lab.grading.answers import choice_letter, extract_answer, is_correct, last_boxed, normalize_number
from easd.lab.grading.problems import CHOICE_INSTRUCTION, FORMATS, INSTRUCTION, LETTERS, load_problems


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
    assert gsm[0].gold == "1,234" and gsm[0].id == "0"
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


# --- the paper's benchmarks, in the shapes they are distributed in (our own made-up records) -----

MATH500 = {
    "problem": "What is $1+1$?",
    "solution": "Add: $\\boxed{2}$.",
    "answer": "2",
    "subject": "Prealgebra",
    "level": 1,
    "unique_id": "test/prealgebra/1.json",
}
AIME = {"id": 60, "problem": "Find the number.", "solution": "It is 33.", "answer": "033", "url": "u", "year": "2024"}
AMC = {"id": 0, "question": "How many?", "answer": 27.0, "url": "u"}
MINERVA = {"problem": "Compute the mass.", "solution": "So $m = \\boxed{3 \\times 10^{5}}$ kg.", "type": "Physics"}
OLYMPIAD = {
    "id": 2231,
    "subfield": "Algebra",
    "context": "Let $f(x)=x^2-5x+6$.",
    "question": "Find all roots of $f$.",
    "solution": ["..."],
    "final_answer": ["$2$", "$3$"],
    "is_multiple_answer": True,
}
LIMO = {"question": "What is $1 + 1$?", "solution": "It is $\\boxed{2}$.", "answer": "2"}  # LIMO as distributed
GPQA_HEADER = "Record ID,Question,Correct Answer,Incorrect Answer 1,Incorrect Answer 2,Incorrect Answer 3,Subdomain\n"


def write_gpqa(path, rows):
    import csv

    with path.open("w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(GPQA_HEADER.strip().split(","))
        writer.writerows(rows)
    return path


GPQA_ROWS = [
    ["recA", "Which gas is\nnoble?", "Neon", "Oxygen", "Nitrogen", "Chlorine", "Chemistry"],
    ["recB", "Which is a lepton?", "Electron", "Proton", "Neutron", "Pion", "Physics"],
]


@pytest.mark.parametrize(
    "row, format, problem_id, gold",
    [
        (MATH500, "math500", "test/prealgebra/1.json", "2"),
        (AIME, "aime", "60", "033"),
        (AMC, "aime", "0", "27.0"),
        (MINERVA, "minerva", "0", "3 \\times 10^{5}"),
        (OLYMPIAD, "olympiad", "2231", "2, 3"),
        ({"question": "Q?", "answer": "#### 4"}, "gsm8k", "0", "4"),
        ({"problem": "P", "answer": "x^2"}, "math", "0", "x^2"),
        ({"question": "Q", "options": ["a", "b"], "answer": "B"}, "choice", "0", "B"),
        (LIMO, "limo", "0", "2"),
    ],
)
def test_auto_detects_each_benchmark_and_reads_its_fields(tmp_path, row, format, problem_id, gold):
    [problem] = load_problems(write_jsonl(tmp_path / "d.jsonl", [row]), "auto")
    assert (problem.format, problem.id, problem.gold) == (format, problem_id, gold)
    assert "\\boxed{}" in problem.system + problem.prompt  # asked for a boxed answer in either prompt style


@pytest.mark.parametrize(
    "format, row",
    [("gsm8k", {"question": " Q? ", "answer": "#### 4"}), ("math", {"problem": "Q?", "answer": "x^2"}), ("limo", LIMO)],
)
def test_math_formats_are_asked_as_the_qwen25_math_evaluation_asks_them(tmp_path, format, row):
    """Its system prompt and the bare question (RSD's harness and the paper's benchmarks); ours on request."""
    path = write_jsonl(tmp_path / "d.jsonl", [row])
    [qwen] = load_problems(path, format)
    assert qwen.system == "Please reason step by step, and put your final answer within \\boxed{}."
    assert qwen.prompt == qwen.question and "boxed" not in qwen.prompt
    [ours] = load_problems(path, format, style="easd")
    assert ours.system == "" and ours.prompt == f"{ours.question}\n\n{INSTRUCTION}"


def test_option_formats_keep_our_letter_instruction_which_that_harness_has_no_prompt_for(tmp_path):
    [problem] = load_problems(
        write_jsonl(tmp_path / "c.jsonl", [{"question": "Q", "options": ["a", "b"], "answer": "B"}]), "auto"
    )
    assert problem.system == "" and problem.prompt.endswith(CHOICE_INSTRUCTION)
    with pytest.raises(EasdError, match="--prompt-style: must be auto or one of qwen25-math-cot, easd"):
        load_problems(tmp_path / "c.jsonl", "auto", style="qwen")


def test_olympiad_prepends_the_context_and_skips_a_null_one(tmp_path):
    [with_context, without] = load_problems(
        write_jsonl(tmp_path / "o.jsonl", [OLYMPIAD, {**OLYMPIAD, "id": 1, "context": None, "final_answer": ["$5$"]}]), "auto"
    )
    assert with_context.prompt.startswith("Let $f(x)=x^2-5x+6$.\n\nFind all roots") and without.prompt.startswith("Find all")
    assert without.gold == "5"


@pytest.mark.parametrize(
    "prediction, gold, format, correct",
    [
        ("33", "033", "aime", True),  # AIME's zero-padded answers are numbers
        ("27", "27.0", "aime", True),
        ("28", "27.0", "aime", False),
        ("300000", "3 \\times 10^{5}", "minerva", True),
        ("\\frac{1}{2}", "0.5", "math500", True),
        ("3, 2", "2, 3", "olympiad", True),  # every answer, in any order
        ("2", "2, 3", "olympiad", False),  # one of two is not enough
        ("2, 3, 4", "2, 3", "olympiad", False),  # nor is an extra one
        ("(1, 2)", "(1,2)", "olympiad", True),  # one answer that holds a comma stays whole
        ("B", "B", "gpqa", True),
        ("A", "B", "gpqa", False),
    ],
)
def test_each_benchmark_is_graded_as_its_answers_expect(prediction, gold, format, correct):
    assert is_correct(prediction, gold, format) is correct


def test_gpqa_csv_shuffles_options_by_the_question_alone(tmp_path):
    first = load_problems(write_gpqa(tmp_path / "gpqa.csv", GPQA_ROWS), "auto")
    again = load_problems(write_gpqa(tmp_path / "other.csv", GPQA_ROWS[::-1]), "gpqa")  # another file, another order
    assert [p.id for p in first] == ["recA", "recB"] and first[0].format == "gpqa"
    assert {p.id: p.options for p in first} == {p.id: p.options for p in again}
    for problem, row in zip(first, GPQA_ROWS):
        assert sorted(problem.options) == sorted(row[2:6])
        assert problem.options[LETTERS.index(problem.gold)] == row[2]  # the gold letter points at the correct answer
        assert f"({problem.gold}) {row[2]}" in problem.prompt
    assert "Which gas is\nnoble?" in first[0].prompt  # a quoted field over two lines
    orders = {
        load_problems(write_gpqa(tmp_path / f"{i}.csv", [[f"r{i}", f"Q{i}", "w", "x", "y", "z", ""]]), "gpqa")[0].gold
        for i in range(12)
    }
    assert len(orders) > 1  # the correct answer is not always in one place


def test_a_file_matching_no_format_names_its_fields_and_the_formats(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"prompt": "x", "target": "y"}])
    with pytest.raises(EasdError, match=r"fields \(prompt, target\) that match no known format; known: gsm8k, .*gpqa") as err:
        load_problems(path, "auto")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "rows, message",
    [
        ([MATH500, {**MATH500, "unique_id": "b", "problem": None}], "line 2 .* is not a math500 problem"),
        ([AIME, {**AIME, "id": 61, "answer": "\\pi"}], "line 2 .* answer '.*' is not a number"),
        ([OLYMPIAD, {**OLYMPIAD, "id": 5, "final_answer": []}], "line 2 .* final_answer is empty"),
        ([MINERVA, {**MINERVA, "solution": "no box"}], "line 2 .* no \\\\boxed"),
        ([AIME, {**AIME, "problem": "again"}], "line 2 .* repeats the id '60' of line 1"),
        ([AIME, "{not json"], "line 2 .* not a JSON object"),
        ([LIMO, {**LIMO, "answer": " "}], "line 2 .* not a limo problem .*the answer is empty"),
    ],
)
def test_a_bad_line_anywhere_stops_loading_with_its_number(tmp_path, rows, message):
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    with pytest.raises(EasdError, match=message):
        load_problems(path, "auto", limit=1)  # checked even past --limit


def test_a_gpqa_row_with_a_missing_answer_is_named(tmp_path):
    path = write_gpqa(tmp_path / "g.csv", [GPQA_ROWS[0], ["recC", "Q", "right", "", "x", "y", ""]])
    with pytest.raises(EasdError, match="line 4 .* empty or missing column\\(s\\): Incorrect Answer 1"):
        load_problems(path, "auto")


def test_eval_stops_on_a_bad_line_before_loading_models(tmp_path, capsys):
    from easd.cli import main

    data = write_jsonl(tmp_path / "d.jsonl", [MATH500, {**MATH500, "unique_id": "x", "answer": None, "solution": "?"}])
    code = main(["eval", "--pair", "tiny-random", "--data", str(data), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: --data: line 2 of") and "models:" not in err
    assert not (tmp_path / "out").exists()


def test_eval_runs_a_gpqa_csv_end_to_end_and_records_the_detected_format(tmp_path, capsys):
    from easd.cli import main

    out = tmp_path / "out"
    data = write_gpqa(tmp_path / "gpqa.csv", GPQA_ROWS)
    args = ["eval", "--pair", "tiny-random", "--data", str(data), "--out", str(out), "--methods", "sd", "--max-new-tokens", "4"]
    assert main(args) == 0
    config = json.loads((out / "run.json").read_text())
    results = (out / "results.csv").read_text()
    assert config["format"] == "gpqa" and "recA" in results and "recB" in results


def test_a_csv_of_another_shape_names_its_columns(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("text,label\nhello,1,surplus cell\n")
    with pytest.raises(EasdError, match=r"fields \(label, text\) that match no known format"):
        load_problems(path, "auto")


def test_calibrate_reads_limo_as_distributed(tmp_path, capsys):
    """The paper calibrates τ_H on LIMO: its question / solution / answer records load as they are; a record without
    its answer is one line naming the file's line."""
    from easd.cli import main

    data = write_jsonl(tmp_path / "limo.jsonl", [LIMO, {**LIMO, "question": "What is $2 + 2$?", "answer": "4"}])
    out = tmp_path / "calibration"
    assert main(["calibrate", "--pair", "tiny-random", "--data", str(data), "--max-new-tokens", "8", "--out", str(out)]) == 0
    assert "target: mean entropy of the top 5% of 16 greedy tokens" in capsys.readouterr().out
    assert json.loads((out / "calibration.json").read_text())
    no_answer = write_jsonl(tmp_path / "bad.jsonl", [LIMO, {k: v for k, v in LIMO.items() if k != "answer"}])
    assert main(["calibrate", "--pair", "tiny-random", "--data", str(no_answer), "--format", "limo", "--out", str(out)]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: --data: line 2 of ") and "is not a limo problem (KeyError: 'answer')" in line


def test_eval_and_sweep_give_each_format_its_budget_unless_told(tmp_path):
    """A solution cut by the budget is graded wrong whatever the method: long-solution benchmarks get RSD's 4,096."""
    import argparse

    from easd.cli.flags import apply_budget, problems
    from easd.lab.grading.problems import BUDGETS

    for row, format, given, budget in ((AIME, "aime", None, 4096), (LIMO, "limo", None, 4096), (AIME, "aime", 64, 64)):
        data = write_jsonl(tmp_path / f"{format}.jsonl", [row])
        args = argparse.Namespace(
            data=data, format="auto", limit=None, offset=0, shuffle=None, prompt_style="auto", max_new_tokens=given
        )
        problems(args)
        apply_budget(args)
        assert (args.format, args.max_new_tokens) == (format, budget)
    assert BUDGETS["gsm8k"] == 1024 and set(BUDGETS) == set(FORMATS)


def test_answers_with_dollars_inside_or_in_words_are_graded_as_the_harness_grades_them(tmp_path):
    """Found by scripts/compare_graders.py against the Qwen2.5-Math harness: OlympiadBench writes a list of answers as
    "$1$,$2$" (one string), Minerva boxes "x+$ $y", and words no parser reads must still match their own gold."""
    row = {**OLYMPIAD, "final_answer": ["$1$,$\\frac{3+\\sqrt{21}}{2}$"]}
    [problem] = load_problems(write_jsonl(tmp_path / "o.jsonl", [row]), "olympiad")
    assert problem.gold == "1,\\frac{3+\\sqrt{21}}{2}"
    assert is_correct("\\frac{3+\\sqrt{21}}{2}, 1", problem.gold, "olympiad")
    assert is_correct("x_{0} \\cos (\\omega t)+$ $y", "x_{0} \\cos (\\omega t)+$ $y", "math")
    assert is_correct("all odd $n$", "All odd n", "math") and not is_correct("all even n", "all odd n", "math")
