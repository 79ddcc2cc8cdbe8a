"""results.csv, the one table every reader of an evaluation shares: its columns, its file, its folder.

`easd eval` and `sweep` append to it, `--resume` reads it back, the reports and the app's
Evaluation tab load it. Its column list lives here and nowhere else.
"""

from __future__ import annotations

import csv
import io
import json
import os
import platform
from pathlib import Path

import numpy as np
import pandas as pd

from ..._version import __version__
from ...errors import EasdError
from ...files import read_bytes, read_json, temporary_path, utf8_text, write_text_whole

RESULT_COLUMNS = [
    "problem_id",
    "method",
    "sample",
    "seed",
    "prediction",
    "extraction",
    "gold",
    "correct",
    "new_tokens",
    "seconds",
    "tokens_per_s",
    "num_drafts",
    "num_draft_tokens",
    "mean_acceptance_length",
    "draft_acceptance_rate",
    "accepted",
    "examined",
    "penalized",
    "interventions",
    "fragile_penalties",
    "first_penalty_position",
    "target_calls",
    "draft_calls",
    "stop_reason",
    "saved_seconds",
    "tau_h",
    "tau_o",
    "text",
]
# What must match for --resume to add to an output folder (methods and --limit may grow).
# `plan`: an evaluation's shard's (easd.lab.shards), absent from a whole evaluation's
RESUME_KEYS = ("pair", "data", "format", "shuffle", "prompt_style", "grader", "samples", "settings", "plan")
UNSAID = {"prompt_style": "easd", "grader": "math-verify"}  # what a folder made before a key existed was run with


TEXT_COLUMNS = {"problem_id", "method", "prediction", "extraction", "gold", "correct", "stop_reason", "text"}
NUMERIC = [column for column in RESULT_COLUMNS if column not in TEXT_COLUMNS]
# empty where they do not exist (no drafts, no penalty)
OPTIONAL = {"mean_acceptance_length", "draft_acceptance_rate", "first_penalty_position"}
# results.csv files written before these read as "unknown" (empty); their acceptance_rate column (accepted / examined)
# is left unread: the figures are vLLM's now (easd.method.spec_metrics)
ADDED_LATER = {"fragile_penalties", "interventions", "num_drafts", "num_draft_tokens", "mean_acceptance_length"}
ADDED_LATER |= {"draft_acceptance_rate"}


def load_results(path: str | Path) -> pd.DataFrame:
    """results.csv with types: text stays text (an answer "nan" is an answer), numbers become numbers.

    Anything else (no rows, a count that is not a number, a missing column) is one EasdError line
    naming the file, and the row and column, as a spreadsheet counts them (the header is row 1).
    """
    name = Path(path).name
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise EasdError(f"{name}: not a readable results CSV ({type(err).__name__})") from None
    missing = [column for column in RESULT_COLUMNS if column not in frame.columns and column not in ADDED_LATER]
    if missing:
        raise EasdError(f"{name}: not a results.csv of `easd eval`; missing columns: {', '.join(missing[:6])}")
    if frame.empty:
        raise EasdError(f"{name}: holds no results yet, only its header")
    return typed(frame, name)


def typed(frame: pd.DataFrame, name: str) -> pd.DataFrame:
    """results.csv's cells (text, as read) with their types, a column added later empty; a cell that is not what its
    column holds is one EasdError line, "{name}: row R, column C: …" (the header is row 1)."""
    for column in ADDED_LATER - set(frame.columns):
        frame[column] = ""
    for column in NUMERIC:
        frame[column] = _numbers(frame[column], column, name)
    _check_values(frame["correct"], {"True", "False"}, "correct", name)
    frame["correct"] = frame["correct"] == "True"
    return frame


def _numbers(cells: pd.Series, column: str, name: str) -> pd.Series:
    numbers = pd.to_numeric(cells, errors="coerce")
    bad = ~np.isfinite(numbers) & ~((cells == "") & (column in OPTIONAL | ADDED_LATER))
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise EasdError(f"{name}: row {row + 2}, column {column}: {cells.iloc[row]!r} is not a number")
    return numbers


def _check_values(cells: pd.Series, allowed: set[str], column: str, name: str) -> None:
    bad = ~cells.isin(allowed)
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise EasdError(f"{name}: row {row + 2}, column {column}: {cells.iloc[row]!r} is not one of {', '.join(sorted(allowed))}")


