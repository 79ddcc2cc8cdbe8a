"""The trace: one typed record per emitted token, with CSV and JSON export and import.

The column names are those of the README's "The trace" section and are stable: the app, the CLI and the evaluation read and
write them. Values that do not exist for a row (draft fields of a bonus token, every draft field
of a target-only run) are None in memory and empty in CSV. A CSV or JSON file may hold several
runs (the app exports SD and EASD together); runs in a CSV start where `position` is 0.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import pandas as pd

from ..errors import EasdError
from .settings import DecodeSettings

ORIGINS = ("draft_accepted", "target_resample", "easd_penalty", "bonus", "target", "draft")
FORMAT = "easd-trace"
FORMAT_VERSION = 1

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


@dataclass
class BlockInfo:
    """One SD/EASD block as drafted: the rows show drafts up to the first refusal, this shows all k."""

    index: int
    drafted: list[tuple[int, str]]  # (id, text) of c_1..c_k
    end: str  # rejected | penalty | bonus


@dataclass
class RunStats:
    prompt_tokens: int | None = None
    seconds: float | None = None  # wall time of the whole run, prefill included
    target_calls: int | None = None  # target forward passes
    draft_calls: int | None = None  # draft forward passes
    stop_reason: str | None = None  # eos | max_new_tokens | context | stopped


@dataclass
class Trace:
    settings: DecodeSettings
    draft_model: str = ""
    target_model: str = ""
    records: list[TokenRecord] = field(default_factory=list)
    prompt: str = ""
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


def software_versions() -> dict:
    """Versions that shape a trace's numbers, for its JSON header."""
    import torch
    import transformers

    from .._version import __version__

    return {"easd": __version__, "torch": torch.__version__, "transformers": transformers.__version__}


# --- summary metrics ----------------------------------------------------------------------------


def summarize(trace: Trace) -> dict:
    """The summary metrics of the README's "The trace" section. Acceptance counts only drafted tokens that were kept."""
    records, stats = trace.records, trace.stats
    examined = [r for r in records if r.draft_token_id is not None]
    accepted = sum(r.origin == "draft_accepted" for r in records)
    penalized = [r.position for r in records if r.origin == "easd_penalty"]
    blocks = {r.block for r in records}
    seconds = stats.seconds
    return {
        "new_tokens": len(records),
        "seconds": seconds,
        "tokens_per_s": len(records) / seconds if seconds else None,
        "target_calls": stats.target_calls,
        "draft_calls": stats.draft_calls,
        "examined": len(examined),
        "accepted": accepted,
        "blocks": len(blocks),
        "acceptance_rate": accepted / len(examined) if examined else None,
        "mean_accepted_length": accepted / len(blocks) if blocks and examined else None,
        "penalized": len(penalized),
        "penalized_rate": len(penalized) / len(records) if records else None,
        "first_penalty_position": penalized[0] if penalized else None,
        "stop_reason": stats.stop_reason,
    }


# --- flat rows (CSV columns) --------------------------------------------------------------------

_RECORD_SCALARS = [f.name for f in fields(TokenRecord) if f.name not in ("draft_top", "target_top")]
_SETTING_COLUMNS = ["tau_h", "tau_o", "top_n", "k", "temperature", "top_p", "seed"]
_INT_COLUMNS = {"position", "block", "token_id", "draft_token_id", "top_n", "k", "seed"}
_FLOAT_COLUMNS = {"p_draft", "p_target", "accept_prob", "h_draft", "h_target", "overlap"}
_FLOAT_COLUMNS |= {"tau_h", "tau_o", "temperature", "top_p"}


def columns(top: int) -> list[str]:
    """CSV column names for traces keeping `top` candidates per token, in the README's order."""
    tops = [f"{side}_top{j}_{part}" for j in range(1, top + 1) for side in ("draft", "target") for part in ("id", "text", "prob")]
    return ["method", "rule", *_RECORD_SCALARS, *tops, *_SETTING_COLUMNS, "draft_model", "target_model"]


