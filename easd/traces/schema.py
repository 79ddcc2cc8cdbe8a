"""What a trace file may hold: every field's type and range, and how much work one file may cause.

A trace file is untrusted input (the app loads uploads), so `easd.traces.files` checks every value
against this schema before anything of the file is returned. A violation raises `SchemaError`,
which names the field; the readers add the row or the JSON path and the file's base name.
docs/app-and-api.md, "Trace files", states the same rules and limits.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..method import methods
from ..method.knobs import is_utf8
from ..method.settings import MAX_TOP_N, RULES
from ..method.trace import SIGNAL_FIELDS, STOP_REASONS, Column

# --- limits: the most work one file can cause --------------------------------------------------
# A 4,000-token run with 20 candidates per token is about 5 MB of CSV; the app exports two runs.
MAX_TRACE_BYTES = 50 * 2**20  # ten times that pair of runs; bigger files are refused unread
MAX_RUNS = 100  # the app writes 2 runs per file and `easd eval` 1; room for hand-merged files
MAX_ROWS = 65_536  # tokens per run: twice the 32k-token context of the Qwen2.5 pairs
MAX_CANDIDATES = MAX_TOP_N  # top candidates per token and side: no run can record more (record_top ≤ 100)
# Every cell is parsed and checked in Python: about 2 µs each on a busy 2-core CPU, so 2M cells
# load in about 4 s. Two 4,000-token runs with 20 candidates per token are 1.2M cells.
MAX_CELLS = 2_000_000
MAX_TOKEN_ID = 2**24  # far above any vocabulary (the largest hold about 262k tokens)
# Text lengths: every text is re-read on each what-if move, so one long text must not cost every user
# (a 45 MB token text once made each move take 9 s). The longest tokens of real vocabularies are
# a few hundred characters; a CSV cell holds at most 131,072 (Python's csv limit) anyway.
MAX_TOKEN_CHARS = 1_024  # token texts, drafted and candidate texts
MAX_NAME_CHARS = 1_024  # model names, info values and keys
MAX_PROMPT_CHARS = 131_072  # the prompt
MAX_COUNT = 2**64 - 1  # the largest seed torch accepts; bounds every other count in a header too

# Each token's top candidates, per distribution: the draft's q and the target's p; a method's own record may add one
# (MTI's guided p̃: its column guided_top gives the side "guided")
SIDES = ("draft", "target")


class SchemaError(Exception):
    """A value breaks the schema. `where` names it (a column, a row and column, or a JSON path)."""

    def __init__(self, where: str, message: str):
        super().__init__(f"{where}: {message}")
        self.where, self.message = where, message


@dataclass(frozen=True)
class Field:
    """One field's type (int | float | bool | text) and its allowed values."""

    kind: str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if self.kind == "bool":
            return "True or False"
        if self.kind == "text":
            return "text" if self.high is None else f"text of at most {self.high:,} characters"
        noun = "an integer" if self.kind == "int" else "a finite number"
        if self.high is not None:
            return (
                f"{noun} from {self.low:g} to {self.high:g}" if self.kind == "float" else f"{noun} from {self.low} to {self.high}"
            )
        return f"{noun} ≥ {self.low:g}" if self.low is not None else noun

    def check(self, value) -> None:
        """Raise ValueError saying what is wrong with `value` (None is checked by the caller)."""
        if type(value) is str and self.kind == "text" and not is_utf8(value):
            raise ValueError(
                f"{_show(value)} holds a lone surrogate (half of a UTF-16 pair), which is not text any file can hold"
            )
        if not self._fits(value):
            raise ValueError(f"{_show(value)} is not {self.describe()}")

    def _fits(self, value) -> bool:
        kind = type(value)  # exact types: True is not an integer here, as it is not in a trace
        if self.kind == "text":
            if kind is not str or (self.high is not None and len(value) > self.high):
                return False
            return value in self.choices if self.choices else True
        if self.kind == "bool":
            return kind is bool
        if kind is not int and (kind is not float or self.kind == "int"):
            return False
        if kind is float and not math.isfinite(value):
            return False
        return (self.low is None or value >= self.low) and (self.high is None or value <= self.high)

    def from_cell(self, cell: str):
        """A CSV cell as this field's checked value ("" is None, except for text); ValueError if it does not fit."""
        if self.kind == "text":
            value = cell
        elif cell == "":
            return None
        else:
            try:
                value = _PARSERS[self.kind](cell)
            except ValueError:
                raise ValueError(f"{_show(cell)} is not {self.describe()}") from None
        self.check(value)
        return value


