"""Reasoning problems: loading them and asking for a boxed answer (easd.lab.grading.answers extracts and grades it).

Formats (one JSON object per line, except gpqa's CSV); docs/evaluation.md, "Benchmark files", maps each field:
  gsm8k     {"question": ..., "answer": "... #### 72"}
  math      {"problem": ..., "solution": "... \\boxed{...} ..."} or {"problem": ..., "answer": ...}
  choice    {"question": ..., "options": [...] or {"A": ...}, "answer": "B"}  (also "choices", "label")
  math500   MATH-500 as on the hub: problem, solution, answer, subject, level, unique_id
  aime      AIME24/25 and AMC23 as in the Qwen2.5-Math evaluation data: problem or question, a numeric answer, id
  minerva   Minerva Math: problem, solution whose last \\boxed{} is the answer
  olympiad  OlympiadBench: question, final_answer (a list), context prepended when present
  gpqa      GPQA-Diamond's CSV: Question, Correct Answer, Incorrect Answer 1..3
  limo      LIMO as distributed (the paper calibrates τ_H on it): question, solution, answer
`auto` picks one from the first record's fields (`detect_format`).
"""

from __future__ import annotations

import csv
import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path

from ...errors import EasdError
from ...files import read_json, read_text
from ...traces.schema import MAX_PROMPT_CHARS
from .answers import GRADING, MAX_ANSWER_CHARS, extract_answer, last_boxed, normalize_number, without_dollars

FORMATS = tuple(GRADING)
# New tokens per problem when --max-new-tokens is not given. These budgets are ours: the paper gives none, and RSD's
# code defaults to 2,048 new tokens per call. Solutions of AIME, OlympiadBench and LIMO run long, so they get 4,096; the
# short-answer sets less, so that a CPU run is not spent on budgets nobody reaches. The paper's table shows each
# method's share cut off by its budget and warns past 1% (easd.lab.reports.paper.CUT_OFF_WARNING).
BUDGETS = {
    "gsm8k": 1024,
    "choice": 1024,
    "math": 2048,
    "math500": 2048,
    "minerva": 2048,
    "gpqa": 2048,
    "aime": 4096,
    "olympiad": 4096,
    "limo": 4096,
}
# How a problem is put to the model. "qwen25-math-cot" is the Qwen2.5-Math evaluation's (RSD's harness and the
# paper's benchmarks use it): the bare question as the user's turn under QWEN25_MATH_SYSTEM. "easd" is ours: no system
# prompt, our instruction after the question. The math formats default to the first; the option formats have no
# prompt in that harness and keep ours, which asks for a letter.
PROMPT_STYLES = ("qwen25-math-cot", "easd")
QWEN25_MATH_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
INSTRUCTION = "Solve the problem step by step, then give the final answer in \\boxed{}."
CHOICE_INSTRUCTION = "Think step by step, then give the letter of the correct option in \\boxed{}."
LETTERS = "ABCDEFGHIJ"
# A bound on what a data file may hand us, far above any benchmark's: a problems file is read whole (GSM8K's training
# set is 4.2 MB). An answer's is easd.lab.grading.answers.MAX_ANSWER_CHARS.
MAX_DATA_BYTES = 100 * 2**20
ID_FIELDS = ("unique_id", "id", "Record ID")  # MATH-500, Qwen2.5-Math's data and OlympiadBench, GPQA's CSV
GPQA_FIELDS = ("Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")


@dataclass(frozen=True)
class Problem:
    id: str  # the dataset's own id (unique_id, id) where it has one, else the line number: stable under --shuffle
    prompt: str  # the user's turn: the question, and our instruction in the "easd" prompt style
    question: str  # the problem as the data states it (its options listed): what RSD's PRM reads, as RSD's code passes it
    gold: str  # the reference answer, as the data gives it (several OlympiadBench answers joined by ", ")
    format: str
    options: tuple[str, ...] = ()  # the options in the order shown, for formats that shuffle them (gpqa)
    system: str = ""  # the system prompt ("" for none): QWEN25_MATH_SYSTEM in the qwen25-math-cot prompt style


# --- loading ------------------------------------------------------------------------------------