def to_rows(trace: Trace) -> list[dict]:
    """One flat dict per token, keyed by the CSV columns."""
    run = {"method": trace.settings.method, "rule": trace.settings.rule}
    run_settings = {name: getattr(trace.settings, name) for name in _SETTING_COLUMNS}
    models = {"draft_model": trace.draft_model, "target_model": trace.target_model}
    return [{**run, **_flatten(record), **run_settings, **models} for record in trace.records]


def _flatten(record: TokenRecord) -> dict:
    row = {name: getattr(record, name) for name in _RECORD_SCALARS}
    for side in ("draft", "target"):
        for j, (token_id, text, prob) in enumerate(getattr(record, f"{side}_top"), start=1):
            row.update({f"{side}_top{j}_id": token_id, f"{side}_top{j}_text": text, f"{side}_top{j}_prob": prob})
    return row


def to_frame(traces: list[Trace]) -> pd.DataFrame:
    """All rows of all runs in one DataFrame (object columns, so ints and None survive)."""
    top = max((t.settings.trace_top for t in traces), default=5)
    rows = [row for trace in traces for row in to_rows(trace)]
    return pd.DataFrame(rows, columns=columns(top), dtype=object)


def _record_from_row(row: dict) -> TokenRecord:
    scalars = {name: row.get(name) for name in _RECORD_SCALARS}
    tops = {f"{side}_top": _candidates(row, side) for side in ("draft", "target")}
    return TokenRecord(**scalars, **tops)


def _candidates(row: dict, side: str) -> list[Candidate]:
    found, j = [], 1
    while row.get(f"{side}_top{j}_id") is not None:
        found.append((row[f"{side}_top{j}_id"], row[f"{side}_top{j}_text"] or "", row[f"{side}_top{j}_prob"]))
        j += 1
    return found


def from_rows(rows: list[dict]) -> list[Trace]:
    """Rebuild runs from flat rows; a new run starts wherever `position` is 0."""
    traces: list[Trace] = []
    for row in rows:
        if row["position"] == 0 or not traces:
            traces.append(_trace_header_from_row(row))
        traces[-1].records.append(_record_from_row(row))
    return traces


def _trace_header_from_row(row: dict) -> Trace:
    settings = DecodeSettings.from_dict(row)
    kept = max(len(_candidates(row, "draft")), len(_candidates(row, "target")))
    if kept > settings.trace_top:  # the run kept more candidates than the default: remember how many
        settings = replace(settings, record_top=kept)
    return Trace(settings=settings, draft_model=row.get("draft_model") or "", target_model=row.get("target_model") or "")


# --- CSV ------------------------------------------------------------------------------------------


def write_csv(traces: list[Trace], path: str | Path) -> None:
    """CRLF line ends (RFC 4180), so a bare carriage return inside token text gets quoted too."""
    to_frame(traces).to_csv(path, index=False, lineterminator="\r\n")


def read_csv(path: str | Path) -> list[Trace]:
    """Read a trace CSV exactly: every cell as text first, so tokens like "nan" or "1e5" stay text."""
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, UnicodeDecodeError, pd.errors.EmptyDataError) as err:
        raise EasdError(f"{path}: not a readable trace CSV ({err})") from None
    _check_columns(set(frame.columns), path)
    rows = [_typed_row(row) for row in frame.to_dict(orient="records")]
    return from_rows(rows)


def _check_columns(present: set[str], path) -> None:
    missing = [name for name in columns(0) if name not in present]
    if missing:
        raise EasdError(f"{path}: not an EASD trace; missing columns: {', '.join(missing[:6])}")


def _typed_row(row: dict) -> dict:
    typed = {key: _parse_cell(key, cell) for key, cell in row.items()}
    for key in typed:  # text exists exactly when its id does: "" with an id is an empty token
        if key.endswith("_text") and key != "token_text" and typed.get(key[: -len("text")] + "id") is None:
            typed[key] = None
    return typed


