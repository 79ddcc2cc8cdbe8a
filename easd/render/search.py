"""Search in a run: which tokens of the lanes match a filter the reader types, such as

    h_draft>1.5 h_target>1.5 origin=easd_penalty      both models unsure, and EASD refused the draft
    fragile                                           decisions a rounding step could flip
    "apples" overlap<0.6                              tokens holding "apples" where the top-n sets shared little

Conditions are separated by spaces and all must hold: a comparison of h_draft, h_target or overlap (or a number a
method records of its own, such as RSD's rsd_reward) with a number (>, >=, <, <=, =), origin=ORIGIN (an origin of a
method of the table: draft_accepted, target_resample, bonus, easd_penalty, mti_guided, target, draft, …), fragile, or
any other word (in double quotes for one with spaces): text the token holds, in any case. Only what the trace says is
read; nothing is recomputed.
"""

from __future__ import annotations

import math
import operator
import re
import shlex
from dataclasses import dataclass

from ..errors import SettingsError
from ..method.methods import origins, record_columns
from ..method.trace import TokenRecord, Trace

SIGNALS = ("h_draft", "h_target", "overlap")  # and each method's own numbers (`numbers`)
OPERATORS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt, "=": operator.eq}
_COMPARISON = re.compile(r"(?P<name>[a-z_]+)(?P<op>>=|<=|>|<|=)(?P<value>.*)", re.IGNORECASE)
MAX_QUERY = 500  # characters a filter may hold: a longer one is refused, never cut (a cut one matches other tokens)


@dataclass(frozen=True)
class Search:
    """A filter, read: what was typed, and its conditions (each a function of a token's record)."""

    text: str
    conditions: tuple

    @staticmethod
    def read(text) -> Search | None:
        """The filter in `text`, None for an empty one; one line saying what was expected for one it cannot read."""
        if not isinstance(text, str) or not text.strip():
            return None
        text = text.strip()
        if len(text) > MAX_QUERY:
            raise SettingsError(
                "search", f"a filter may hold at most {MAX_QUERY} characters (this one holds {len(text):,}): drop some conditions"
            )
        try:
            words = shlex.split(text, posix=False)  # quotes kept: a quoted word is always text
        except ValueError:
            raise SettingsError("search", 'a quoted text needs its closing quote, as in "two words"') from None
        return Search(text, tuple(_condition(word) for word in words))

    def matches(self, record: TokenRecord) -> bool:
        return all(condition(record) for condition in self.conditions)

    def positions(self, trace: Trace | None) -> list[int]:
        """The indices of `trace`'s tokens that match."""
        return [] if trace is None else [i for i, record in enumerate(trace.records) if self.matches(record)]


def _condition(word: str):
    if word.lower() == "fragile":
        return lambda r: r.fragile is True
    quoted = len(word) >= 2 and word[0] == word[-1] == '"'
    found = None if quoted else _COMPARISON.fullmatch(word)
    if found is None:
        wanted = (word[1:-1] if quoted else word).lower()
        return lambda r: isinstance(r.token_text, str) and wanted in r.token_text.lower()
    name, op, value = found["name"].lower(), found["op"], found["value"]
    if name == "origin":
        if op != "=" or value not in origins():
            raise SettingsError("search", f"origin=NAME takes one of {', '.join(origins())} (got {word[:40]!r})")
        return lambda r: r.origin == value
    if name not in numbers():
        raise SettingsError(
            "search", f"{name} is not something to compare: use {', '.join(numbers())}, origin=…, fragile or a text"
        )
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise SettingsError("search", f"{name}{op} needs a number, as in {name}{op}1.5 (got {word[:40]!r})")
    compare = OPERATORS[op]
    return lambda r: _is_number(r.value(name)) and compare(r.value(name), number)


def numbers() -> tuple[str, ...]:
    """The fields a filter compares with a number: EASD's signals, then each method's own numeric columns."""
    own = (name for name, column in record_columns().items() if column.kind in ("int", "float"))
    return (*SIGNALS, *own)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
