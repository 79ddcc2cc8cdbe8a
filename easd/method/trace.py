"""The trace: one typed record per emitted token, with CSV and JSON export and import.

The column names are those of the README's "The trace" section and are stable: the app, the CLI and the evaluation read and
write them. Values that do not exist for a row (draft fields of a bonus token, every draft field
of a target-only run) are None in memory and empty in CSV. A CSV or JSON file may hold several
runs (the app exports SD and EASD together); runs in a CSV start where `position` is 0.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from ..errors import EasdError, SettingsError
from . import trace_schema as schema
from .acceptance import Margins
from .methods import METHODS
from .settings import DecodeSettings
from .spec_metrics import SpecMetrics
from .trace_schema import MAX_CELLS, MAX_ROWS, MAX_RUNS, MAX_TRACE_BYTES, SchemaError
from .trace_schema import ORIGINS as ORIGINS  # re-exported: easd.method.trace.ORIGINS


def intervened(origin: str, method: str) -> bool:
    """Whether a token is an intervention of its run's method (easd.method.methods: EASD's penalty, MTI's guided token,
    a token of a step RSD's target wrote again after the PRM refused the draft's)."""
    return origin in METHODS[method].intervention_origins


FORMAT = "easd-trace"
DELTA_FORMAT = "easd-trace-update"  # a streamed run's new rows (see to_json_delta)
FORMAT_VERSION = 2
# Version 1 named a block's end in words of its own; version 2 names it by the origin of its last token.
# A version-1 file reads with its block ends renamed, and is otherwise the same.
VERSION_1_ENDS = {"rejected": "target_resample", "penalty": "easd_penalty", "bonus": "bonus"}

Candidate = tuple[int, str, float]  # (token id, token text, probability at temperature 1)


@dataclass
class TokenRecord:
    position: int  # 0-based among generated tokens
    block: int  # the SD round (or single-model step) the token came from
    token_id: int
    token_text: str
    origin: str  # one of ORIGINS
    draft_token_id: int | None = None  # c_i, the drafted token examined at this position
    draft_token_text: str | None = None
    p_draft: float | None = None  # q(c_i) at temperature 1
    p_target: float | None = None  # p(c_i) at temperature 1
    accept_prob: float | None = None  # min(1, p̃(c_i)/q̃(c_i)) used by the standard test
    h_draft: float | None = None  # H(q) in nats
    h_target: float | None = None  # H(p) in nats
    overlap: float | None = None  # |top-n(q) ∩ top-n(p)| / n
    triggered: bool | None = None  # the EASD rule fired here (recorded in SD runs too)
    draft_top: list[Candidate] = field(default_factory=list)
    target_top: list[Candidate] = field(default_factory=list)
    # How far that decision was from flipping (docs/method.md, "Fragile decisions"); None where a file lacks them;
    # last, so that positional construction of the fields above still works
    h_draft_margin: float | None = None  # h_draft − τ_H
    h_target_margin: float | None = None  # h_target − τ_H
    draft_gap: float | None = None  # the draft's n-th minus (n+1)-th logit
    target_gap: float | None = None  # the target's n-th minus (n+1)-th logit
    overlap_swap: bool | None = None  # swapping either model's n-th and (n+1)-th candidates changes the overlap
    h_draft_tol: float | None = None  # how far h_draft can move when the logits move by one rounding step
    h_target_tol: float | None = None
    overlap_low: float | None = None  # the lowest overlap (/ n) swaps within rounding can reach
    overlap_high: float | None = None  # the highest
    fragile: bool | None = None  # a perturbation at the models' precision could flip the decision
    guided_top: list[Candidate] = field(default_factory=list)  # MTI's guided p̃ where it guided (target_top: without)
    rsd_step: int | None = None  # RSD: the step the token belongs to (0, 1, …)
    rsd_reward: float | None = None  # RSD: the PRM's reward for the draft's version of that step (kept if ≥ δ)


@dataclass
class BlockInfo:
    """One SD/EASD block as drafted: the rows show drafts up to the first refusal, this shows all k."""

    index: int
    drafted: list[tuple[int, str]]  # (id, text) of c_1..c_k
    end: str  # one of trace_schema.BLOCK_ENDS: the origin of the token that ended the block


@dataclass
class RunStats:
    prompt_tokens: int | None = None
    seconds: float | None = None  # wall time of the whole run, prefill included
    target_calls: int | None = None  # target forward passes
    draft_calls: int | None = None  # draft forward passes
    # wall time of the passes it took part in (with other rows of its batch): what SD's speed is made of (easd.method.speed)
    target_seconds: float | None = None
    draft_seconds: float | None = None
    # rows those passes served, summed (÷ calls: the batch it ran in), so that their time is read against a target
    # pass over as many rows (easd.method.speed.PassCost); None in traces from before they were counted
    target_rows: int | None = None
    draft_rows: int | None = None
    stop_reason: str | None = None  # one of trace_schema.STOP_REASONS ("stopped" while it goes on)


@dataclass
class Trace:
    settings: DecodeSettings
    draft_model: str = ""
    target_model: str = ""
    records: list[TokenRecord] = field(default_factory=list)
    prompt: str = ""
    system: str = ""  # the system prompt the prompt was asked under ("" for none)
    stats: RunStats = field(default_factory=RunStats)
    info: dict = field(default_factory=dict)  # versions and model revisions
    blocks: list[BlockInfo] = field(default_factory=list)  # JSON only: CSV rows cannot hold it

    @property
    def token_ids(self) -> list[int]:
        return [r.token_id for r in self.records]

    @property
    def text(self) -> str:
        return "".join(r.token_text for r in self.records)

    def summary(self) -> dict:
        return summarize(self)

    def snapshot(self) -> Trace:
        """A copy that later tokens do not change: records and blocks are shared, their lists are not.

        The shared worker (easd.serving.worker) takes one for a user after each block, in its own
        thread, so the user's thread never reads a trace while the worker appends to it.
        """
        return replace(self, records=list(self.records), blocks=list(self.blocks), stats=replace(self.stats))


def software_versions() -> dict:
    """Versions that shape a trace's numbers, for its JSON header."""
    import torch
    import transformers

    from .._version import __version__

    return {"easd": __version__, "torch": torch.__version__, "transformers": transformers.__version__}