def _parse_cell(key: str, cell: str):
    kind = _column_kind(key)
    if kind == "text":
        return cell
    if cell == "":
        return None
    try:
        return {"int": int, "float": float, "bool": _parse_bool}[kind](cell)
    except (ValueError, KeyError):
        raise EasdError(f"trace column {key!r} holds {cell!r}, which is not a valid {kind}") from None


def _column_kind(key: str) -> str:
    if key in _INT_COLUMNS or (key.startswith(("draft_top", "target_top")) and key.endswith("_id")):
        return "int"
    if key in _FLOAT_COLUMNS or key.endswith("_prob"):
        return "float"
    return "bool" if key == "triggered" else "text"


def _parse_bool(cell: str) -> bool:
    return {"True": True, "False": False}[cell]


# --- JSON -----------------------------------------------------------------------------------------


def to_json_dict(traces: list[Trace]) -> dict:
    return {"format": FORMAT, "version": FORMAT_VERSION, "runs": [_run_to_json(t) for t in traces]}


def _run_to_json(trace: Trace) -> dict:
    return {
        "settings": trace.settings.as_dict(),
        "draft_model": trace.draft_model,
        "target_model": trace.target_model,
        "prompt": trace.prompt,
        "info": trace.info,
        "stats": asdict(trace.stats),
        "summary": trace.summary(),
        "blocks": [asdict(b) for b in trace.blocks],
        "rows": [_flatten(r) for r in trace.records],
    }


def write_json(traces: list[Trace], path: str | Path) -> None:
    Path(path).write_text(json.dumps(to_json_dict(traces), ensure_ascii=False, indent=1), encoding="utf-8")


def read_json(path: str | Path) -> list[Trace]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise EasdError(f"{path}: not a readable trace JSON ({err})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise EasdError(f'{path}: not an EASD trace (expected "format": "{FORMAT}")')
    return [_run_from_json(run, path) for run in data.get("runs", [])]


def _run_from_json(run: dict, path) -> Trace:
    try:
        return Trace(
            settings=DecodeSettings.from_dict(run["settings"]),
            draft_model=run.get("draft_model", ""),
            target_model=run.get("target_model", ""),
            records=[_record_from_row(row) for row in run["rows"]],
            prompt=run.get("prompt", ""),
            stats=RunStats(**run.get("stats", {})),
            info=run.get("info", {}),
            blocks=[BlockInfo(b["index"], [tuple(d) for d in b["drafted"]], b["end"]) for b in run.get("blocks", [])],
        )
    except (KeyError, TypeError, ValueError) as err:
        raise EasdError(f"{path}: malformed trace run ({err!r})") from None


# --- files --------------------------------------------------------------------------------------

MAX_TRACE_BYTES = 50 * 2**20  # a 4,000-token run with 20 candidates is about 5 MB of CSV


def load(path: str | Path) -> list[Trace]:
    """Load a .csv or .json trace file, refusing anything too big or of another kind."""
    path = Path(path)
    if not path.is_file():
        raise EasdError(f"{path}: no such file")
    if path.stat().st_size > MAX_TRACE_BYTES:
        raise EasdError(
            f"{path}: {path.stat().st_size / 2**20:.0f} MB is larger than the {MAX_TRACE_BYTES // 2**20} MB a trace may be"
        )
    readers = {".csv": read_csv, ".json": read_json}
    if path.suffix.lower() not in readers:
        raise EasdError(f"{path}: a trace file ends in .csv or .json")
    return readers[path.suffix.lower()](path)


def save(traces: list[Trace], path: str | Path) -> None:
    """Write traces as CSV or JSON, chosen by the file's suffix."""
    writers = {".csv": write_csv, ".json": write_json}
    suffix = Path(path).suffix.lower()
    if suffix not in writers:
        raise EasdError(f"{path}: a trace file ends in .csv or .json")
    writers[suffix](traces, path)
