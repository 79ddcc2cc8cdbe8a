"""Answers: extracting one from a model's text (the last \\boxed{}, else the last number) and grading it against the
gold, by each format's rule (GRADING) and either grader (GRADERS)."""

from __future__ import annotations

import logging
import re
from decimal import Decimal, InvalidOperation

from ...errors import shown
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
GRADERS = ("math-verify", "qwen25-math")  # `--grader`: ours, and the Qwen2.5-Math harness's (is_correct)
MATH_VERIFY_SECONDS = 10.0  # our own limit: math-verify's SIGALRM timeouts only work in the main thread
# An answer (a number or a formula) goes through regular expressions in this process before any parser: a longer one
# is no answer (extract_answer's rule "too_long"), and a longer gold is refused when the data is loaded.
MAX_ANSWER_CHARS = 1_000


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