# --- summary metrics ----------------------------------------------------------------------------


def summarize(trace: Trace) -> dict:
    """The summary metrics (docs/app-and-api.md, "Trace files"). Speculative decoding's own figures (mean acceptance
    length, draft acceptance rate, conditional acceptance by position, the acceptance-length histogram) come from
    easd.method.spec_metrics, under vLLM's names.

    `examined` counts the drafted tokens the standard test looked at, `accepted` those it kept.
    """
    records, stats = trace.records, trace.stats
    spec = SpecMetrics.of([trace])  # counts the drafts once: what the standard test examined and what it kept
    examined, accepted = sum(spec.reached_per_position), spec.num_accepted_tokens
    penalized = [r.position for r in records if r.origin == "easd_penalty"]
    interventions = sum(intervened(r.origin, trace.settings.method) for r in records)
    fired = sum(bool(r.triggered) for r in records if r.draft_token_id is not None)
    fragile = sum(bool(r.fragile) for r in records if r.draft_token_id is not None)
    fragile_penalties = sum(bool(r.fragile) for r in records if r.origin == "easd_penalty")
    blocks = len({r.block for r in records})
    seconds = stats.seconds
    return {
        "new_tokens": len(records),
        "accepted": accepted,
        "examined": examined,
        "blocks": blocks,
        "seconds": seconds,
        "tokens_per_s": len(records) / seconds if seconds else None,
        "target_calls": stats.target_calls,
        "draft_calls": stats.draft_calls,
        **spec.summary(),
        "penalized": len(penalized),
        "penalized_rate": len(penalized) / len(records) if records else None,
        "interventions": interventions,  # tokens a method chose on purpose (`intervened`)
        "first_penalty_position": penalized[0] if penalized else None,
        "fired": fired,  # drafted positions where the rule fired (in SD runs too)
        "fragile": fragile,  # drafted positions whose decision (fired or not) could flip by rounding
        "fragile_penalties": fragile_penalties,
        "stop_reason": stats.stop_reason,
    }


