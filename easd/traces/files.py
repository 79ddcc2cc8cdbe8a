"""A trace's files: CSV and JSON, in and out, every field of a file read checked against the schema (schema.py).

The column names are those of the README's "The trace" section and are stable: the app, the CLI and the evaluation
read and write them. Values that do not exist for a row are empty in CSV and null in JSON. A file may hold several
runs (the app exports SD and EASD together); runs in a CSV start where `position` is 0. Every setting is a column
(easd.method.methods.knobs: a method added to the table brings its own), the same on each row of a run.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from ..errors import EasdError, SettingsError
from ..files import write_text_whole
from ..method import methods
from ..method.settings import DecodeSettings
from ..method.summary import summarize
from ..method.trace import MARGIN_COLUMNS, BlockInfo, Candidate, RunStats, TokenRecord, Trace
from . import schema
from .schema import MAX_CELLS, MAX_ROWS, MAX_RUNS, MAX_TRACE_BYTES, SchemaError

FORMAT = "easd-trace"
DELTA_FORMAT = "easd-trace-update"  # a streamed run's new rows (see to_json_delta)
FORMAT_VERSION = 2
# Version 1 named a block's end in words of its own; version 2 names it by the origin of its last token.
# A version-1 file reads with its block ends renamed, and is otherwise the same.
VERSION_1_ENDS = {"rejected": "target_resample", "penalty": "easd_penalty", "bonus": "bonus"}

# --- flat rows (CSV columns) --------------------------------------------------------------------

_TOP_LISTS = [f"{side}_top" for side in schema.SIDES]
_RECORD_SCALARS = [f.name for f in fields(TokenRecord) if f.name not in (*_TOP_LISTS, "own")]
# The settings in every file since the first; the others were added later (a method's own among them), so a file
# may lack their columns: they read as their defaults. So may it lack a column added to the rows later, and the
# columns of the methods' own records (a file has those of its own methods).
_FIRST_SETTINGS = ("method", "rule", "tau_h", "tau_o", "top_n", "k", "temperature", "top_p", "seed")
_MODEL_COLUMNS = ["draft_model", "target_model"]


def setting_columns() -> list[str]:
    """Every setting's column, by its flat name (method and rule first, as the README's trace lists them)."""
    names = list(methods.knobs())
    return ["method", "rule", *(name for name in names if name not in ("method", "rule"))]


def columns(top: int, held: list[str] = ()) -> list[str]:
    """CSV column names for traces of the methods `held` keeping `top` candidates per token, in the README's order:
    the run's method and rule, each token's fields, its candidates, the rule's margins, the settings and the models.
    Each method's own record adds its columns (a candidate list as a side of the candidates)."""
    own = {name: column for m in held for name, column in methods.columns_of(methods.lookup(m).record).items()}
    sides = [*schema.SIDES, *(name.removesuffix("_top") for name, c in own.items() if c.kind == "candidates")]
    tops = [f"{side}_top{j}_{part}" for j in range(1, top + 1) for side in sides for part in ("id", "text", "prob")]
    decisions = [name for name in _RECORD_SCALARS if name not in MARGIN_COLUMNS]
    decisions += [name for name, column in own.items() if column.kind != "candidates"]
    run, *rest = [setting_columns()[:2], setting_columns()[2:]]
    return [*run, *decisions, *tops, *MARGIN_COLUMNS, *rest[0], *_MODEL_COLUMNS]


def to_rows(trace: Trace) -> list[dict]:
    """One flat dict per token, keyed by the CSV columns."""
    run = methods.settings_values(trace.settings) | {"draft_model": trace.draft_model, "target_model": trace.target_model}
    return [{**_flatten(record), **run} for record in trace.records]


def _scalars(record: TokenRecord) -> dict:
    """A record's one-value fields, its method's own included: a row without its candidate lists."""
    row = {name: getattr(record, name) for name in _RECORD_SCALARS}
    if record.own is not None:
        row |= {name: value for name, value in asdict(record.own).items() if not isinstance(value, list)}
    return row


