"""`python -m easd export-html`: a trace file's two runs side by side as one HTML file that opens anywhere, offline.

The file is drawn by the web app's own renderers (easd.render), which need no Gradio.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import EasdError, SettingsError
from ..files import write_text_whole
from ..render.export import comparison_file
from ..traces import files as trace_io

NAME = "export-html"
HELP = "a trace file's two runs (SD and EASD, or any two) as one self-contained HTML file: lanes, inspector, figures"


def add(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", type=Path, help="a trace file (.json or .csv) from the app, `generate` or `eval --traces`")
    parser.add_argument("-o", "--out", type=Path, help="the HTML file to write (default: the trace file's name with .html)")
    parser.add_argument(
        "--runs",
        default="1,2",
        help="which two runs of the file go in the left and right lanes, by their place in the file (1 is the first)",
    )


def run(args: argparse.Namespace) -> int:
    traces = trace_io.load(args.trace)
    out = _writable(args.out or args.trace.with_suffix(".html"), args.trace)
    chosen = _chosen(args.runs, len(traces), args.trace)
    lanes = dict(zip(("left", "right"), [traces[i] for i in chosen] + [None]))
    html = comparison_file(lanes)
    try:  # written aside and renamed: a failure leaves nothing half-written, and an old file as it was
        write_text_whole(out, html, errors="replace")  # a lone surrogate of a token's bytes becomes "?"
    except OSError as err:
        raise SettingsError("--out", f"cannot write {out}: {err.strerror or err}") from None
    print(f"wrote {out} ({out.stat().st_size / 2**20:.1f} MB): {', '.join(t.settings.method for t in lanes.values() if t)}")
    return 0


def _writable(out: Path, trace: Path) -> Path:
    """`out` if an HTML file may be written there: its folder exists, it is no folder itself, and it is not the trace."""
    if not out.parent.resolve().is_dir():
        raise SettingsError("--out", f"the folder {out.parent} does not exist")
    if out.is_dir():
        raise SettingsError("--out", f"{out} is a folder: give the HTML file's name, as in {out / 'run.html'}")
    if out.resolve() == trace.resolve():
        raise SettingsError(
            "--out", f"is the trace file itself ({trace.name}): give another name, as in {trace.with_suffix('.html').name}"
        )
    return out


def _chosen(runs: str, count: int, path: Path) -> list[int]:
    """The runs' indices: two (or the one a one-run file holds), each a place in the file."""
    if count == 0:
        raise EasdError(f"{path.name}: holds no run")
    try:
        places = [int(part) for part in runs.split(",")]
    except ValueError:
        raise SettingsError("--runs", f"must be two places in the file, like 1,2 (got {runs[:40]!r})") from None
    if count == 1 and runs == "1,2":
        return [0]
    if len(places) != 2 or not all(1 <= p <= count for p in places):
        raise SettingsError("--runs", f"must be two places from 1 to {count}, the runs {path.name} holds (got {runs[:40]!r})")
    return [p - 1 for p in places]