# --- flat rows (CSV columns) --------------------------------------------------------------------

_TOP_LISTS = [f"{side}_top" for side in schema.SIDES]
_RECORD_SCALARS = [f.name for f in fields(TokenRecord) if f.name not in _TOP_LISTS]
_MTI_COLUMNS = ["mti_tau", "mti_omega", "mti_negative"]
_RSD_COLUMNS = ["rsd_delta", "rsd_delimiter"]
_SETTING_COLUMNS = ["tau_h", "tau_o", "top_n", "k", "temperature", "top_p", "seed", "signals", *_MTI_COLUMNS, *_RSD_COLUMNS]
MARGIN_COLUMNS = [f.name for f in fields(Margins)]  # the margin columns are the fields of acceptance.Margins
# Columns added after files were first written: a file without them still reads (they are empty, settings their defaults)
OPTIONAL_COLUMNS = (*MARGIN_COLUMNS, "signals", *_MTI_COLUMNS, *_RSD_COLUMNS, "rsd_step", "rsd_reward")
OPTIONAL_SIDES = ("guided",)  # candidate lists added later: a file may lack their columns
_RUN_COLUMNS = ["method", "rule", *_SETTING_COLUMNS, "draft_model", "target_model"]  # the same on every row of a run


def columns(top: int) -> list[str]:
    """CSV column names for traces keeping `top` candidates per token, in the README's order."""
    tops = [f"{side}_top{j}_{part}" for j in range(1, top + 1) for side in schema.SIDES for part in ("id", "text", "prob")]
    decisions = [name for name in _RECORD_SCALARS if name not in MARGIN_COLUMNS]
    return ["method", "rule", *decisions, *tops, *MARGIN_COLUMNS, *_SETTING_COLUMNS, "draft_model", "target_model"]


def to_rows(trace: Trace) -> list[dict]:
    """One flat dict per token, keyed by the CSV columns."""
    run = {"method": trace.settings.method, "rule": trace.settings.rule}
    run_settings = {name: getattr(trace.settings, name) for name in _SETTING_COLUMNS}
    models = {"draft_model": trace.draft_model, "target_model": trace.target_model}
    return [{**run, **_flatten(record), **run_settings, **models} for record in trace.records]


def _flatten(record: TokenRecord) -> dict:
    row = {name: getattr(record, name) for name in _RECORD_SCALARS}
    for side in schema.SIDES:
        for j, (token_id, text, prob) in enumerate(getattr(record, f"{side}_top"), start=1):
            row.update({f"{side}_top{j}_id": token_id, f"{side}_top{j}_text": text, f"{side}_top{j}_prob": prob})
    return row


def _record_from_row(row: dict) -> TokenRecord:
    scalars = {name: row.get(name) for name in _RECORD_SCALARS}
    tops = {f"{side}_top": _candidates(row, side) for side in schema.SIDES}
    return TokenRecord(**scalars, **tops)


def _candidates(row: dict, side: str) -> list[Candidate]:
    found = []
    for id_name, text_name, prob_name in schema.CANDIDATE_NAMES[side]:
        if row.get(id_name) is None:
            return found
        found.append((row[id_name], row[text_name], row[prob_name]))
    return found


# --- reading: every row checked against the schema (trace_schema.py) -----------------------------


def _settings(values: dict) -> DecodeSettings:
    """Settings from a file pass the same validate() as a run's: a file cannot ask for top_n = 200000."""
    schema.check_fields(values, schema.SETTINGS_FIELDS)
    typed = {
        name: float(v) if schema.SETTINGS_FIELDS[name].kind == "float" and v is not None else v for name, v in values.items()
    }
    try:
        return DecodeSettings(**typed).validate()
    except SettingsError as err:  # "--top-n: must be …" names the flag; a file names the field
        raise SchemaError(err.flag.removeprefix("--").replace("-", "_"), str(err).removeprefix(f"{err.flag}: ")) from None


