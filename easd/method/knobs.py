"""Every setting declared once: what it means, its range and unit, and how the page shows it.

A setting is a field of a settings dataclass (DecodeSettings, or a method's own, easd.method.methods) declared with
`knob(default, help, ...)`. Everything that names settings reads these declarations instead of listing them again:
the checks below (`check`), the command line's flags (easd.cli.flags), the page's controls and the API's and MCP
tool's parameters (components.controls, components.api), the trace's settings columns (easd.traces) and the
lm-eval harness's model_args (easd.lab.runs.harness). A method's own setting is named, everywhere outside its dataclass,
`<method>_<field>` (MTI's `tau` is `mti_tau`, `--mti-tau`), so that one flat namespace holds them all.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from ..errors import SettingsError, shown


@dataclass(frozen=True)
class Control:
    """How the page shows a setting, which is also what the page and the API accept (a crafted request gets no more
    than the page offers): a slider from `low` to `high` in `step`s, a number box, a text box, or a list of choices."""

    kind: str  # slider | number | text | choice
    low: float | None = None
    high: float | None = None
    step: float | None = None


@dataclass(frozen=True)
class Knob:
    """One setting's declaration; its name and type are its field's (see `knob`)."""

    help: str  # what it does, in a sentence: flag help, the API's and MCP tool's description, the docs
    kind: str = "float"  # int | float | text, from the default
    low: float | None = None  # the least value it may take (inclusive)
    high: float | None = None  # the most (inclusive)
    unit: str = ""  # what its numbers count ("nats"), said with its range
    choices: tuple[str, ...] = ()  # a text from this list
    zero: bool = False  # 0 is allowed too, below `low` (temperature: 0 is greedy)
    nonblank: bool = False  # a text must hold more than spaces
    expects: str = ""  # what a value must be, in words, where the range alone would say it badly
    label: str = ""  # how the page names it ("τ_H"); its name where empty
    short: str = ""  # what it is, in the page's few words ("entropy threshold (nats)")
    control: Control | None = None  # on the page and the API; None: the command line, files and model_args only
    per_request: bool = False  # lm-eval sets it per request (max_gen_toks, temperature, top_p): no model_arg
    sweep: tuple[float, ...] = ()  # the values a grid over it takes unless told (the paper's grid); (): its one value

    def describe(self) -> str:
        """What a value must be: "an integer from 1 to 64", "a number of nats ≥ 0", "one of full, no_overlap, …"."""
        if self.expects:
            return self.expects
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if self.kind == "text":
            return f"a text of {self.low:g} to {self.high:,g} characters" if self.high is not None else "a text"
        noun = "an integer" if self.kind == "int" else f"a number of {self.unit}" if self.unit else "a number"
        # an integer's bound whole (the seed's 2^63 − 1, not 9.22337e+18), a number's as %g
        bound = (lambda x: str(int(x))) if self.kind == "int" else (lambda x: f"{x:g}")
        if self.low is not None and self.high is not None:
            return f"{noun} from {bound(self.low)} to {bound(self.high)}"
        return f"{noun} ≥ {bound(self.low)}" if self.low is not None else noun

    def check(self, name: str, value) -> None:
        """SettingsError(name) unless `value` is of this knob's kind and in its range."""
        cut = value[:40] if isinstance(value, str) else value  # a pasted megabyte still makes one line
        if not self._fits(value):
            past = ", past a float's range" if isinstance(value, int) and not finite(value) else ""  # 10**400 from JSON
            raise SettingsError(name, f"must be {self.describe()} (got {shown(cut)}{past})")
        if self.kind == "text" and not is_utf8(value):  # refused here, not when a file of the run is written
            raise SettingsError(name, f"must be UTF-8 text (got {shown(cut)}, which holds bytes that are not); retype it")

    def _fits(self, value) -> bool:
        if self.kind == "text":
            if not isinstance(value, str):
                return False
            if self.choices:
                return value in self.choices
            if self.nonblank and not value.strip():
                return False
            return (self.low or 0) <= len(value) and (self.high is None or len(value) <= self.high)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.kind == "int" and not isinstance(value, int):
            return False
        if not finite(value):
            return False
        if self.zero and value == 0:
            return True
        return (self.low is None or value >= self.low) and (self.high is None or value <= self.high)


def finite(number: int | float) -> bool:
    """False for NaN, the infinities and an integer past a float's range (10**400 in JSON), which no setting takes."""
    try:
        return math.isfinite(number)
    except OverflowError:  # math converts an integer to a float first
        return False


def is_utf8(text: str) -> bool:
    """False for text no file can hold: bytes that were not UTF-8 (argv's and the file system's surrogate escapes,
    `\\udcff`) or half of a UTF-16 pair (possible in JSON, `\\ud800`)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def knob(default, help: str, **declared):  # noqa: A002 (a knob's help is its help)
    """A dataclass field declared as a setting: its default, what it does, and the rest of `Knob`."""
    kind = "text" if isinstance(default, str) else "int" if isinstance(default, int) else "float"
    return dataclasses.field(default=default, metadata={"knob": Knob(help, kind=kind, **declared)})


def declared(settings_class) -> dict[str, Knob]:
    """The knobs of a settings dataclass, by field name, in declaration order."""
    return {f.name: f.metadata["knob"] for f in dataclasses.fields(settings_class) if "knob" in f.metadata}


def check(settings, prefix: str = "") -> None:
    """SettingsError naming the first setting of `settings` (a settings dataclass) out of range; its name is
    `prefix` + the field's (a method's own settings are named <method>_<field> everywhere)."""
    for name, declaration in declared(type(settings)).items():
        declaration.check(prefix + name, getattr(settings, name))


def coerce(declaration: Knob, value):
    """A value read from text or JSON (a CSV cell, a model_arg) as its knob's kind; unchanged where it is not one (an
    integer past a float's range too, 10**400 from JSON: the knob's check then names it)."""
    if value is None or declaration.kind == "text":
        return value if value is None or declaration.kind != "text" else str(value)
    if declaration.kind == "int" and (type(value) is int or isinstance(value, str)):
        try:
            return int(value)  # exactly: through a float, a seed of 2**60 + 1 would become 2**60
        except ValueError:
            pass  # "4.0", "1e3": read as a number below
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return value
    if declaration.kind == "int":
        return int(number) if math.isfinite(number) and number == int(number) else value
    return number