def load_problems(
    path: str | Path,
    format: str,
    limit: int | None = None,
    offset: int = 0,
    shuffle: int | None = None,
    style: str = "auto",
) -> list[Problem]:
    """Problems from a JSONL (or gpqa CSV) file; with `shuffle` a fixed seeded order, then `offset` and `limit`;
    asked in the prompt `style` (one of PROMPT_STYLES, or "auto" for the format's `default_style`).

    Every record is checked before any is returned, so a bad line stops a run before it decodes anything.
    """
    if format not in FORMATS + ("auto",):
        raise EasdError(f"--format: must be auto or one of {', '.join(FORMATS)} (got {format!r})")
    if style not in PROMPT_STYLES + ("auto",):
        raise EasdError(f"--prompt-style: must be auto or one of {', '.join(PROMPT_STYLES)} (got {style!r})")
    path = Path(path)
    records = read_records(path)
    if not records:
        raise EasdError(f"--data: {path} holds no problems")
    if format == "auto":
        number, first = records[0]
        if not isinstance(first, dict):
            raise EasdError(f"--data: line {number + 1} of {path} is not a JSON object, so --format auto cannot read its fields")
        format = detect_format(first, path)
    style = default_style(format) if style == "auto" else style
    problems = [_problem(number, row, format, path, style) for number, row in records]
    _check_unique_ids(problems, records, path)
    if shuffle is not None:
        random.Random(shuffle).shuffle(problems)
    chosen = problems[offset : None if limit is None else offset + limit]
    if not chosen:
        raise EasdError(f"--offset/--limit: no problems left in {path} ({len(problems)} in the file)")
    return chosen


def read_records(path: Path, flag: str = "--data") -> list[tuple[int, dict | str]]:
    """(line number from 0, record) for every non-blank record; a JSONL line that does not parse stays a string.
    What no record can be (a file too big, not UTF-8, a CSV field past Python's limit, JSON Python cannot hold) stops
    here with its line, in one line naming `flag`, the option that gave the file. Every data file is read here: the
    problems, and Spec-Bench's questions (easd.lab.speed.specbench)."""
    text = read_text(path, flag, MAX_DATA_BYTES)
    if path.suffix.lower() == ".csv":
        reader = csv.DictReader(text.splitlines(keepends=True))
        records, start = [], 1  # the header is line 0
        try:
            for row in reader:
                records.append((start, row))
                start = reader.line_num  # a quoted field may span lines; the next record starts after this one
        except csv.Error as err:  # a field of over 131,072 characters, or a NUL
            raise EasdError(f"{flag}: line {start + 1} of {path} cannot be read as CSV ({err})") from None
        return records
    records = []
    for number, line in enumerate(text.splitlines()):
        if line.strip():
            try:
                records.append((number, read_json(line, f"{flag}: line {number + 1} of {path}")))
            except json.JSONDecodeError:
                records.append((number, line))
    return records


def detect_format(row: dict, path: Path) -> str:
    """The format whose fields the first record has (see the module docstring)."""
    keys, answer = {key for key in row if isinstance(key, str)}, row.get("answer")  # a CSV row's surplus cells sit under None
    checks = (
        ("gpqa", set(GPQA_FIELDS[:3]) <= keys),
        ("olympiad", {"question", "final_answer"} <= keys),
        ("math500", {"problem", "answer", "unique_id"} <= keys),
        ("choice", "question" in keys and bool({"options", "choices"} & keys)),
        ("gsm8k", "question" in keys and "####" in str(answer)),
        ("limo", {"question", "solution", "answer"} <= keys),
        ("aime", bool({"problem", "question"} & keys) and {"answer", "id"} <= keys),
        ("minerva", {"problem", "solution"} <= keys and "answer" not in keys),
        ("math", {"problem", "answer"} <= keys),
    )
    for name, matches in checks:
        if matches:
            return name
    raise EasdError(
        f"--format auto: the first record of {path.name} has fields ({', '.join(sorted(keys)) or 'none'}) that match no known format; "
        f'known: {", ".join(FORMATS)} (docs/evaluation.md, "Benchmark files"), or give --format'
    )


def default_style(format: str) -> str:
    """qwen25-math-cot for the math formats; ours for the option formats, which that harness does not prompt."""
    return "easd" if GRADING[format] == "letter" else "qwen25-math-cot"


def _problem(number: int, row: dict | str, format: str, path: Path, style: str) -> Problem:
    try:
        if not isinstance(row, dict):
            raise ValueError("not a JSON object")
        question, gold, options = _LOADERS[format](row)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as err:
        raise EasdError(f"--data: line {number + 1} of {path} is not a {format} problem ({type(err).__name__}: {err})") from None
    if style == "qwen25-math-cot":
        problem = Problem(_problem_id(row, number), question, question, gold, format, options, system=QWEN25_MATH_SYSTEM)
    else:
        instruction = CHOICE_INSTRUCTION if GRADING[format] == "letter" else INSTRUCTION
        problem = Problem(_problem_id(row, number), f"{question}\n\n{instruction}", question, gold, format, options)
    _check_lengths(problem, f"--data: line {number + 1} of {path}")
    return problem