def _append_record(trace: Trace, row: dict, top: int) -> None:
    """Check a typed row (`top` candidates per side at most) against the schema and its run, then add it."""
    schema.check_row(row, trace.settings.method, top)
    if row["position"] != len(trace.records):
        raise SchemaError(
            "position", f"is {row['position']}, but this is token {len(trace.records)} of its run (positions count from 0)"
        )
    if trace.records and row["block"] < trace.records[-1].block:
        raise SchemaError("block", f"is {row['block']}, but the token before is in block {trace.records[-1].block}")
    record = _record_from_row(row)
    trace.records.append(record)
    kept = max(len(getattr(record, name)) for name in _TOP_LISTS)
    if kept > trace.settings.trace_top:  # the run kept more candidates than its settings say: remember how many
        trace.settings = replace(trace.settings, record_top=kept)


# --- CSV ------------------------------------------------------------------------------------------

# (id, text) columns whose text is None, not "", when the id is empty
_OPTIONAL_TEXTS = [("draft_token_id", "draft_token_text")]
_OPTIONAL_TEXTS += [(i, t) for side in schema.CANDIDATE_NAMES.values() for i, t, _ in side]

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
    names = columns(max((t.settings.trace_top for t in traces), default=5))
    is_text = [_csv_field(name).kind == "text" for name in names]
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


def _csv_field(name: str) -> schema.Field | None:
    return (
        schema.ROW_FIELDS.get(name)
        or schema.SETTINGS_FIELDS.get(name)
        or schema.MODEL_FIELDS.get(name)
        or schema.candidate_field(name)
    )


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
    header = _check_header(names)
    top = schema.candidate_count(names)
    traces: list[Trace] = []
    first: dict = {}  # the run columns of the current run's first row
    for number, line in enumerate(lines, start=2):  # numbered as a spreadsheet does: the header is row 1
        if not line:
            continue  # a blank line
        if (number - 1) * len(header) > MAX_CELLS:
            raise SchemaError(f"row {number}", f"the file holds more than the {MAX_CELLS:,} cells a trace may have")
        try:
            row = _csv_row(header, line)
            if row["position"] == 0:  # a new run starts here
                if len(traces) == MAX_RUNS:
                    raise SchemaError("", f"a file may hold at most {MAX_RUNS} runs")
                first = {name: row.get(name) for name in _RUN_COLUMNS}
                traces.append(_csv_run(first))
            elif not traces:
                raise SchemaError("position", "the first row must start a run, with position 0")
            _check_same_run(row, first)
            _append_record(traces[-1], row, top)
        except SchemaError as err:
            raise SchemaError(f"row {number}, column {err.where}" if err.where else f"row {number}", err.message) from None
    return traces


def _check_header(header: list[str]) -> list[tuple[str, schema.Field]]:
    top = schema.candidate_count(header)
    if top > schema.MAX_CANDIDATES:
        raise SchemaError("header", f"{top} candidates per token is more than the {schema.MAX_CANDIDATES} a trace may hold")
    missing = [
        name
        for name in columns(top)
        if name not in header and name not in OPTIONAL_COLUMNS and not name.startswith(tuple(f"{s}_top" for s in OPTIONAL_SIDES))
    ]
    if missing:
        raise SchemaError("header", f"not an EASD trace; missing columns: {', '.join(missing[:6])}")
    if len(header) != len(set(header)):
        raise SchemaError("header", f"column {next(n for n in header if header.count(n) > 1)!r} appears twice")
    unknown = [name for name in header if _csv_field(name) is None or name in ("max_new_tokens", "record_top")]
    if unknown:
        raise SchemaError("header", f"{unknown[0]!r} is not a column of the trace format")
    return [(name, _csv_field(name)) for name in header]