class ResultsFile:
    """results.csv, appended one problem at a time and fsynced, so a kill loses at most one problem."""

    def __init__(self, folder: Path):
        self.path = folder / "results.csv"

    def read(self) -> list[dict]:
        """Rows written so far. A last row a kill cut short is dropped and the file repaired, so that the next row
        starts on a line of its own and the cut row's problem runs again."""
        if not self.path.exists():
            return []
        text = self.path.read_bytes().decode("utf-8", errors="replace")  # a kill may cut a character in two
        lines, cut = _whole_lines(text, self.path)
        if not lines:  # killed before its header was whole: as if never begun
            self.path.unlink()
            return []
        if lines[0] != RESULT_COLUMNS:
            raise EasdError(f"{self.path} is not a results file of this version; choose another --out")
        rows = [dict(zip(RESULT_COLUMNS, line)) for line in lines[1:] if len(line) == len(RESULT_COLUMNS)]
        if cut or len(rows) != len(lines) - 1:
            self.rewrite(rows)
        return rows

    def append(self, rows: list[dict]) -> None:
        new = not self.path.exists()
        with self.path.open("a", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, RESULT_COLUMNS, lineterminator="\r\n")
            if new:
                writer.writeheader()
            writer.writerows(rows)
            handle.flush()
            os.fsync(handle.fileno())

    def rewrite(self, rows: list[dict]) -> None:
        """The file with these rows only, written aside and renamed into place."""
        partial = temporary_path(self.path)
        with partial.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, RESULT_COLUMNS, lineterminator="\r\n")
            writer.writeheader()
            writer.writerows(rows)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, self.path)


# a results.csv read whole, not resumed (a shard's, by `study merge`): 100,000 rows of 4,096-token answers are about 2 GB
MAX_RESULTS_BYTES = 2 * 2**30


def read_rows(path: Path, flag: str) -> tuple[list[dict], bool]:
    """Every row of a results.csv that is read as it is, never repaired (`ResultsFile.read` repairs what it resumes),
    and whether its last row was cut short (by a kill, or being written now). The file is read as a user's
    (easd.files.read_bytes: a regular file, of at most MAX_RESULTS_BYTES); text that is not UTF-8, a record that is not
    CSV or not of results.csv's columns, or a cell its column cannot hold (`typed`) is one EasdError line naming `flag`,
    the file and the row."""
    data = read_bytes(path, flag, MAX_RESULTS_BYTES)
    end = data.rfind(b"\n") + 1  # every row ends with a line break: after the last one, a row cut short
    lines, cut = _whole_lines(utf8_text(data[:end], path, flag), f"{flag}: {path}", fix="fix or remove that row")
    if not lines:
        return [], cut or end < len(data)
    if lines[0] != RESULT_COLUMNS:
        raise EasdError(f"{flag}: {path} is not a results.csv of this version: its first row is not results.csv's header")
    for number, line in enumerate(lines[1:], start=2):
        if len(line) != len(RESULT_COLUMNS):
            raise EasdError(
                f"{flag}: {path}: row {number} has {len(line)} fields where a row of results.csv has "
                f"{len(RESULT_COLUMNS)}: fix or remove that row"
            )
    rows = [dict(zip(RESULT_COLUMNS, line)) for line in lines[1:]]
    typed(pd.DataFrame(rows, columns=RESULT_COLUMNS), f"{flag}: {path}")
    return rows, cut or end < len(data)


def _whole_lines(text: str, name, fix: str = "choose another --out") -> tuple[list[list[str]], bool]:
    """The CSV records of `text` that were written whole, and whether a last one was cut. Every record ends with a
    line break outside quotes, so a kill's cut shows at the end: a last record with no line break after it, or the
    end of the file inside a quoted field (a cut in the text column, whose own line breaks are quoted). A record that is
    not CSV before the end is one EasdError line: "{name}: record N …; {fix}"."""
    handle = io.StringIO(text, newline="")
    lines = []
    try:
        for line in csv.reader(handle, strict=True):
            lines.append(line)
    except csv.Error as err:
        if handle.read():  # not at the end: a malformed record in the middle, not a cut
            raise EasdError(f"{name}: record {len(lines) + 1} is not valid CSV ({err}); {fix}") from None
        return lines, True  # the reader never gave the cut record
    if text.endswith("\n"):
        return lines, False
    return lines[:-1], bool(lines)