def _flatten(record: TokenRecord) -> dict:
    row = _scalars(record)
    lists = {f"{side}_top": getattr(record, f"{side}_top") for side in schema.SIDES}
    if record.own is not None:
        lists |= {name: value for name, value in asdict(record.own).items() if isinstance(value, list)}
    for name, candidates in lists.items():
        side = name.removesuffix("_top")
        for j, (token_id, text, prob) in enumerate(candidates, start=1):
            row.update({f"{side}_top{j}_id": token_id, f"{side}_top{j}_text": text, f"{side}_top{j}_prob": prob})
    return row


def _record_from_row(row: dict, record_class) -> TokenRecord:
    """A record from a checked row; its method's own record where the row fills any of its columns."""
    scalars = {name: row.get(name) for name in _RECORD_SCALARS}
    tops = {f"{side}_top": _candidates(row, side) for side in schema.SIDES}
    own = {
        name: _candidates(row, name.removesuffix("_top")) if column.kind == "candidates" else row.get(name)
        for name, column in methods.columns_of(record_class).items()
    }
    filled = any(value not in (None, []) for value in own.values())
    return TokenRecord(**scalars, **tops, own=record_class(**own) if filled else None)


def _candidates(row: dict, side: str) -> list[Candidate]:
    found = []
    for id_name, text_name, prob_name in schema.candidate_names(side):
        if row.get(id_name) is None:
            return found
        found.append((row[id_name], row[text_name], row[prob_name]))
    return found


# --- reading: every row checked against the schema (schema.py) -----------------------------------


def _settings(values: dict) -> DecodeSettings:
    """Settings from a file pass the same checks as a run's: a file cannot ask for top_n = 200000, nor a method the
    table lacks."""
    schema.check_fields(values, schema.settings_fields())
    try:
        settings = methods.make_settings(values).validate()
        methods.lookup(settings.method)
    except SettingsError as err:  # "--top-n: must be …" names the flag; a file names the field
        raise SchemaError(err.setting, err.message) from None
    return settings


def _append_record(trace: Trace, row: dict, top: int) -> None:
    """Check a typed row (`top` candidates per side at most) against the schema and its run, then add it."""
    schema.check_row(row, trace.settings.method, top)
    if row["position"] != len(trace.records):
        raise SchemaError(
            "position", f"is {row['position']}, but this is token {len(trace.records)} of its run (positions count from 0)"
        )
    if trace.records and row["block"] < trace.records[-1].block:
        raise SchemaError("block", f"is {row['block']}, but the token before is in block {trace.records[-1].block}")
    record = _record_from_row(row, methods.lookup(trace.settings.method).record)
    trace.records.append(record)
    kept = max(len(candidates) for candidates in _flatten_lists(record))
    if kept > trace.settings.trace_top:  # the run kept more candidates than its settings say: remember how many
        trace.settings = replace(trace.settings, record_top=kept)


def _flatten_lists(record: TokenRecord) -> list[list]:
    """Every candidate list of a record, its method's own included."""
    lists = [getattr(record, name) for name in _TOP_LISTS]
    return lists + [v for v in asdict(record.own).values() if isinstance(v, list)] if record.own is not None else lists


# --- CSV ------------------------------------------------------------------------------------------


def _optional_texts() -> list[tuple[str, str]]:
    """(id, text) columns whose text is None, not "", when the id is empty."""
    return [("draft_token_id", "draft_token_text")] + [
        (i, t) for side in schema.sides() for i, t, _ in schema.candidate_names(side)
    ]


# OWASP, "CSV Injection": a spreadsheet runs a cell that starts with one of these as a formula.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _protect(text: str) -> str:
    """Prefix one ' to text a spreadsheet would run, and to text that starts with ' (so reading can undo it exactly)."""
    return "'" + text if text.startswith((*FORMULA_STARTS, "'")) else text


def _unprotect(cell: str) -> str:
    return cell[1:] if cell.startswith("'") else cell


