"""Data files and model answers as a hostile tester writes them: each one is a one-line error naming the flag and
the line, or a verdict reached in bounded time, never a traceback, a hang or a run stopped.

Every test has a small time limit, and asserts a generous bound on the seconds it took (two cores are shared)."""

import argparse
import json
import os
import time
from pathlib import Path

import pytest

from easd.cli.flags import tau_h_of
from easd.errors import EasdError
from easd.lab.grading import qwen25_math
from easd.lab.grading.answers import MAX_ANSWER_CHARS, extract_answer, is_correct, last_boxed
from easd.lab.grading.problems import MAX_DATA_BYTES, load_problems
from easd.lab.speed.specbench import load_questions
from easd.traces.schema import MAX_PROMPT_CHARS

GSM8K = {"question": "How many?", "answer": "Two and two. #### 4"}
QUICK = 10  # seconds any of these inputs may take here, at most: each took minutes, or forever, before


def write_lines(path, lines: list[str]):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def refused(path, message: str, format: str = "auto"):
    start = time.monotonic()
    with pytest.raises(EasdError, match=message) as caught:
        load_problems(path, format)
    assert time.monotonic() - start < QUICK
    assert "\n" not in str(caught.value) and str(caught.value).startswith("--data: ")
    return str(caught.value)


# --- data files -----------------------------------------------------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "encoding, line",
    [("latin-1", 3), ("utf-16", 1)],
)
def test_a_data_file_in_another_encoding_is_named_with_its_line(tmp_path, encoding, line):
    lines = [
        json.dumps(GSM8K),
        json.dumps(GSM8K | {"question": "Two?"}),
        json.dumps(GSM8K | {"question": "Café?"}, ensure_ascii=False),
    ]
    path = tmp_path / "problems.jsonl"
    path.write_text("\n".join(lines), encoding=encoding)
    refused(path, f"^--data: line {line} of .*problems.jsonl is not UTF-8 text \\(save the file as UTF-8\\)$")


@pytest.mark.timeout(30)
def test_a_binary_data_file_is_not_utf8_text(tmp_path):
    path = tmp_path / "image.png"
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 64)
    refused(path, "line 1 of .* is not UTF-8 text")


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "line, message",
    [
        ("[" * 100_000, "line 2 of .* nests its JSON too deeply to read"),
        (json.dumps(GSM8K)[:-1] + ', "id": ' + "9" * 5000 + "}", "line 2 of .* holds a number of more than 4,300 digits"),
        (
            json.dumps(GSM8K).replace("How many?", "How many\\ud800?"),
            "line 2 of .* holds a \\\\ud800–\\\\udfff escape without its pair",
        ),
    ],
    ids=["100k-deep", "5000-digit integer", "lone surrogate"],
)
def test_json_that_python_cannot_hold_is_a_line_of_the_data_not_a_traceback(tmp_path, line, message):
    lines = [json.dumps(GSM8K), line]
    refused(write_lines(tmp_path / "problems.jsonl", lines), message)


def test_a_character_written_as_a_pair_of_escapes_and_a_long_id_load(tmp_path):
    """The escapes of a character beyond the BMP are a pair, not a lone surrogate; an id of 300 characters loads (the
    site names its files from ids, and bounds them there)."""
    line = json.dumps(GSM8K | {"question": "Why 😀?", "id": "x" * 300})  # ensure_ascii: "\\ud83d\\ude00"
    [problem] = load_problems(write_lines(tmp_path / "problems.jsonl", [line]), "gsm8k")
    assert problem.question == "Why 😀?" and problem.id == "x" * 300


@pytest.mark.timeout(30)
def test_a_csv_field_past_pythons_limit_is_named_with_its_line(tmp_path):
    path = tmp_path / "gpqa.csv"
    header = "Question,Correct Answer,Incorrect Answer 1,Incorrect Answer 2,Incorrect Answer 3"
    path.write_text(f'{header}\nQ,a,b,c,d\n"{"x" * 200_000}",a,b,c,d\n', encoding="utf-8")
    refused(path, "^--data: line 3 of .*gpqa.csv cannot be read as CSV \\(field larger than field limit")


@pytest.mark.timeout(30)
def test_a_pipe_or_device_as_data_is_refused_without_reading_it(tmp_path):
    fifo = tmp_path / "problems.jsonl"
    os.mkfifo(fifo)  # nothing ever writes to it: reading it would wait forever
    refused(fifo, "^--data: .*problems.jsonl is not a regular file \\(a pipe, device or socket\\); give a file saved on disk$")
    refused("/dev/zero", "^--data: /dev/zero is not a regular file")
    refused(tmp_path, "is a folder; give a file")
    refused("/proc/self/mem", "^--data: cannot read /proc/self/mem \\(Input/output error\\)$")  # a regular file by its mode