def _as_run(config: dict, key: str):
    """A run.json's value for `key` as the run had it: a key or a setting added since reads as what it was then (a
    folder made before `--entropy` existed ran at its default)."""
    value = config.get(key, UNSAID.get(key))
    if key == "settings" and isinstance(value, dict):
        from ...method.methods import settings_values
        from ...method.settings import DecodeSettings

        defaults = {k: v for k, v in settings_values(DecodeSettings()).items() if k not in ("method", "rule")}
        return defaults | value
    return value


# run.json holds the settings and, for a study, the ids of its grid's and timed problems: kilobytes
MAX_CONFIG_BYTES = 64 * 2**20


def read_config(out: Path, flag: str = "--out") -> dict | None:
    """The run.json of an output folder, None where there is none; one that is a pipe, a device or too large
    (easd.files.read_bytes), cut short, not JSON or without settings is one EasdError line that names it and says what
    to do (`unreadable`). `flag`: how the user named the folder (`unreadable`)."""
    path = out / "run.json"
    if not path.exists():
        return None
    data = read_bytes(path, flag, MAX_CONFIG_BYTES)
    try:
        config = read_json(data.decode("utf-8"), f"{flag}: {path}")
    except json.JSONDecodeError as err:
        raise unreadable(out, f"{err.msg} at line {err.lineno}, column {err.colno}", flag) from None
    except UnicodeDecodeError as err:
        raise unreadable(out, type(err).__name__, flag) from None
    check_config(out, config, ("settings",), flag)
    return config


def check_config(out: Path, config, needs: tuple[str, ...], flag: str = "--out") -> None:
    """`unreadable` unless run.json holds every one of `needs`, a key or a dotted path (study.tau_hs)."""
    for need in needs:
        value = config
        for key in need.split("."):
            if not isinstance(value, dict) or key not in value:
                raise unreadable(out, f"it has no {need}", flag)
            value = value[key]


def unreadable(out: Path, why: str, flag: str = "--out") -> EasdError:
    """run.json cut short or not ours. `flag`: how the user named the folder, --out (the command's own folder, which
    may be another) or the command that reads it (`study merge`, its shards)."""
    said, other = ("", "choose another --out, or, ") if flag == "--out" else (f"{flag}: ", "")
    return EasdError(
        f"{said}{out / 'run.json'}: cut short or not a run.json of this program ({why}); {other}where the folder holds "
        "results of this program, delete it and rerun the command that made them with --resume (they are kept)"
    )


def check_folder(out: Path, config: dict, resume: bool, keys: tuple[str, ...] = RESUME_KEYS) -> dict | None:
    """Refuse, in one line, to mix results in `out`: a study's folder for eval's or sweep's results or the other way
    round, results there without --resume, a resumed folder made with other `keys`. Returns its run.json, if any."""
    saved = read_config(out)
    if saved is not None and ("study" in saved) != ("study" in config):  # neither can continue the other's folder
        made = "by `study`" if "study" in saved else "by `eval` or `sweep`, not by `study`"
        raise EasdError(f"--out: {out} holds results made {made}; choose another --out")
    if (out / "results.csv").exists() and not resume:
        raise EasdError(f"--out: {out} already holds results; add --resume to continue them, or choose another folder")
    different = [key for key in keys if saved is not None and _as_run(saved, key) != _as_run(config, key)]
    if resume and different:
        raise EasdError(f"--resume: {out} was run with other {', '.join(different)}; choose another --out")
    return saved


def prepare_folder(out: Path, config: dict, resume: bool) -> ResultsFile:
    """Create or reopen the output folder (refusing to mix results: `check_folder`) and write its run.json."""
    check_folder(out, config, resume)
    write_text_whole(out / "run.json", json.dumps(config, indent=1, ensure_ascii=False))
    return ResultsFile(out)


def versions() -> dict:
    """What a reader needs to rerun a run (an eval's, a study's, an acceptance study's): our version and the libraries
    that decode."""
    found = {"easd-lab": __version__, "python": platform.python_version(), "machine": platform.platform()}
    for module in ("torch", "transformers", "llama_cpp"):
        try:
            found[module] = __import__(module).__version__
        except Exception:  # not installed: the study ran without it
            pass
    return found