def _parse_bool(cell: str) -> bool:
    if cell not in ("True", "False"):
        raise ValueError(cell)
    return cell == "True"


_PARSERS = {"int": int, "float": float, "bool": _parse_bool}


def _show(value) -> str:
    """A value for a message: repr, cut short so that one line stays one line."""
    shown = repr(value[:60] if isinstance(value, str) else value)  # cut first: the value may be megabytes long
    return shown if len(shown) <= 60 else shown[:57] + "..."


TEXT = Field("text", high=MAX_TOKEN_CHARS)
NAME = Field("text", high=MAX_NAME_CHARS)
PROMPT = Field("text", high=MAX_PROMPT_CHARS)
BOOL = Field("bool")
PROBABILITY = Field("float", 0.0, 1.0)
ENTROPY = Field("float", 0.0)  # nats
TOKEN_ID = Field("int", 0, MAX_TOKEN_ID)
INDEX = Field("int", 0, MAX_ROWS - 1)
COUNT = Field("int", 0, MAX_COUNT)
REAL = Field("float")

ROW_FIELDS = {
    "method": Field("text", high=MAX_NAME_CHARS),  # a name in the methods' table: `check_row` asks it
    "rule": Field("text", choices=RULES),
    "position": INDEX,
    "block": INDEX,
    "token_id": TOKEN_ID,
    "token_text": TEXT,
    "origin": Field("text", high=MAX_NAME_CHARS),  # one of its method's origins: `check_row` asks the table
    "draft_token_id": TOKEN_ID,
    "draft_token_text": TEXT,
    "p_draft": PROBABILITY,
    "p_target": PROBABILITY,
    "accept_prob": PROBABILITY,
    "h_draft": ENTROPY,
    "h_target": ENTROPY,
    "overlap": PROBABILITY,
    "triggered": BOOL,
    "h_draft_margin": REAL,
    "h_target_margin": REAL,
    "draft_gap": Field("float", 0.0),
    "target_gap": Field("float", 0.0),
    "overlap_swap": BOOL,
    "h_draft_tol": Field("float", 0.0),
    "h_target_tol": Field("float", 0.0),
    "overlap_low": PROBABILITY,
    "overlap_high": PROBABILITY,
    "fragile": BOOL,
}
REQUIRED = ("position", "block", "token_id", "token_text", "origin")


def settings_fields() -> dict[str, Field]:
    """Every setting's type, by its flat name (easd.method.methods.knobs): a method added to the table brings its own.
    Types only: DecodeSettings.validate() then checks their ranges, as it does for a run's."""
    kinds = {"int": COUNT, "float": REAL, "text": NAME}
    return {
        name: Field("text", choices=knob.choices) if knob.choices else kinds[knob.kind] for name, knob in methods.knobs().items()
    }


def record_fields() -> dict[str, Field]:
    """The scalar columns of the methods' own records, by name (RSD's rsd_step, rsd_reward), from their declarations."""
    return {name: _field(column) for name, column in methods.record_columns().items() if column.kind != "candidates"}


def sides() -> tuple[str, ...]:
    """Every candidate list's side: the draft's and the target's, then the methods' own (guided_top -> "guided")."""
    own = (name.removesuffix("_top") for name, column in methods.record_columns().items() if column.kind == "candidates")
    return (*SIDES, *own)


def _field(column: Column) -> Field:
    if column.kind == "text":
        return Field("text", high=MAX_NAME_CHARS)
    if column.kind == "int":
        return Field("int", 0 if column.low is None else column.low, MAX_COUNT if column.high is None else column.high)
    return Field(column.kind, column.low, column.high)


MODEL_FIELDS = {"draft_model": NAME, "target_model": NAME}
STATS_FIELDS = {
    "prompt_tokens": COUNT,
    "seconds": ENTROPY,  # a finite number ≥ 0
    "target_calls": COUNT,
    "draft_calls": COUNT,
    "target_seconds": ENTROPY,
    "draft_seconds": ENTROPY,
    "target_rows": COUNT,
    "draft_rows": COUNT,
    "scoring_calls": COUNT,
    "scoring_seconds": ENTROPY,
    "stop_reason": Field("text", choices=STOP_REASONS),
}
CANDIDATE_PARTS = {"id": TOKEN_ID, "text": TEXT, "prob": PROBABILITY}
_CANDIDATE = re.compile(r"([a-z][a-z0-9_]*)_top([1-9][0-9]{0,5})_(id|text|prob)")


def candidate_names(side: str) -> list[tuple[str, str, str]]:
    """The (id, text, prob) column names of a side's candidates 1..MAX_CANDIDATES."""
    return [(f"{side}_top{j}_id", f"{side}_top{j}_text", f"{side}_top{j}_prob") for j in range(1, MAX_CANDIDATES + 1)]