@pytest.mark.timeout(30)
def test_a_data_file_over_the_limit_is_refused_unread(tmp_path):
    path = tmp_path / "huge.jsonl"
    with path.open("wb") as file:
        file.truncate(MAX_DATA_BYTES + 1)  # sparse: no disk, and any read of it would take a while
    refused(path, f"huge.jsonl is {MAX_DATA_BYTES + 1:,} bytes, more than the {MAX_DATA_BYTES:,} it may be")


@pytest.mark.timeout(30)
def test_a_question_longer_than_a_prompt_may_be_names_the_data_and_its_line(tmp_path):
    long = GSM8K | {"question": "x" * (MAX_PROMPT_CHARS + 1)}
    message = refused(write_lines(tmp_path / "problems.jsonl", [json.dumps(GSM8K), json.dumps(long)]), "line 2 of")
    assert f"its question is asked in {MAX_PROMPT_CHARS + 1:,} characters, more than the {MAX_PROMPT_CHARS:,} a prompt" in message


@pytest.mark.timeout(30)
def test_a_gold_answer_longer_than_any_graded_answer_is_refused(tmp_path):
    row = {"problem": "P?", "answer": "1" * (MAX_ANSWER_CHARS + 1)}
    refused(
        write_lines(tmp_path / "math.jsonl", [json.dumps(row)]),
        f"line 1 of .* the answer is longer than the {MAX_ANSWER_CHARS:,}",
    )


@pytest.mark.timeout(30)
def test_a_minerva_solution_of_200k_open_boxes_loads_in_linear_time(tmp_path):
    row = {"problem": "P?", "solution": "so \\boxed{42} " + "\\boxed{" * 200_000}  # each box open to the end
    start = time.monotonic()
    [problem] = load_problems(write_lines(tmp_path / "minerva.jsonl", [json.dumps(row)]), "minerva")
    assert problem.gold == "42" and time.monotonic() - start < QUICK


