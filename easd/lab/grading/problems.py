"""Reasoning problems: loading them, asking for a boxed answer, extracting it, and grading it.

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
import logging
import random
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path

from ...errors import EasdError, shown
from ...files import read_json, read_text
from ...traces.schema import MAX_PROMPT_CHARS
from . import qwen25_math
from .forked import check_in_fork

log = logging.getLogger(__name__)

# How each format's answer is graded: a number (GSM8K-style normalisation), math-verify's
# equivalence, every one of several answers (OlympiadBench), or an option letter.
GRADING = {
    "gsm8k": "number",
    "math": "math",
    "choice": "letter",
    "math500": "math",
    "aime": "number",
    "minerva": "math",
    "olympiad": "all_answers",
    "gpqa": "letter",
    "limo": "math",
}
FORMATS = tuple(GRADING)
# New tokens per problem when --max-new-tokens is not given. These budgets are ours: the paper gives none, and RSD's
# code defaults to 2,048 new tokens per call. Solutions of AIME, OlympiadBench and LIMO run long, so they get 4,096; the
# short-answer sets less, so that a CPU run is not spent on budgets nobody reaches. The paper's table shows each
# method's share cut off by its budget and warns past 1% (easd.lab.reports.report.CUT_OFF_WARNING).
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
GRADERS = ("math-verify", "qwen25-math")  # `--grader`: ours, and the Qwen2.5-Math harness's (is_correct)
MATH_VERIFY_SECONDS = 10.0  # our own limit: math-verify's SIGALRM timeouts only work in the main thread
LETTERS = "ABCDEFGHIJ"
# Bounds on what a data file and a model may hand us, far above any benchmark's: a problems file is read whole
# (GSM8K's training set is 4.2 MB), and an answer (a number or a formula) goes through regular expressions in
# this process before any parser. A longer answer is no answer (extract_answer's rule "too_long"); a longer gold
# is refused when the data is loaded.
MAX_DATA_BYTES = 100 * 2**20
MAX_ANSWER_CHARS = 1_000
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


# --- extraction ---------------------------------------------------------------------------------

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
_BRACES = re.compile(r"\\(?:boxed|fbox)\s*\{|[{}]")  # a box's opening, or any other brace


def extract_answer(text: str) -> tuple[str | None, str]:
    """(answer, rule): the last balanced \\boxed{...}, else the last number, else nothing; an answer longer than
    MAX_ANSWER_CHARS is none ("too_long"): the graders read no more, and so long a text is no answer."""
    answer, rule = last_boxed(text), "boxed"
    if answer is None:
        numbers = _NUMBER.findall(text.replace("−", "-"))
        answer, rule = (numbers[-1], "last_number") if numbers else (None, "none")
    if answer is not None and len(answer) > MAX_ANSWER_CHARS:
        return None, "too_long"
    return answer, rule


def last_boxed(text: str) -> str | None:
    """The content of the last \\boxed{...} (or \\fbox{...}) whose braces balance; None if there is none.
    One pass, matching each closing brace to the latest opening one: a model's text of 100k unclosed boxes costs no
    more than its length."""
    opened: list[tuple[int, bool]] = []  # (where the content starts, whether a box opened it)
    last = None  # (start, end) of the content of the closed box that starts last
    for match in _BRACES.finditer(text):
        if match[0] != "}":
            opened.append((match.end(), match[0] != "{"))
        elif opened:
            start, box = opened.pop()
            if box and (last is None or start > last[0]):
                last = (start, match.start())
    return None if last is None else text[last[0] : last[1]].strip()


# --- grading ------------------------------------------------------------------------------------


def is_correct(prediction: str | None, gold: str, format: str, grader: str = "math-verify") -> bool:
    """Whether an extracted answer is right. "math-verify" is ours: GSM8K-style numbers, math-verify's equivalence, every
    one of several answers, or the option letter (GRADING). "qwen25-math" is the Qwen2.5-Math harness's rules
    (easd.lab.grading.qwen25_math); the option formats have no grader there, so both compare the letter."""
    if prediction is None:
        return False
    if max(len(prediction), len(gold)) > MAX_ANSWER_CHARS:  # as extract_answer: longer than any answer is graded at
        return _same_text(prediction, gold)
    try:
        return _graded(prediction, gold, format, grader)
    except Exception as err:  # noqa: BLE001 - a model's answer is untrusted: whatever it makes a parser do, the run goes on
        log.warning(f"graded wrong: the grader raised {type(err).__name__} ({err}) on {shown(prediction)} against {shown(gold)}")
        return False


def _graded(prediction: str, gold: str, format: str, grader: str) -> bool:
    grading = GRADING[format]
    if grader == "qwen25-math" and grading != "letter":
        return qwen25_math.correct(prediction, gold, format)
    if grading == "number":
        return numbers_equal(prediction, gold)
    if grading == "letter":
        return choice_letter(prediction) == gold.upper()
    if _same_text(prediction, gold):  # before any parser, as the Qwen2.5-Math harness's math_equal checks first
        return True
    if grading == "all_answers":
        return all_answers_equal(prediction, gold)
    return math_equal(prediction, gold)


def _same_text(a: str, b: str) -> bool:
    """Equal but for spaces, case and dollar signs: a written-out answer ("all odd n") that no parser reads is still
    right when it is the gold's own words."""
    squeeze = lambda s: re.sub(r"\s+", "", without_dollars(s)).lower()  # noqa: E731
    return squeeze(a) == squeeze(b)