def write_csv(traces: list[Trace], path: str | Path) -> None:
    """CRLF line ends (RFC 4180), so a bare carriage return inside token text gets quoted too.

    Text cells are protected against formula injection (see `_protect`); numbers are written as they are.
    """
    held = list(dict.fromkeys(t.settings.method for t in traces))
    names = columns(max((t.settings.trace_top for t in traces), default=5), held)
    known = _Known.now()
    is_text = [known.field(name).kind == "text" for name in names]
    with Path(path).open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\r\n")
        writer.writerow(names)
        for trace in traces:
            for row in to_rows(trace):
                writer.writerow(_cell(row.get(name), text) for name, text in zip(names, is_text))


def _cell(value, text: bool):
    if value is None:
        return ""
    return _protect(value) if text else value


@dataclass(frozen=True)
class _Known:
    """What a file's columns may be, read once per file from the methods' table (a method added to it brings its own
    settings and record columns)."""

    settings: dict  # every setting's Field, by flat name
    records: dict  # every method's own scalar record columns' Fields
    sides: tuple[str, ...]  # every candidate list's side

    @classmethod
    def now(cls) -> _Known:
        return cls(schema.settings_fields(), schema.record_fields(), schema.sides())

    def field(self, name: str) -> schema.Field | None:
        """The Field of a CSV column; None if no method here has it."""
        return self.row_field(name) or self.settings.get(name) or schema.MODEL_FIELDS.get(name)

    def row_field(self, name: str) -> schema.Field | None:
        """The Field of a token's field (a JSON row's key): its record's, its method's own, or a candidate's."""
        return schema.ROW_FIELDS.get(name) or self.records.get(name) or schema.candidate_field(name, self.sides)


def read_csv(path: str | Path) -> list[Trace]:
    """Read a trace CSV exactly and check every cell; one line naming the first bad row and column if any is bad."""
    path = Path(path)
    try:
        # utf-8-sig: a byte-order mark (a spreadsheet or an editor wrote it) is no part of the header
        with path.open(newline="", encoding="utf-8-sig") as handle:
            return _runs_from_csv(csv.reader(handle))
    except SchemaError as err:
        raise EasdError(f"{path.name}: {err}") from None
    except UnicodeDecodeError:
        raise EasdError(f"{path.name}: not a readable trace CSV (it is not UTF-8 text)") from None
    except csv.Error as err:
        raise EasdError(f"{path.name}: not a readable trace CSV ({_csv_problem(err)})") from None


def _csv_problem(err: csv.Error) -> str:
    """Python's csv message in a trace's words (it speaks of its own `field limit` otherwise)."""
    if "field larger than field limit" in str(err):
        return f"a cell is longer than the {csv.field_size_limit():,} characters a CSV cell may hold"
    return str(err)


def _runs_from_csv(lines: Iterator[list[str]]) -> list[Trace]:
    names = next(lines, [])
    known = _Known.now()
    header = _check_header(names, known)
    top = schema.candidate_count(names)
    run_columns = [name for name in (*setting_columns(), *_MODEL_COLUMNS) if name in names]  # the same on every row of a run
    texts = _optional_texts()
    traces: list[Trace] = []
    first: dict = {}  # the run columns of the current run's first row
    for number, line in enumerate(lines, start=2):  # numbered as a spreadsheet does: the header is row 1
        if not line:
            continue  # a blank line
        if (number - 1) * len(header) > MAX_CELLS:
            raise SchemaError(f"row {number}", f"the file holds more than the {MAX_CELLS:,} cells a trace may have")
        try:
            row = _csv_row(header, line, texts)
            if row["position"] == 0:  # a new run starts here
                if len(traces) == MAX_RUNS:
                    raise SchemaError("", f"a file may hold at most {MAX_RUNS} runs")
                first = {name: row.get(name) for name in run_columns}
                traces.append(_csv_run(first))
            elif not traces:
                raise SchemaError("position", "the first row must start a run, with position 0")
            _check_same_run(row, first)
            _append_record(traces[-1], row, top)
        except SchemaError as err:
            raise SchemaError(f"row {number}, column {err.where}" if err.where else f"row {number}", err.message) from None
    return traces