def _csv_row(header: list[tuple[str, schema.Field]], line: list[str]) -> dict:
    """A line's cells as typed values, each checked against its column's Field."""
    if len(line) != len(header):
        raise SchemaError("", f"has {len(line)} cells, but the header has {len(header)} columns")
    row = {}
    for (name, spec), cell in zip(header, line):
        try:
            row[name] = spec.from_cell(_unprotect(cell) if spec.kind == "text" else cell)
        except ValueError as err:
            raise SchemaError(name, str(err)) from None
    for id_name, text_name in _OPTIONAL_TEXTS:  # text exists exactly when its id does: "" with an id is an empty token
        if row.get(text_name) == "" and row.get(id_name) is None:
            row[text_name] = None
    return row


def _csv_run(first: dict) -> Trace:
    given = {name: first[name] for name in ("method", "rule", *_SETTING_COLUMNS)}
    settings = _settings({name: value for name, value in given.items() if value is not None})
    return Trace(settings=settings, draft_model=first["draft_model"], target_model=first["target_model"])


def _check_same_run(row: dict, first: dict) -> None:
    for name in _RUN_COLUMNS:
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
                "rows": [{name: getattr(r, name) for name in _RECORD_SCALARS} for r in trace.records[rows:]],
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
        "settings": trace.settings.as_dict(),
        "draft_model": trace.draft_model,
        "target_model": trace.target_model,
        "prompt": trace.prompt,
        "system": trace.system,
        "info": trace.info,
        "stats": asdict(trace.stats),
        "summary": trace.summary(),
        "blocks": [_block_to_json(b) for b in trace.blocks],
        "rows": [_flatten(r) for r in trace.records],
    }


def write_json(traces: list[Trace], path: str | Path) -> None:
    Path(path).write_text(json.dumps(to_json_dict(traces), ensure_ascii=False, indent=1), encoding="utf-8")


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
_JSON_ROW_FIELDS = {name: schema.ROW_FIELDS[name] for name in _RECORD_SCALARS}
_JSON_ROW_FIELDS |= {
    name: schema.candidate_field(name) for side in schema.CANDIDATE_NAMES.values() for names in side for name in names
}


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
    traces = []
    for i, run in enumerate(runs):
        try:
            traces.append(_run_from_json(run, version))
        except SchemaError as err:
            raise SchemaError(f"runs[{i}].{err.where}" if err.where else f"runs[{i}]", err.message) from None
    return traces


def _run_from_json(run, version: int) -> Trace:
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
        trace.blocks.append(_nested(_block, block, f"blocks[{j}]", trace.settings.k, version))
    for j, row in enumerate(_list(run, "rows", MAX_ROWS)):
        _nested(_json_row, row, f"rows[{j}]", trace)
    return trace


def _nested(check, value, where: str, *args):
    """check(value, *args), with any SchemaError located under `where`."""
    try:
        return check(value, *args)
    except SchemaError as err:
        raise SchemaError(f"{where}.{err.where}" if err.where else where, err.message) from None


def _json_row(row, trace: Trace) -> None:
    if not isinstance(row, dict):
        raise SchemaError("", "must be an object")
    for name, value in row.items():
        spec = _JSON_ROW_FIELDS.get(name)
        if spec is None:
            raise SchemaError(name, "not a field of the trace format")
        if value is not None:
            schema.check_value(name, value, spec)
    _append_record(trace, row, schema.candidate_count(row))


def _block(block, k: int, version: int) -> BlockInfo:
    if not isinstance(block, dict) or set(block) != {"index", "drafted", "end"}:
        raise SchemaError("", "must be an object with index, drafted and end")
    schema.check_value("index", block["index"], schema.INDEX)
    schema.check_block_drafts(block["drafted"], k)
    end = VERSION_1_ENDS.get(block["end"], block["end"]) if version == 1 and isinstance(block["end"], str) else block["end"]
    schema.check_value("end", end, schema.Field("text", choices=schema.BLOCK_ENDS))
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