def candidate_field(name: str, known: tuple[str, ...] | None = None) -> Field | None:
    """The Field of a candidate column such as draft_top3_prob; None if `name` is not one (`known`: the sides, as
    `sides()` gives them)."""
    match = _CANDIDATE.fullmatch(name)
    ok = match and match[1] in (known or sides()) and int(match[2]) <= MAX_CANDIDATES
    return CANDIDATE_PARTS[match[3]] if ok else None


def candidate_count(names) -> int:
    """How many candidates per side the names (CSV header, JSON row keys) hold: the largest j."""
    return max((int(m[2]) for m in map(_CANDIDATE.fullmatch, names) if m), default=0)


def check_value(name: str, value, field: Field) -> None:
    """Check one non-None value; SchemaError(name) if it is of the wrong type or out of range."""
    try:
        field.check(value)
    except ValueError as err:
        raise SchemaError(name, str(err)) from None


def check_fields(values: dict, fields: dict[str, Field]) -> None:
    """Every key known to `fields`, every non-None value of its type and range."""
    for name, value in values.items():
        if name not in fields:
            raise SchemaError(name, "not a field of the trace format")
        if value is not None:
            check_value(name, value, fields[name])


def check_row(row: dict, method: str, top: int) -> None:
    """The rules that tie a row's fields together, on a row whose values each passed `check_value`: its origin is one
    of its method's, it carries what that origin needs (and EASD's signals where its method shows them), and it fills
    no other method's own columns.

    `top` bounds the candidates to look at: the CSV header's count, or the JSON row's largest.
    """
    for name in REQUIRED:
        if row.get(name) is None:
            raise SchemaError(name, "is empty, but every row needs it")
    runs = methods.lookup(method)
    origin = {o.name: o for o in runs.origins}.get(row["origin"])
    if origin is None:
        raise SchemaError("origin", f"{row['origin']!r} does not occur in {method} runs (only {', '.join(runs.origin_names)})")
    needs = origin.needs
    if runs.signals:  # the rule's signals at every drafted position, and the target's entropy after the drafts
        needs += SIGNAL_FIELDS if "draft_token_id" in needs else ("h_target",) if origin.role == "bonus" else ()
    for name in needs:
        if row.get(name) is None:
            raise SchemaError(name, f"is empty, but a {origin.name} row needs it ({method} runs)")
    mine = methods.columns_of(runs.record)
    for name, column in methods.record_columns().items():
        if name not in mine and _given(row, name, column):
            raise SchemaError(name, f"is not recorded by {method} runs: leave it empty")
    _check_paired(row, "draft_token_id", "draft_token_text")
    for side in sides():
        check_candidates(row, side, top)


def _given(row: dict, name: str, column: Column) -> bool:
    """Whether a row holds a value in a column of a method's own record (a candidate list's first id for one)."""
    return row.get(f"{name.removesuffix('_top')}_top1_id" if column.kind == "candidates" else name) is not None


def _check_paired(row: dict, id_name: str, text_name: str) -> None:
    if row.get(id_name) is None and row.get(text_name) is not None:
        raise SchemaError(text_name, f"is given without {id_name}")
    if row.get(id_name) is not None and row.get(text_name) is None:
        raise SchemaError(text_name, f"is missing, but {id_name} is given")


def check_candidates(row: dict, side: str, top: int) -> None:
    """Candidates 1..j of a side are given whole (id, text, prob) and without gaps."""
    gap = None
    for id_name, text_name, prob_name in candidate_names(side)[:top]:
        _check_paired(row, id_name, text_name)
        if (row.get(id_name) is None) != (row.get(prob_name) is None):
            raise SchemaError(prob_name, f"must be given exactly when {id_name} is")
        if row.get(id_name) is None:
            gap = gap or id_name
        elif gap:
            raise SchemaError(id_name, f"follows an empty {gap}: candidates are listed without gaps")


def check_block_drafts(drafted, k: int) -> None:
    """A JSON block's drafts: at most k (id, text) pairs."""
    if not isinstance(drafted, list) or len(drafted) > k:
        raise SchemaError("drafted", f"must be a list of at most k = {k} [id, text] pairs")
    for i, pair in enumerate(drafted):
        if not (isinstance(pair, list) and len(pair) == 2):
            raise SchemaError(f"drafted[{i}]", "must be an [id, text] pair")
        check_value(f"drafted[{i}][0]", pair[0], TOKEN_ID)
        check_value(f"drafted[{i}][1]", pair[1], TEXT)