def _check_header(header: list[str], known: _Known) -> list[tuple[str, schema.Field]]:
    top = schema.candidate_count(header)
    if top > schema.MAX_CANDIDATES:
        raise SchemaError("header", f"{top} candidates per token is more than the {schema.MAX_CANDIDATES} a trace may have")
    optional = (*MARGIN_COLUMNS, *(name for name in known.settings if name not in _FIRST_SETTINGS))
    missing = [name for name in columns(top) if name not in header and name not in optional]
    if missing:
        raise SchemaError("header", f"not an EASD trace; missing columns: {', '.join(missing[:6])}")
    if len(header) != len(set(header)):
        raise SchemaError("header", f"column {next(n for n in header if header.count(n) > 1)!r} appears twice")
    unknown = [name for name in header if known.field(name) is None]
    if unknown:
        raise SchemaError("header", f"{unknown[0]!r} is not a column of the trace format")
    return [(name, known.field(name)) for name in header]


def _csv_row(header: list[tuple[str, schema.Field]], line: list[str], texts: list[tuple[str, str]]) -> dict:
    """A line's cells as typed values, each checked against its column's Field (`texts`: `_optional_texts()`)."""
    if len(line) != len(header):
        raise SchemaError("", f"has {len(line)} cells, but the header has {len(header)} columns")
    row = {}
    for (name, spec), cell in zip(header, line):
        try:
            row[name] = spec.from_cell(_unprotect(cell) if spec.kind == "text" else cell)
        except ValueError as err:
            raise SchemaError(name, str(err)) from None
    for id_name, text_name in texts:  # text exists exactly when its id does: "" with an id is an empty token
        if row.get(text_name) == "" and row.get(id_name) is None:
            row[text_name] = None
    return row


def _csv_run(first: dict) -> Trace:
    given = {name: value for name, value in first.items() if name not in _MODEL_COLUMNS and value is not None}
    return Trace(settings=_settings(given), draft_model=first["draft_model"], target_model=first["target_model"])


def _check_same_run(row: dict, first: dict) -> None:
    for name in first:
        if row.get(name) != first[name]:
            raise SchemaError(
                name, f"is {row.get(name)!r}, but {first[name]!r} on the run's first row: a run's settings are on every row"
            )


# --- JSON -----------------------------------------------------------------------------------------


def to_json_dict(traces: list[Trace]) -> dict:
    return {"format": FORMAT, "version": FORMAT_VERSION, "runs": [_run_to_json(t) for t in traces]}


def to_json_delta(traces: list[Trace], sent: list[tuple[int, int]]) -> dict:
    """What each run gained since `sent` (its rows and blocks sent already): one update of a streamed run.

    A reader appends each update's `rows` and `blocks` to the run's earlier ones (`first_row` and
    `first_block` say where they go); `stats` is the run's so far. Update rows hold every column
    but the candidate lists (draft_topJ_*, target_topJ_*), which are most of a row's bytes: the
    stream ends with the whole document (`to_json_dict`), candidates included.
    """
    return {
        "format": DELTA_FORMAT,
        "version": FORMAT_VERSION,
        "runs": [
            {
                "method": trace.settings.method,
                "first_row": rows,
                "rows": [_scalars(r) for r in trace.records[rows:]],
                "first_block": blocks,
                "blocks": [_block_to_json(b) for b in trace.blocks[blocks:]],
                "stats": asdict(trace.stats),
            }
            for trace, (rows, blocks) in zip(traces, sent)
        ],
    }


def _block_to_json(block: BlockInfo) -> dict:
    """A block as `asdict` would give it, without its generic walk (a run has hundreds of blocks, streamed to many users)."""
    return {"index": block.index, "drafted": [tuple(d) for d in block.drafted], "end": block.end}