@pytest.mark.timeout(30)
def test_eval_refuses_a_pipe_as_data_in_one_line_before_loading_models(tmp_path, capsys):
    from easd.cli import main

    fifo = tmp_path / "problems.jsonl"
    os.mkfifo(fifo)
    assert main(["eval", "--pair", "tiny-random", "--data", str(fifo), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --data: ") and "not a regular file" in err and len(err.strip().splitlines()) == 1


# --- Spec-Bench's question file (`acceptance --data`, `bench --suite spec-bench FILE`) ------------------------

QUESTION = {"question_id": 81, "category": "writing", "turns": ["Write a haiku.", "Now about snow."]}


def questions_refused(path, message: str, flag: str = "--data") -> str:
    """The one line `load_questions` refused `path` with, naming `flag`, in bounded time."""
    start = time.monotonic()
    with pytest.raises(EasdError, match=message) as caught:
        load_questions(Path(path), None, flag)
    assert time.monotonic() - start < QUICK
    assert "\n" not in str(caught.value) and str(caught.value).startswith(f"{flag}: ")
    return str(caught.value)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "line, message",
    [
        (json.dumps(QUESTION | {"turns": ["Café?"]}, ensure_ascii=False).encode("latin-1"), "line 2 of .* is not UTF-8 text"),
        (b"\x89PNG\r\n\x1a\n" + bytes(range(256)), "line 2 of .* is not UTF-8 text"),
        (b"[" * 100_000, "line 2 of .* nests its JSON too deeply to read"),
        (json.dumps(QUESTION).replace("haiku", "haiku\\ud800").encode(), "line 2 of .* holds a \\\\ud800–\\\\udfff escape"),
        (
            json.dumps(QUESTION | {"question_id": list(range(1000))}).encode(),
            "line 2 .*question_id must be a string or an integer",
        ),
        (json.dumps(QUESTION | {"question_id": {"id": 1}}).encode(), "line 2 .*question_id must be a string or an integer"),
        (json.dumps(QUESTION | {"question_id": True}).encode(), "line 2 .*question_id must be a string or an integer"),
        (json.dumps(QUESTION | {"category": ["writing"]}).encode(), "line 2 .*category must be a non-empty string"),
        (json.dumps(QUESTION | {"turns": "Write a haiku."}).encode(), "line 2 .*turns must be a list of non-empty strings"),
    ],
    ids=["latin-1", "binary", "100k-deep", "lone surrogate", "list id", "dict id", "true id", "list category", "text turns"],
)
def test_a_question_file_python_or_spec_bench_cannot_read_is_a_line_before_anything_decodes(tmp_path, line, message):
    """Each was a traceback (UnicodeDecodeError, RecursionError, a UnicodeEncodeError or an internal file's name after
    the question was decoded); now the reader every data file goes through (easd.lab.grading.problems.read_records)."""
    path = tmp_path / "question.jsonl"
    path.write_bytes(json.dumps(QUESTION).encode() + b"\n" + line + b"\n")
    for flag in ("--data", "--suite"):  # acceptance's, bench's
        questions_refused(path, f"^{flag}: {message}", flag)


@pytest.mark.timeout(30)
def test_a_question_file_that_is_a_pipe_device_or_folder_is_named_as_such_unread(tmp_path):
    """Each was "no such file" (a pipe, /dev/zero, /dev/null, a folder) or an OSError (/proc/self/mem)."""
    fifo = tmp_path / "question.jsonl"
    os.mkfifo(fifo)  # nothing ever writes to it: reading it would wait forever
    for path in (fifo, "/dev/zero", "/dev/null"):
        questions_refused(path, "is not a regular file \\(a pipe, device or socket\\)")
    questions_refused(tmp_path, "is a folder; give a file")
    questions_refused("/proc/self/mem", "cannot read /proc/self/mem")
    questions_refused(tmp_path / "missing.jsonl", "no such file")


@pytest.mark.timeout(60)
def test_acceptance_and_bench_refuse_a_hostile_question_file_in_one_line_before_loading_models(tmp_path, capsys):
    from easd.cli import main

    fifo = tmp_path / "question.jsonl"
    os.mkfifo(fifo)
    deep = tmp_path / "deep.jsonl"
    deep.write_text("[" * 100_000)
    out = tmp_path / "out"
    for argv, message in (
        (["acceptance", "--data", str(fifo), "--out", str(out)], f"--data: {fifo} is not a regular file"),
        (["bench", "--suite", "spec-bench", str(deep)], f"--suite: line 1 of {deep} nests its JSON too deeply"),
    ):
        assert main([argv[0], "--pair", "tiny-random", *argv[1:]]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {message}") and err.count("\n") == 1 and "models:" not in err, err
    assert not out.exists()


# --- the calibration file -------------------------------------------------------------------------


def calibration(path) -> argparse.Namespace:
    return argparse.Namespace(calibration=path, tau_h=None)


@pytest.mark.timeout(30)
def test_a_calibration_that_is_a_device_or_a_pipe_is_refused_unread(tmp_path):
    fifo = tmp_path / "calibration.json"
    os.mkfifo(fifo)
    for path in (fifo, "/dev/zero"):
        start = time.monotonic()
        with pytest.raises(EasdError, match="^--calibration: .* is not a regular file"):
            tau_h_of(calibration(path))
        assert time.monotonic() - start < QUICK


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "text, message",
    [
        ("[" * 100_000, ".*calibration.json nests its JSON too deeply"),
        ('[{"model": "target", "tokens": 4, "raw": "x", "tau_h": 1}]', ".* is not a calibration.json .*ValueError"),
        (
            '[{"model": "target", "tokens": 4, "raw": 1, "tau_h": 1}, {"model": "draft"}]',
            ".* is not a calibration.json .*KeyError",
        ),
        ('{"target": 1}', ".* is not a calibration.json .*TypeError"),
        ("\xe9", "line 1 of .* is not UTF-8 text"),
    ],
)
def test_a_calibration_file_out_of_shape_is_one_line(tmp_path, text, message):
    path = tmp_path / "calibration.json"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(EasdError, match=f"^--calibration: {message}") as caught:
        tau_h_of(calibration(path))
    assert "\n" not in str(caught.value)


def test_a_good_calibration_file_still_sets_tau_h(tmp_path):
    path = tmp_path / "calibration.json"
    path.write_text(
        json.dumps(
            [
                {"model": "target", "tokens": 40, "raw": 1.61, "tau_h": 1.5},
                {"model": "draft", "tokens": 40, "raw": 0.4, "tau_h": 0.5},
            ]
        )
    )
    value, source = tau_h_of(calibration(path))
    assert value == 1.5 and source.endswith("over 40 tokens → 1.5; the draft's 0.5")


# --- model answers --------------------------------------------------------------------------------


def quickly(function, *args, seconds: float = QUICK):
    start = time.monotonic()
    result = function(*args)
    assert time.monotonic() - start < seconds, f"{function.__name__} took {time.monotonic() - start:.1f} s"
    return result


@pytest.mark.timeout(30)
@pytest.mark.parametrize("opening", ["\\boxed{", "\\fbox {"])
def test_extraction_of_many_open_boxes_is_linear(opening):
    assert quickly(extract_answer, opening * 70_000) == (None, "none")
    assert quickly(extract_answer, opening * 70_000 + "\\boxed{\\frac{1}{2}} and 7") == ("\\frac{1}{2}", "boxed")
    assert quickly(last_boxed, "\\boxed{1} " + opening * 70_000) == "1"  # the last box that closes


def test_an_answer_longer_than_any_graded_is_no_answer_and_says_so():
    assert extract_answer("\\boxed{" + "1" * (MAX_ANSWER_CHARS + 1) + "}") == (None, "too_long")
    assert extract_answer("the sum is " + "9" * (MAX_ANSWER_CHARS + 1)) == (None, "too_long")
    assert extract_answer("\\boxed{" + "1" * MAX_ANSWER_CHARS + "}") == ("1" * MAX_ANSWER_CHARS, "boxed")


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "prediction",
    ["1" * 1_000_000, "\\text{" * 150_000, "1" * 200_000 + "\\text{" * 50_000 + "}", "\\mbox{" * 150_000],
    ids=["1 MB of digits", "150k \\text{", "digits and \\text{", "150k \\mbox{"],
)
@pytest.mark.parametrize("format", ["gsm8k", "math", "minerva"])
def test_grading_a_huge_answer_is_quick_and_wrong(prediction, format):
    assert quickly(is_correct, prediction, "5", format, "qwen25-math") is False
    assert quickly(is_correct, prediction, "5", format) is False


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "prediction",
    [
        "1" * MAX_ANSWER_CHARS,
        "\\text{" * (MAX_ANSWER_CHARS // 6),
        "\\mbox{" * (MAX_ANSWER_CHARS // 6),
        "\\begin{array}{" * (MAX_ANSWER_CHARS // 14),
        "1" * (MAX_ANSWER_CHARS - 2) + ".0",
        "x " * (MAX_ANSWER_CHARS // 2),
        "5 " + "s " * (MAX_ANSWER_CHARS // 2 - 1),
    ],
)
def test_normalising_an_answer_of_the_longest_graded_length_is_quick(prediction):
    """strip_answer runs in the caller, unforked: an answer as long as any graded costs it little (its 600 unit
    regexes read an answer 600 times, so a megabyte would take 20 s: hence the bound)."""
    quickly(qwen25_math.strip_answer, prediction, seconds=1)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "prediction",
    ["1" * 1_000_000, "\\text{" * 150_000, "\\mbox{" * 150_000, "1" * 200_000 + ".0"],
    ids=["1 MB of digits", "150k \\text{", "150k \\mbox{", "200k digits and .0"],
)
def test_normalising_takes_linear_time_whatever_the_length(prediction):
    """The harness's regular expressions that read from each opening to the end are rewritten to read each character
    once: without the unit words (Minerva's rule), a megabyte is normalised in well under a second."""
    quickly(qwen25_math.strip_answer, prediction, False, seconds=3)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("grader", ["math-verify", "qwen25-math"])
def test_a_fraction_over_5000_digits_is_graded_not_raised(grader):
    huge = "\\frac{1}{" + "9" * 5000 + "}"
    assert is_correct(huge, "4", "gsm8k", grader) is False
    assert is_correct("\\frac{8}{2}", "4", "gsm8k", grader) is True


@pytest.mark.timeout(30)
def test_a_grader_that_raises_marks_the_answer_wrong_and_says_why(caplog, monkeypatch):
    def broken(prediction, gold, format):
        raise ZeroDivisionError("a parser's own bug")

    monkeypatch.setattr(qwen25_math, "correct", broken)
    assert is_correct("7", "7 apples", "gsm8k", "qwen25-math") is False
    [record] = caplog.records
    assert "graded wrong: the grader raised ZeroDivisionError (a parser's own bug) on '7'" in record.getMessage()


@pytest.mark.timeout(30)
def test_a_forked_check_that_raises_is_a_no_without_a_childs_traceback(capfd):
    from easd.lab.grading.forked import check_in_fork

    assert check_in_fork(int, ("not a number",), 10) is False
    assert "Traceback" not in capfd.readouterr().err
