"""The Qwen2.5-Math evaluation's grader, written again here: `--grader qwen25-math`.

RSD's harness and the paper's benchmarks grade with github.com/QwenLM/Qwen2.5-Math's `evaluation/` (its snapshot of
2025): `strip_string` normalises both answers, then `math_equal` compares them. Its rules are lenient in ways ours
(`easd.lab.grading.answers.is_correct`) is not, and a reader comparing our accuracies with the paper's needs its verdicts:

  - a number equals the gold, the gold ÷ 100 or the gold × 100 within a relative 1e-4 (its `include_percentage`):
    "10" is right for a gold of "1000";
  - unit words are cut out of both answers, matched as regular expressions (its list, "q ." and "a" among them);
  - tuples, intervals and matrices compare part by part, "x = 3" compares its right side, and anything else goes to
    sympy (`simplify(a - b) == 0`, or numerically within 1e-4).

What is not the harness's: the answer is ours (`extract_answer`: the last \\boxed{}, else the last number), where the
harness first looks for "the answer is"; its LaTeX parsers are sympy's ANTLR one (pinned to antlr4 4.11, which
math-verify's 4.13 excludes here), sympy's `parse_expr` and a vendored latex2sympy2, where this file has
`parse_expr` and latex2sympy2_extended (math-verify's fork). Numeric and textual answers do not reach a parser;
`scripts/compare_graders.py --ours qwen25-math` measures the agreement with the harness itself (docs/benchmarks.md).
The harness stops a comparison after 3 s (pebble's timeout) and counts it wrong; so does this, in a forked process.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from .forked import check_in_fork

SECONDS = 3.0  # the harness's evaluate.py: `pool.map(math_equal_process, params, timeout=3)`
CHOICES = ("A", "B", "C", "D", "E")

# Unit words cut out of an answer, each used as a regular expression between non-word characters (so "q ." matches
# "q x" too, and "a" cuts the variable a): the harness's list, with every one's plural after it, as it has them.
_UNITS = (
    "east|degree|mph|kmph|ft|m sqaure| m east|sq m|deg|mile|q .|monkey|prime|ratio|profit of rs|rd|o|gm|p . m|lb|tile|"
    "per|dm|lt|gain|ab|way|west|a .|b .|c .|d .|e .|f .|g .|h .|t|a|h|no change|men|soldier|pie|bc|excess|st|inches|"
    "noon|percent|by|gal|kmh|c|acre|rise|a . m|th|π r 2|sq|mark|l|toy|coin|sq . m|gallon|° f|profit|minw|yr|women|"
    "feet|am|pm|hr|cu cm|square|v â € ™|are|rupee|rounds|cubic|cc|mtr|s|ohm|number|kmph|day|hour|minute|min|second|"
    "man|woman|sec|cube|mt|sq inch|mp|∏ cm ³|hectare|more|sec|unit|cu . m|cm 2|rs .|rs|kg|g|month|km|m|cm|mm|apple|"
    "liter|loss|yard|pure|year|increase|decrease|d|less|Surface|litre|pi sq m|s .|metre|meter|inch"
).split("|")
UNIT_WORDS = _UNITS + [unit + "s" for unit in _UNITS]


# --- normalising an answer (the harness's strip_string) ------------------------------------------


def strip_answer(text: str, cut_units: bool = True) -> str:
    """An answer as the harness compares it. `cut_units` is off for Minerva Math, as the harness has it."""
    s = str(text).strip().replace("\n", "").rstrip(".").replace("\\!", "")
    s = re.sub(r"\\begin\{array\}\{.*?\}", r"\\begin{pmatrix}", s)
    s = re.sub(r"\\end\{array\}", r"\\end{pmatrix}", s).replace("bmatrix", "pmatrix")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\neq", "\\ne").replace("\\leq", "\\le").replace("\\geq", "\\ge")
    s = s.replace("\\left", "").replace("\\right", "").replace("\\{", "{").replace("\\}", "}")
    unit = s.find("\\text{")  # from the first \text{ on, if the answer ends in "}": a unit, unless it is all there is
    without_unit = (s[:unit] if unit != -1 and s.endswith("}") else s).strip()
    if without_unit != "":
        s = without_unit
    if cut_units:
        for _ in range(2):
            for unit in UNIT_WORDS:
                cut = re.sub(r"(^|\W)" + unit + r"($|\W)", r"\1\2", s)
                if cut != "":
                    s = cut
    s = s.replace("^{\\circ}", "").replace("^\\circ", "")
    s = s.replace("\\$", "").replace("$", "").replace("\\(", "").replace("\\)", "")
    s = _word_number(s)
    s = _sub_braced(s, "\\text{", lambda text: text)
    for prefix in ("x=", "y=", "z=", "x\\in", "y\\in", "z\\in", "x\\to", "y\\to", "z\\to"):
        s = s.replace(prefix, "")
    s = s.replace("\\emptyset", "{}").replace("(-\\infty,\\infty)", "\\mathbb{R}")
    s = s.replace("\\%", "").replace("%", "")
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    s = s.replace("infinity", "\\infty")
    if "\\infty" not in s:
        s = s.replace("inf", "\\infty")
    s = s.replace("+\\inity", "\\infty").replace("and", "").replace("\\mathbf", "")
    s = _sub_braced(s, "\\mbox{", lambda _: "")
    if "j" in s and "i" not in s:
        s = s.replace("j", "i")
    s = re.sub(r"(?<!\d)(\d+)\.0*([^\d])", r"\1\2", s)  # 18.00 -> 18, 2.0x -> 2x (each run of digits tried once)
    s = re.sub(r"(?<!\d)(\d+)\.0*$", r"\1", s)
    if s == "":
        return s
    if s[0] == ".":
        s = "0" + s
    if len(s.split("=")) == 2 and len(s.split("=")[0]) <= 2:  # "k = 5" -> "5"
        s = s.split("=")[1]
    s = re.sub(r"\\sqrt(\w+)", r"\\sqrt{\1}", s).replace(" ", "")
    return _slash_to_frac(_braced_fracs(s))


def _sub_braced(s: str, opening: str, replacement: Callable[[str], str]) -> str:
    """The harness's re.sub(opening + ".*?}", ...) on an answer without line breaks, in linear time: each `opening`
    up to the next "}" replaced by `replacement` of what lies between. (The regular expression takes quadratic time on
    a model's answer of many openings and no "}": from each one it reads to the end.)"""
    out, i = [], 0
    while (start := s.find(opening, i)) != -1 and (end := s.find("}", start + len(opening))) != -1:
        out += [s[i:start], replacement(s[start + len(opening) : end])]
        i = end + 1
    return "".join(out) + s[i:]


def _word_number(s: str) -> str:
    """ "five" -> "5", as word2number reads it; anything it cannot read stays."""
    from word2number import w2n

    try:
        return str(w2n.word_to_num(s))
    except Exception:  # noqa: BLE001 - word2number raises ValueError, IndexError and others on what it cannot read
        return s


def _braced_fracs(s: str) -> str:
    """\\frac12 -> \\frac{1}{2}, \\frac1{72} -> \\frac{1}{72}; a \\frac with less than two characters after it
    leaves the whole answer as it was."""
    head, *rest = s.split("\\frac")
    out = head
    for part in rest:
        out += "\\frac"
        if part[:1] == "{":
            out += part
        elif len(part) < 2:
            return s
        elif part[1] != "{":
            out += "{" + part[0] + "}{" + part[1] + "}" + part[2:]
        else:
            out += "{" + part[0] + "}" + part[1:]
    return out


def _slash_to_frac(s: str) -> str:
    """ "3/4" -> "\\frac{3}{4}" where both sides are whole numbers (or hold a sqrt) written plainly."""
    parts = s.split("/")
    if len(parts) != 2:
        return s
    try:
        a = parts[0] if "sqrt" in parts[0] else int(parts[0])
        b = parts[1] if "sqrt" in parts[1] else int(parts[1])
    except ValueError:
        return s
    return f"\\frac{{{a}}}{{{b}}}" if s == f"{a}/{b}" else s


# --- comparing two answers (the harness's math_equal) --------------------------------------------


def correct(prediction: str | None, gold: str, format: str) -> bool:
    """The harness's verdict on our extracted answer: both normalised as it normalises them for this format, then
    compared; a comparison past SECONDS (sympy on a hard expression) is wrong, as the harness counts its timeouts."""
    if prediction is None:
        return False
    a, b = strip_answer(prediction, cut_units=format != "minerva"), _gold(gold, format)
    quick = _decided_without_sympy(a, b)
    return quick if quick is not None else _forked(a, b)


def _gold(gold: str, format: str) -> str:
    """The gold as the harness reads it (its parse_ground_truth): normalised like an answer, with units kept in
    Minerva Math's; MATH's, which it extracts from the solution as it extracts an answer, normalised twice."""
    if format == "minerva":
        return strip_answer(gold, cut_units=False)
    return strip_answer(strip_answer(gold)) if format == "math" else strip_answer(gold)


def _decided_without_sympy(prediction: str, reference: str) -> bool | None:
    """The verdicts math_equal reaches before any parser: equal text, an option letter, two numbers, an empty answer."""
    if prediction.strip().lower() == reference.strip().lower():
        return True
    if reference in CHOICES and _choice(prediction) == reference:
        return True
    a, b = _number(prediction), _number(reference)
    if a is not None and b is not None:
        return any(_close(a, gold) for gold in (b / 100, b, b * 100))
    return False if not prediction else None


def answers_equal(prediction: str, reference: str) -> bool:
    """math_equal(prediction, reference) with its defaults (percentages and closeness on), on normalised answers."""
    quick = _decided_without_sympy(prediction, reference)
    if quick is not None:
        return quick
    reference, prediction = reference.strip(), prediction.strip()
    if "pmatrix" in prediction and "pmatrix" not in reference:
        reference = _braces_to_pmatrix(reference)
    ours, theirs = _without_brackets(prediction, reference)
    if ours.lower() == theirs.lower():
        return True
    if re.match(r"(\(|\[).+(\)|\])", prediction) and re.match(r"(\(|\[).+(\)|\])", reference):
        ours, theirs = prediction[1:-1].split(","), reference[1:-1].split(",")  # (a, b) against (c, d): a = c, b = d
        if len(ours) == len(theirs) and all(answers_equal(x, y) for x, y in zip(ours, theirs)):
            return True
    if _is_matrix(prediction) and _is_matrix(reference) and _matrices_equal(prediction, reference):
        return True
    if prediction.count("=") == 1 and reference.count("=") == 1:
        ours, theirs = (f"{lhs.strip()} - ({rhs.strip()})" for lhs, rhs in (prediction.split("="), reference.split("=")))
        if symbolic_equal(ours, theirs) or symbolic_equal(f"-({ours})", theirs):
            return True
    elif prediction.count("=") == 1 and len(prediction.split("=")[0].strip()) <= 2 and "=" not in reference:
        if answers_equal(prediction.split("=")[1], reference):
            return True
    elif reference.count("=") == 1 and len(reference.split("=")[0].strip()) <= 2 and "=" not in prediction:
        if answers_equal(prediction, reference.split("=")[1]):
            return True
    return symbolic_equal(prediction, reference)


def _number(text: str) -> float | None:
    """The harness's parse_digits: commas dropped, a float, or a percentage (a trailing % or \\%) over 100."""
    text = text.replace(",", "")
    try:
        return float(text)
    except ValueError:
        pass
    if text.endswith("%"):
        text = text[:-1].removesuffix("\\")
        try:
            return float(text) / 100
        except ValueError:
            pass
    return None


def _close(a: float, b: float) -> bool:
    return math.isclose(b, a, rel_tol=1e-4)


def _choice(prediction: str) -> str:
    """The option letter math_equal reads in an answer: the last standalone A–E, else the answer itself."""
    cleaned = prediction.strip("\n").rstrip(".").rstrip("/").strip(" ").lstrip(":")
    letters = re.findall(r"\b(A|B|C|D|E)\b", cleaned.upper())
    return (letters[-1] if letters else cleaned.strip().strip(".")).rstrip(".").rstrip("/")


def _without_brackets(prediction: str, reference: str) -> tuple[str, str]:
    """Both answers without brackets: the outer ones stripped when the prediction is a [..] or (..) that the
    reference does not open the other way, then every {, }, ( and )."""
    outer = (prediction.startswith("[") and prediction.endswith("]") and not reference.startswith("(")) or (
        prediction.startswith("(") and prediction.endswith(")") and not reference.startswith("[")
    )
    if outer:
        prediction, reference = prediction.strip("[]()"), reference.strip("[]()")
    drop = lambda s: re.sub(r"[{}()]", "", s)  # noqa: E731
    return drop(prediction), drop(reference)


def _braces_to_pmatrix(text: str) -> str:
    rows = re.findall(r"\{.*,.*\}", text.strip())
    return ", ".join(r"\begin{pmatrix}" + row.strip("{}").replace(",", "\\") + r"\end{pmatrix}" for row in rows)


def _is_matrix(text: str) -> bool:
    return text.startswith(("\\begin{pmatrix}", "\\begin{bmatrix}")) and text.endswith(("\\end{pmatrix}", "\\end{bmatrix}"))


def _matrices_equal(prediction: str, reference: str) -> bool:
    rows = lambda m: [row.strip() for row in m[len("\\begin{pmatrix}") : -len("\\end{pmatrix}")].split("\\\\") if row.strip()]  # noqa: E731
    ours, theirs = rows(prediction), rows(reference)
    if len(ours) != len(theirs):
        return False
    for a, b in zip(ours, theirs):
        a, b = a.split("&"), b.split("&")
        if len(a) != len(b) or not all(answers_equal(x, y) for x, y in zip(a, b)):
            return False
    return True


def symbolic_equal(a: str, b: str) -> bool:
    """Equal as sympy reads them: the same text or object, a zero difference, the same equation, the same number
    within 1e-4, or matrices equal to three decimals."""
    from sympy import N, simplify

    x, y = _sympy(a), _sympy(b)
    checks = (
        lambda: str(x) == str(y) or x == y,
        lambda: x.equals(y) or simplify(x - y) == 0,
        lambda: abs(x.lhs - x.rhs).equals(abs(y.lhs - y.rhs)),
        lambda: _close(float(N(x)), float(N(y))),
        lambda: x.shape == y.shape and x.applyfunc(lambda v: round(v, 3)).equals(y.applyfunc(lambda v: round(v, 3))),
    )
    for check in checks:
        try:
            if check():
                return True
        except Exception:  # noqa: BLE001 - as the harness: a check that sympy cannot make is a check that fails
            continue
    return False


def _sympy(text: str):
    """The first parser that reads the text (with \\\\ as \\, then as written), else the text itself."""
    if "\\textbf" in text:  # latex2sympy2_extended reads \textbf{(113)} as 113; none of the harness's parsers do
        return text
    from latex2sympy2_extended import latex2sympy
    from sympy.parsing.sympy_parser import parse_expr

    for parse in (parse_expr, latex2sympy):
        for form in (text.replace("\\\\", "\\"), text):
            try:
                return parse(form)
            except Exception:  # noqa: BLE001 - parsers raise anything on text they cannot read
                continue
    return text


def _forked(prediction: str, reference: str) -> bool:
    import latex2sympy2_extended  # noqa: F401 - imported here, before the fork: SECONDS limits the comparison, as the
    import sympy  # noqa: F401 - harness's does, not the second it takes a fresh process to import the parsers

    return check_in_fork(answers_equal, (prediction, reference), SECONDS)