def without_dollars(text: str) -> str:
    """The text without its math-mode dollar signs; an escaped \\$ (a currency sign) stays."""
    return re.sub(r"(?<!\\)\$", "", text)


def same_answer(a: str, b: str, format: str, grader: str = "math-verify") -> bool:
    """Whether the grader takes two predictions for one answer ("B" and "(B)", "033" and "33", "\\frac{1}{2}" and
    "0.5"): `a` graded against `b` as if `b` were the gold (for options, against `b`'s letter). Majority votes count
    such answers together (easd.lab.reports.report)."""
    if a.strip() == b.strip():
        return True
    if GRADING[format] == "letter":
        letter = choice_letter(b)
        return letter is not None and choice_letter(a) == letter
    return is_correct(a, b, format, grader)


def all_answers_equal(prediction: str, gold: str) -> bool:
    """OlympiadBench: with several answers the prediction must give every one of them, in any order
    (as OlympiadBench's own judge does); one answer is compared whole, so "(1, 2)" stays a pair."""
    wanted = split_answers(gold)
    if len(wanted) == 1:
        return math_equal(prediction, gold)
    given = split_answers(prediction.strip().strip("$"))
    if len(given) != len(wanted):
        return False
    unmatched = list(given)
    for answer in wanted:
        match = next((g for g in unmatched if math_equal(g, answer)), None)
        if match is None:
            return False
        unmatched.remove(match)
    return True


def split_answers(text: str) -> list[str]:
    """Split at commas outside brackets: "1, (2, 3)" -> ["1", "(2, 3)"]."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += (char in "([{") - (char in ")]}")
        if char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [part.strip() for part in parts if part.strip()]


def normalize_number(text: str) -> Decimal | None:
    """GSM8K-style: drop $, commas, units, %, LaTeX wrappers; 18.0 equals 18. None if no number is left."""
    text = text.replace("−", "-").replace("\\$", "").replace("$", "").replace("\\%", "").replace("%", "")
    text = re.sub(r"\\(?:text|mathrm|textbf|mbox)\{([^{}]*)\}", r"\1", text)  # \text{18 apples} -> 18 apples
    text = re.sub(r"\\[!,;: ]", "", text).replace("{,}", "").replace(",", "").strip()
    fraction = re.fullmatch(r"-?\\d?frac\{(-?\d+)\}\{(-?\d+)\}", text)
    if fraction:
        sign = -1 if text.startswith("-") else 1
        denominator = _decimal(fraction[2])  # not int(): Python reads no integer of over 4,300 digits
        return _decimal(fraction[1]) / denominator * sign if denominator else None
    numbers = re.findall(r"-?\d+(?:\.\d+)?|-?\.\d+", text)  # the last number: "x = 18", "18 dollars"
    return _decimal(numbers[-1]) if numbers else None


def _decimal(text: str) -> Decimal:
    try:
        return Decimal(text)
    except InvalidOperation:
        return Decimal("NaN")


def numbers_equal(prediction: str, gold: str) -> bool:
    a, b = normalize_number(prediction), normalize_number(gold)
    return a is not None and b is not None and abs(a - b) <= Decimal("1e-6") * max(1, abs(b))


def choice_letter(text: str) -> str | None:
    """The option letter in an answer like 'B', '(B)', 'B) iron rusting' or '\\text{B}'."""
    match = re.search(r"(?<![A-Za-z])\(?([A-J])\)?(?![A-Za-z])", re.sub(r"\\text\{([^{}]*)\}", r"\1", text))
    return match[1] if match else None


def math_equal(prediction: str, gold: str, seconds: float = MATH_VERIFY_SECONDS) -> bool:
    """math-verify's equivalence, in a forked process we can stop (easd.lab.grading.forked)."""
    return check_in_fork(_math_verify, (prediction, gold), seconds)


def _math_verify(prediction: str, gold: str) -> bool:
    from math_verify import parse, verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)  # it warns that its timeouts are off: ours is on
    # an answer is one formula: dollars inside it ("x$, $y", as OlympiadBench writes lists) would split it, so
    # math-verify reads it without them (an escaped \\$ is a currency sign and stays)
    wrap = lambda s: s if "\\boxed" in s else f"${without_dollars(s)}$"
    return verify(parse(wrap(gold), parsing_timeout=None), parse(wrap(prediction), parsing_timeout=None), timeout_seconds=None)