def _check_lengths(problem: Problem, where: str) -> None:
    """Refuse, while loading, a prompt that no trace can hold and a gold that no graded answer can equal."""
    if len(problem.prompt) > MAX_PROMPT_CHARS:
        raise EasdError(
            f"{where}: its question is asked in {len(problem.prompt):,} characters, more than the {MAX_PROMPT_CHARS:,} a "
            "prompt may be; shorten it"
        )
    if len(problem.gold) > MAX_ANSWER_CHARS:
        raise EasdError(
            f"{where}: the answer is longer than the {MAX_ANSWER_CHARS:,} characters an answer is graded at "
            f"({len(problem.gold):,}); no model's answer could match it"
        )


def _problem_id(row: dict, number: int) -> str:
    for name in ID_FIELDS:
        if row.get(name) not in (None, ""):
            return str(row[name])
    return str(number)


def _check_unique_ids(problems: list[Problem], records: list, path: Path) -> None:
    """Results are keyed by problem id, so two problems with one id would overwrite each other."""
    first: dict[str, int] = {}
    for problem, (number, _) in zip(problems, records):
        if problem.id in first:
            raise EasdError(
                f"--data: line {number + 1} of {path} repeats the id {problem.id!r} of line {first[problem.id] + 1}; ids must be unique"
            )
        first[problem.id] = number


def _gsm8k(row: dict) -> tuple[str, str, tuple]:
    return row["question"].strip(), row["answer"].rsplit("####", 1)[1].strip(), ()


def _math(row: dict) -> tuple[str, str, tuple]:
    gold = row.get("answer") or extract_answer(row["solution"])[0]
    if gold is None:
        raise ValueError("no answer and no \\boxed{} in the solution")
    return row["problem"].strip(), str(gold), ()


def _minerva(row: dict) -> tuple[str, str, tuple]:
    gold = last_boxed(row["solution"])
    if gold is None:
        raise ValueError("no \\boxed{} in the solution")
    return row["problem"].strip(), gold, ()


def _aime(row: dict) -> tuple[str, str, tuple]:
    question = row["problem"] if "problem" in row else row["question"]
    gold = str(row["answer"]).strip()
    if normalize_number(gold) is None:
        raise ValueError(f"the answer {gold!r} is not a number (give --format math for symbolic answers)")
    return question.strip(), gold, ()


def _olympiad(row: dict) -> tuple[str, str, tuple]:
    answers = row["final_answer"]
    answers = [answers] if isinstance(answers, str) else list(answers)
    answers = [without_dollars(str(a)).strip() for a in answers]  # "$1$,$2$" is one answer, a list
    if not answers or not all(answers):
        raise ValueError("final_answer is empty")
    context = (row.get("context") or "").strip()
    question = f"{context}\n\n{row['question'].strip()}" if context else row["question"]
    return question.strip(), ", ".join(answers), ()


def _choice(row: dict) -> tuple[str, str, tuple]:
    options = row.get("options", row.get("choices"))
    items = list(options.items()) if isinstance(options, dict) else list(zip(LETTERS, options))
    answer = row.get("answer", row.get("label"))
    gold = LETTERS[answer] if isinstance(answer, int) else str(answer).strip().strip("()").upper()
    return _with_options(row["question"], items), gold, ()


def _limo(row: dict) -> tuple[str, str, tuple]:
    gold = str(row["answer"] if row["answer"] is not None else "").strip()
    if not gold:
        raise ValueError("the answer is empty")
    return row["question"].strip(), gold, ()


def _gpqa(row: dict) -> tuple[str, str, tuple]:
    texts = [row[name] for name in GPQA_FIELDS]
    if any(text is None or not text.strip() for text in texts):
        missing = [name for name, text in zip(GPQA_FIELDS, texts) if text is None or not text.strip()]
        raise ValueError(f"empty or missing column(s): {', '.join(missing)}")
    question, correct, *wrong = (text.strip() for text in texts)
    options = [correct, *wrong]
    random.Random(option_seed(question)).shuffle(options)
    gold = LETTERS[options.index(correct)]
    return _with_options(question, list(zip(LETTERS, options))), gold, tuple(options)


def option_seed(question: str) -> int:
    """A seed fixed by the question text alone, so every run on every machine shows the same option order."""
    return int.from_bytes(hashlib.sha256(question.encode("utf-8")).digest()[:8], "big")


def _with_options(question: str, items: list[tuple[str, str]]) -> str:
    listing = "\n".join(f"({letter}) {text}" for letter, text in items)
    return f"{question.strip()}\n\n{listing}"


_LOADERS = {
    "gsm8k": _gsm8k,
    "math": _math,
    "choice": _choice,
    "math500": _math,
    "aime": _aime,
    "minerva": _minerva,
    "olympiad": _olympiad,
    "gpqa": _gpqa,
    "limo": _limo,
}
