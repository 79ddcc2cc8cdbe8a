"""Reasoning problems: loading them, asking for a boxed answer, extracting it, and grading it.

Formats (one JSON object per line):
  gsm8k   {"question": ..., "answer": "... #### 72"}
  math    {"problem": ..., "solution": "... \\boxed{...} ..."} or {"problem": ..., "answer": ...}
  choice  {"question": ..., "options": [...] or {"A": ...}, "answer": "B"}  (also "choices", "label")
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import random
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path

from ..errors import EasdError

FORMATS = ("gsm8k", "math", "choice")
INSTRUCTION = "Solve the problem step by step, then give the final answer in \\boxed{}."
CHOICE_INSTRUCTION = "Think step by step, then give the letter of the correct option in \\boxed{}."
MATH_VERIFY_SECONDS = 10.0  # our own limit: math-verify's SIGALRM timeouts only work in the main thread
LETTERS = "ABCDEFGHIJ"


@dataclass(frozen=True)
class Problem:
    id: str  # the line number in the data file, so ids stay stable under --shuffle, --offset and --limit
    prompt: str  # what the model is asked
    gold: str  # the reference answer, as the data gives it
    format: str


# --- loading ------------------------------------------------------------------------------------


def load_problems(
    path: str | Path, format: str, limit: int | None = None, offset: int = 0, shuffle: int | None = None
) -> list[Problem]:
    """Problems from a JSONL file; with `shuffle` a fixed seeded order, then `offset` and `limit`."""
    if format not in FORMATS:
        raise EasdError(f"--format: must be one of {', '.join(FORMATS)} (got {format!r})")
    path = Path(path)
    if not path.is_file():
        raise EasdError(f"--data: no such file: {path}")
    lines = [(i, line) for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()) if line.strip()]
    if shuffle is not None:
        random.Random(shuffle).shuffle(lines)
    chosen = lines[offset : None if limit is None else offset + limit]
    if not chosen:
        raise EasdError(f"--offset/--limit: no problems left in {path} ({len(lines)} in the file)")
    return [_problem(number, line, format, path) for number, line in chosen]


def _problem(number: int, line: str, format: str, path: Path) -> Problem:
    try:
        row = json.loads(line)
        prompt, gold = {"gsm8k": _gsm8k, "math": _math, "choice": _choice}[format](row)
    except (json.JSONDecodeError, KeyError, IndexError, TypeError, ValueError) as err:
        raise EasdError(f"--data: line {number + 1} of {path} is not a {format} problem ({type(err).__name__}: {err})") from None
    return Problem(str(number), prompt, gold, format)


def _gsm8k(row: dict) -> tuple[str, str]:
    return f"{row['question'].strip()}\n\n{INSTRUCTION}", row["answer"].rsplit("####", 1)[1].strip()


def _math(row: dict) -> tuple[str, str]:
    gold = row.get("answer") or extract_answer(row["solution"])[0]
    if gold is None:
        raise ValueError("no answer and no \\boxed{} in the solution")
    return f"{row['problem'].strip()}\n\n{INSTRUCTION}", str(gold)


def _choice(row: dict) -> tuple[str, str]:
    options = row.get("options", row.get("choices"))
    items = list(options.items()) if isinstance(options, dict) else list(zip(LETTERS, options))
    answer = row.get("answer", row.get("label"))
    gold = LETTERS[answer] if isinstance(answer, int) else str(answer).strip().strip("()").upper()
    listing = "\n".join(f"({letter}) {text}" for letter, text in items)
    return f"{row['question'].strip()}\n\n{listing}\n\n{CHOICE_INSTRUCTION}", gold


# --- extraction ---------------------------------------------------------------------------------

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def extract_answer(text: str) -> tuple[str | None, str]:
    """(answer, rule): the last balanced \\boxed{...}, else the last number, else nothing."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed, "boxed"
    numbers = _NUMBER.findall(text.replace("−", "-"))
    return (numbers[-1], "last_number") if numbers else (None, "none")


def last_boxed(text: str) -> str | None:
    """The content of the last \\boxed{...} (or \\fbox{...}), braces balanced; None if there is none."""
    starts = [m.end() for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text)]
    for start in reversed(starts):
        depth, i = 1, start
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            return text[start : i - 1].strip()
    return None


# --- grading ------------------------------------------------------------------------------------


def is_correct(prediction: str | None, gold: str, format: str) -> bool:
    if prediction is None:
        return False
    if format == "gsm8k":
        return numbers_equal(prediction, gold)
    if format == "choice":
        return choice_letter(prediction) == gold.upper()
    return math_equal(prediction, gold)


def normalize_number(text: str) -> Decimal | None:
    """GSM8K-style: drop $, commas, units, %, LaTeX wrappers; 18.0 equals 18. None if no number is left."""
    text = text.replace("−", "-").replace("\\$", "").replace("$", "").replace("\\%", "").replace("%", "")
    text = re.sub(r"\\(?:text|mathrm|textbf|mbox)\{([^{}]*)\}", r"\1", text)  # \text{18 apples} -> 18 apples
    text = re.sub(r"\\[!,;: ]", "", text).replace("{,}", "").replace(",", "").strip()
    fraction = re.fullmatch(r"-?\\d?frac\{(-?\d+)\}\{(-?\d+)\}", text)
    if fraction:
        sign = -1 if text.startswith("-") else 1
        return _decimal(fraction[1]) / _decimal(fraction[2]) * sign if int(fraction[2]) else None
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
    """math-verify's equivalence, in a forked process we can stop: its own timeouts use SIGALRM,
    which only works in the main thread (the app and the evaluation may run elsewhere)."""
    context = multiprocessing.get_context("fork")
    result = context.Queue()
    worker = context.Process(target=_math_verify, args=(prediction, gold, result), daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        worker.kill()
        worker.join()
        return False
    return not result.empty() and result.get()


def _math_verify(prediction: str, gold: str, result) -> None:
    from math_verify import parse, verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)  # it warns that its timeouts are off: ours is on
    wrap = lambda s: s if "\\boxed" in s or "$" in s else f"${s}$"
    result.put(
        bool(verify(parse(wrap(gold), parsing_timeout=None), parse(wrap(prediction), parsing_timeout=None), timeout_seconds=None))
    )
