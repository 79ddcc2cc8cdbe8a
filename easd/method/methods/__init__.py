"""The methods' table: every decoding method, one object each from a module of its own, and one place that knows them
all: the step, the trace, the speed model, the reports, the command line and the page ask it instead of listing
names, so a method added here (or with `register`) is offered everywhere (docs/method.md, "Adding a method").

Settings, in one flat namespace (easd.method.knobs): the settings every method reads are DecodeSettings' fields;
a method's own are its `settings` dataclass's, named `<method>_<field>` (MTI's `tau` is `mti_tau`). `knobs()` lists
them all, `make_settings` builds DecodeSettings from flat values (a command line's, an API call's, a file's),
`settings_values` is the reverse, and `with_values` changes some.
"""

from __future__ import annotations

import dataclasses
import re

from ...errors import SettingsError, shown
from ..knobs import Knob, coerce, declared
from ..origins import Origin
from ..settings import DecodeSettings
from ..trace import Column, TokenRecord, columns_of
from .base import Method
from .beam import BEAM
from .draft import DRAFT
from .easd import EASD
from .mti import MTI
from .relaxed import RELAXED
from .rsd import RSD
from .sd import SD
from .smc import SMC
from .specguard import SPECGUARD
from .target import TARGET
from .typical import TYPICAL

# in the order the page offers them: the comparison's two first; a method added later comes after those before it,
# so that the API's values in order (/call/compare) keep their places
METHODS: dict[str, Method] = {
    method.name: method for method in (SD, EASD, MTI, RSD, SPECGUARD, SMC, TYPICAL, RELAXED, TARGET, DRAFT, BEAM)
}


_NAME = re.compile(r"[a-z][a-z0-9_]*")  # a method's name is part of flags, API parameters and trace columns


def register(method: Method) -> Method:
    """Add a method to the table (its module's own line: `METHOD = register(Method(...))`); -> the method.
    ValueError, in one line, for a name that is not a lowercase identifier or that clashes with what is there."""
    problem = _clash(method)
    if problem:
        raise ValueError(f"cannot register method {method.name!r}: {problem}")
    METHODS[method.name] = method
    return method


def _clash(method: Method) -> str | None:
    """What keeps `method` out of the table, or None."""
    if not isinstance(method.name, str) or not _NAME.fullmatch(method.name):
        return "a method's name must be a lowercase identifier (letters, digits, _), as it names flags and trace columns"
    if method.name in METHODS:
        return "a method of that name is in the table already"
    settings = knobs()
    if method.name in settings:
        return f"it is the name of a setting (--{method.name.replace('_', '-')})"
    clash = sorted(set(own_knobs(method)) & set(settings))
    if clash:
        return f"its settings {', '.join(clash)} clash with settings already declared"
    mine = columns_of(method.record)
    taken = {f.name for f in dataclasses.fields(TokenRecord)} | set(record_columns()) | set(settings) | set(own_knobs(method))
    clash = sorted(name for name in mine if name in taken and record_columns().get(name) != mine[name])
    if clash:
        return f"its record's columns {', '.join(clash)} are columns of the trace already (a field or a setting)"
    known = origins()
    clash = sorted(o.name for o in method.origins if o.name in known and known[o.name] != o)
    if clash:
        return f"its origins {', '.join(clash)} are declared differently by another method"
    unknown = [name for name in (*method.grid, method.bench) if name and name not in settings | own_knobs(method)]
    if unknown:
        return f"its grid or bench names {', '.join(unknown)}, which is not a setting"
    return None


def lookup(name) -> Method:
    """The method named `name`; SettingsError("method") naming the table's methods if there is none."""
    if not isinstance(name, str) or name not in METHODS:
        raise SettingsError("method", f"must be one of {', '.join(METHODS)} (got {shown(name)})")
    return METHODS[name]


def origins() -> dict[str, Origin]:
    """Every origin of the table's methods, by name, in the table's order (the legend's)."""
    found: dict[str, Origin] = {}
    for method in METHODS.values():
        found |= {origin.name: origin for origin in method.origins if origin.name not in found}
    return found


def record_columns() -> dict[str, Column]:
    """Every method's own trace columns, by name (MTI's guided_top, RSD's rsd_step and rsd_reward)."""
    found: dict[str, Column] = {}
    for method in METHODS.values():
        found |= columns_of(method.record)
    return found


# --- settings by their flat names -------------------------------------------------------------------------------


def own_knobs(method: Method) -> dict[str, Knob]:
    """A method's own settings' knobs, by flat name."""
    return {f"{method.name}_{name}": knob for name, knob in declared(method.settings).items()} if method.settings else {}


def knobs() -> dict[str, Knob]:
    """Every setting's knob by its flat name: DecodeSettings' fields, then each method's own, in the table's order."""
    found = dict(declared(DecodeSettings))
    for method in METHODS.values():
        found |= own_knobs(method)
    return found


def owner(name: str) -> tuple[Method | None, str]:
    """(the method whose own setting `name` is, its field) or (None, name) for a setting every method reads."""
    for method in METHODS.values():
        if method.settings is not None and name.startswith(f"{method.name}_"):
            field = name.removeprefix(f"{method.name}_")
            if field in declared(method.settings):
                return method, field
    return None, name


def make_settings(values: dict | None = None, **more) -> DecodeSettings:
    """DecodeSettings from flat values, a method's own included (`mti_tau`); values read from text (a CSV cell, a
    model_arg) take their knob's kind. Unknown names are refused (SettingsError naming the first). Not validated."""
    values = {**(values or {}), **more}
    common, own = {}, {}
    known = knobs()
    for name, value in values.items():
        if name not in known:
            raise SettingsError(name, "is not a setting of any method here")
        method, field = owner(name)
        value = coerce(known[name], value)
        if method is None:
            common[name] = value
        else:
            own.setdefault(method.name, {})[field] = value
    pairs = tuple((name, METHODS[name].settings(**fields)) for name, fields in own.items())
    return DecodeSettings(**common, own=pairs)


def settings_values(settings: DecodeSettings) -> dict:
    """Every setting of `settings` by its flat name, each method's own included (at its defaults where not set)."""
    values = settings.as_dict()
    for method in METHODS.values():
        if method.settings is not None:
            own = settings.own_settings(method.name, method.settings())
            values |= {f"{method.name}_{name}": value for name, value in dataclasses.asdict(own).items()}
    return values


def with_values(settings: DecodeSettings, **values) -> DecodeSettings:
    """`settings` with some settings changed, by their flat names."""
    return make_settings(settings_values(settings) | values)