def _run_to_json(trace: Trace) -> dict:
    return {
        "settings": methods.settings_values(trace.settings),
        "draft_model": trace.draft_model,
        "target_model": trace.target_model,
        "prompt": trace.prompt,
        "system": trace.system,
        "info": trace.info,
        "stats": asdict(trace.stats),
        "summary": summarize(trace),
        "blocks": [_block_to_json(b) for b in trace.blocks],
        "rows": [_flatten(r) for r in trace.records],
    }


def write_json(traces: list[Trace], path: str | Path) -> None:
    """The traces as one JSON file, written aside and renamed into place: a kill leaves the whole file or none."""
    write_text_whole(Path(path), json.dumps(to_json_dict(traces), ensure_ascii=False, indent=1))


def read_json(path: str | Path, capped: bool = True) -> list[Trace]:
    """Read a trace JSON and check every field; one line naming the first bad field (a JSON path) if any is bad.
    A file of more fields than MAX_CELLS is refused unless it is not `capped` (one this program wrote itself)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))  # a byte-order mark is no part of the text
    except RecursionError:
        raise EasdError(f"{path.name}: not a readable trace JSON (nested too deeply)") from None
    except UnicodeDecodeError:
        raise EasdError(f"{path.name}: not a readable trace JSON (it is not UTF-8 text)") from None
    except json.JSONDecodeError as err:
        raise EasdError(f"{path.name}: not a readable trace JSON ({err.msg} at line {err.lineno}, column {err.colno})") from None
    except ValueError:  # Python refuses integers of over 4,300 digits
        raise EasdError(f"{path.name}: not a readable trace JSON (a number has more digits than a trace can hold)") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise EasdError(f'{path.name}: not an EASD trace (expected "format": "{FORMAT}")')
    try:
        return _runs_from_json(data, capped)
    except SchemaError as err:
        raise EasdError(f"{path.name}: {err}") from None


_RUN_KEYS = {"settings", "draft_model", "target_model", "prompt", "system", "info", "stats", "summary", "blocks", "rows"}


def _runs_from_json(data: dict, capped: bool) -> list[Trace]:
    _check_keys(data, {"format", "version", "runs"})
    version = data.get("version")
    if version not in (1, FORMAT_VERSION) or isinstance(version, bool):
        raise SchemaError("version", f"{version!r} is not 1 or {FORMAT_VERSION}, the versions this easd reads")
    runs = _list(data, "runs", MAX_RUNS)
    rows = [run["rows"] for run in runs if isinstance(run, dict) and isinstance(run.get("rows"), list)]
    cells = sum(len(row) for run_rows in rows for row in run_rows if isinstance(row, dict))
    if capped and cells > MAX_CELLS:
        raise SchemaError("runs", f"the rows hold {cells:,} fields, more than the {MAX_CELLS:,} a trace may have")
    traces, known = [], _Known.now()
    for i, run in enumerate(runs):
        try:
            traces.append(_run_from_json(run, version, known))
        except SchemaError as err:
            raise SchemaError(f"runs[{i}].{err.where}" if err.where else f"runs[{i}]", err.message) from None
    return traces


def _run_from_json(run, version: int, known: _Known) -> Trace:
    if not isinstance(run, dict):
        raise SchemaError("", "must be an object")
    _check_keys(run, _RUN_KEYS)
    if "settings" not in run or "rows" not in run:
        raise SchemaError("", "a run needs settings and rows")
    trace = Trace(settings=_nested(_settings, _object(run, "settings"), "settings"))
    for name, spec in (
        ("draft_model", schema.NAME),
        ("target_model", schema.NAME),
        ("prompt", schema.PROMPT),
        ("system", schema.PROMPT),
    ):
        if run.get(name) is not None:
            schema.check_value(name, run[name], spec)
            setattr(trace, name, run[name])
    trace.info = _nested(_info, _object(run, "info"), "info")
    stats = _object(run, "stats")
    _nested(schema.check_fields, stats, "stats", schema.STATS_FIELDS)
    trace.stats = RunStats(**stats)
    _object(run, "summary")  # recomputed from the rows, so only its type matters
    for j, block in enumerate(_list(run, "blocks", MAX_ROWS)):
        trace.blocks.append(_nested(_block, block, f"blocks[{j}]", trace.settings, version))
    for j, row in enumerate(_list(run, "rows", MAX_ROWS)):
        _nested(_json_row, row, f"rows[{j}]", trace, known)
    return trace


def _nested(check, value, where: str, *args):
    """check(value, *args), with any SchemaError located under `where`."""
    try:
        return check(value, *args)
    except SchemaError as err:
        raise SchemaError(f"{where}.{err.where}" if err.where else where, err.message) from None


def _json_row(row, trace: Trace, known: _Known) -> None:
    if not isinstance(row, dict):
        raise SchemaError("", "must be an object")
    for name, value in row.items():
        spec = known.row_field(name)
        if spec is None:
            raise SchemaError(name, "not a field of the trace format")
        if value is not None:
            schema.check_value(name, value, spec)
    _append_record(trace, row, schema.candidate_count(row))


def _block(block, settings: DecodeSettings, version: int) -> BlockInfo:
    if not isinstance(block, dict) or set(block) != {"index", "drafted", "end"}:
        raise SchemaError("", "must be an object with index, drafted and end")
    schema.check_value("index", block["index"], schema.INDEX)
    schema.check_block_drafts(block["drafted"], settings.k)
    end = VERSION_1_ENDS.get(block["end"], block["end"]) if version == 1 and isinstance(block["end"], str) else block["end"]
    ends = tuple(o.name for o in methods.lookup(settings.method).origins if o.ends_block)  # a block ends with one of these
    schema.check_value("end", end, schema.Field("text", choices=ends))
    return BlockInfo(block["index"], [tuple(d) for d in block["drafted"]], end)


def _info(info: dict) -> dict:
    """Versions and revisions: text keys, and values that are text, numbers, booleans or null."""
    for key, value in info.items():
        schema.check_value(key, key, schema.NAME)
        if isinstance(value, str):
            schema.check_value(key, value, schema.NAME)
        elif not (value is None or isinstance(value, bool) or isinstance(value, (int, float))):
            raise SchemaError(key, "must be text, a number, true, false or null")
    return info


def _object(parent: dict, key: str) -> dict:
    value = parent.get(key, {})
    if not isinstance(value, dict):
        raise SchemaError(key, "must be an object")
    return value


def _list(parent: dict, key: str, limit: int) -> list:
    value = parent.get(key, [])
    if not isinstance(value, list):
        raise SchemaError(key, "must be a list")
    if len(value) > limit:
        raise SchemaError(key, f"holds {len(value):,} items, more than the {limit:,} a trace may have")
    return value


def _check_keys(values: dict, known: set) -> None:
    unknown = [key for key in values if key not in known]
    if unknown:
        raise SchemaError(unknown[0], "not a field of the trace format")


# --- files --------------------------------------------------------------------------------------


def load(path: str | Path) -> list[Trace]:
    """Load a .csv or .json trace file, refusing anything too big, of another kind, or off the schema.

    Messages name the file by its base name only: a server's paths are none of the browser's business.
    """
    path = Path(path)
    if not path.is_file():
        raise EasdError(f"{path.name}: no such file")
    size = path.stat().st_size
    if size > MAX_TRACE_BYTES:
        raise EasdError(
            f"{path.name}: {size:,} bytes is larger than the {MAX_TRACE_BYTES:,} bytes ({MAX_TRACE_BYTES // 2**20} MiB) a trace may be"
        )
    readers = {".csv": read_csv, ".json": read_json}
    if path.suffix.lower() not in readers:
        raise EasdError(f"{path.name}: a trace file ends in .csv or .json")
    return readers[path.suffix.lower()](path)


def save(traces: list[Trace], path: str | Path) -> None:
    """Write traces as CSV or JSON, chosen by the file's suffix."""
    writers = {".csv": write_csv, ".json": write_json}
    suffix = Path(path).suffix.lower()
    if suffix not in writers:
        raise EasdError(f"{Path(path).name}: a trace file ends in .csv or .json")
    writers[suffix](traces, path)
