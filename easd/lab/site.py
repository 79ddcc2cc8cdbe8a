"""Building a static site of recorded runs, evaluations and studies (`python -m easd site`, the page's and the
Evaluation tab's "Make a static site"): the sources read, a page per comparison, evaluation and study
(easd.render.site draws them), Plotly and the page script once in assets/, the Space's README. A site is built in a
hidden folder inside its own and its entries (OWNED) renamed into place, so that a failure leaves the old site as it
was and nothing half-written, and whatever else the folder holds (a CNAME, a gh-pages checkout's .git) stays.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from pathlib import Path

from tqdm import tqdm

from ..errors import EasdError, SettingsError
from ..files import file_stem, readable, write_text_whole
from ..method.compare import first_difference
from ..method.references import REFERENCE
from ..render import site
from ..render.html import Html, tag
from ..traces import files as trace_io
from .reports.report import grader_of, summary_table
from .runs.evaluate import trace_path
from .runs.results_table import load_results
from .study.findings import analyse

try:
    import fcntl
except ImportError:  # Windows: two builds of one folder at once are not kept apart there
    fcntl = None

MARK = ".easd-site"  # in every site this command built: the one kind of folder with files --out may build in
# what a build writes, each entry replaced whole by the next build; anything else in the site's folder is the user's
OWNED = (MARK, "index.html", "README.md", "assets", "runs", "evals", "studies")
BUILDING = ".easd-building-"  # the hidden folder a build writes in, inside the site's folder (the same file system)
TRACE_SUFFIXES = (".json", ".csv")
GALLERY_INDEX = "index.json"  # a gallery's list of its recordings (assets/gallery): their titles, not a run

SPACE_README = """---
title: {quoted}
emoji: 🔎
colorFrom: blue
colorTo: green
sdk: static
app_file: index.html
pinned: false
---

# {title}

Speculative decoding (SD) and entropy-aware speculative decoding (EASD), run by EASD Lab and published as a static
site: no model runs here. Open a run to see the two answers side by side, token by token; click or tap a token for
why it was chosen (its draft, the target's candidates, the entropies and overlap EASD's rule read). An evaluation
lists each method's accuracy and the problems where two methods answer differently; a study says whether EASD
helped on its problems, at what speed, and how robust that is to its thresholds.
"""


def build_site(sources: list[Path], out: Path, title: str, max_trace_mb: float = 64, progress: bool = True) -> Path:
    """Build the site of `sources` (trace files, folders of them, eval folders, study folders) at `out` -> `out`."""

    if not 0 < max_trace_mb < math.inf:
        raise SettingsError("--max-trace-mb", f"must be a finite number of MB above 0 (got {max_trace_mb:g})")
    out = checked_out(out)
    found = read_sources(sources)  # every source read before anything is built
    for source in found:
        if source.kind == "run" and source.path.stat().st_size > max_trace_mb * 2**20:
            raise SettingsError(
                "--max-trace-mb",
                f"{source.path} is {source.path.stat().st_size / 2**20:.0f} MB, over the limit of {max_trace_mb:g}: "
                "raise --max-trace-mb to build its page",
            )
    with _building(out) as building:
        (building / MARK).write_text(
            "built by python -m easd site: each build replaces " + ", ".join(OWNED[1:]) + "; anything else here is yours\n",
            encoding="utf-8",
        )
        for name, text in site.ASSETS.items():
            write_text_whole(building / "assets" / name, text())
        entries, names = [], set()
        with tqdm(total=len(found), desc="sources", unit="source", dynamic_ncols=True, disable=not progress) as bar:
            for source in found:
                entries.append(BUILDERS[source.kind](source, building, _unique(source.path, names), progress))
                bar.update()
        write_text_whole(building / "index.html", site.home_page(title, entries), errors="replace")
        write_text_whole(building / "README.md", space_readme(title))
        _into_place(building, out)
    return out


def space_readme(title: str) -> str:
    """The README a Space reads its settings from: the title quoted as JSON (a YAML double-quoted string), so that a
    colon or a `#` in it, as in "EASD Lab: gsm8k", stays the title instead of breaking the front matter."""
    title = " ".join(title.split())
    return SPACE_README.format(quoted=json.dumps(title, ensure_ascii=False), title=title)


# --- sources ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """One page's source: a run (a trace file), an evaluation or a study (a folder)."""

    kind: str  # run | evaluation | study
    path: Path
    listed: dict | None = None  # a run's entry in its gallery's index.json (its title, what it shows), if given


def read_sources(paths: list[Path]) -> list[Source]:
    """The sources `paths` name, in order: a folder of trace files is its trace files (a gallery: its index.json
    gives their titles, and is no run)."""
    found, listed = [], {}
    for path in paths:
        kind = _kind(path)
        if kind in ("evaluation", "study"):
            found.append(Source(kind, path))
            continue
        for file in sorted(p for p in path.iterdir() if _is_trace_file(p)) if kind == "folder" else [path]:
            index = _gallery_index(file) if file.name == GALLERY_INDEX else None
            if index is None:
                found.append(Source("run", file))
            else:
                listed |= index
    return [replace(s, listed=listed.get(s.path.resolve())) if s.kind == "run" else s for s in found]


def _kind(source: Path) -> str:
    if _is_trace_file(source):
        return "run"
    if source.is_dir() and (source / "run.json").is_file() and (source / "results.csv").is_file():
        try:
            config = json.loads((source / "run.json").read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise EasdError(f"{source / 'run.json'}: not readable JSON") from None
        return "study" if isinstance(config, dict) and "study" in config else "evaluation"
    if source.is_dir() and any(_is_trace_file(p) for p in source.iterdir()):
        return "folder"
    if not source.exists():
        raise EasdError(f"{source}: no such file or folder")
    raise EasdError(
        f"{source}: not a trace file (.json, .csv), a folder of them, an `eval` folder or a `study` folder (run.json, results.csv)"
    )


def _is_trace_file(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in TRACE_SUFFIXES


def _gallery_index(path: Path) -> dict[Path, dict] | None:
    """A gallery's index.json (a list of recordings, each with its `file`, `title` and what it `shows`), as each
    recording by its file's path; None for a file that is no such list (a trace file that happens to have its name)."""
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None  # read as a trace file, which says what is wrong with it
    if not isinstance(entries, list):
        return None
    return {
        (path.parent / entry["file"]).resolve(): entry
        for entry in entries
        if isinstance(entry, dict) and isinstance(entry.get("file"), str)
    }


def _run(source: Source, site_dir: Path, slug: str, progress: bool):

    traces = trace_io.load(source.path)
    if not traces:
        raise EasdError(f"{source.path}: holds no run")
    lanes = dict(zip(("left", "right"), traces[:2] + [None]))
    href = f"runs/{slug}.html"
    shown = [t for t in lanes.values() if t is not None]
    tokens = sum(len(t.records) for t in shown)
    # every token's details take most of a page's time (about 0.5 ms a token): a long run's page has a bar of its own
    with tqdm(total=tokens, desc=f"{source.path.name}: tokens", unit="token", leave=False, disable=not progress) as bar:
        _write(site_dir / href, site.run_page(lanes, drawn=bar.update))
    fork = first_difference(lanes["left"], lanes["right"])
    facts = [
        " vs ".join(t.settings.method for t in shown),
        f"{tokens:,} tokens",
        _pair(shown[0]),
        "the lanes part at token " + str(fork) if fork is not None else "the lanes never part",
    ]
    listed = source.listed or {}
    return site.Entry(
        "run",
        str(listed.get("title") or " ".join(shown[0].prompt.split())[:100] or source.path.name),
        href + (f"#right-{fork}" if fork is not None else ""),
        facts,
        tag("p", str(listed["shows"])) if listed.get("shows") else Html(""),
    )


def _evaluation(source: Source, site_dir: Path, slug: str, progress: bool):

    folder = source.path
    config = json.loads((folder / "run.json").read_text(encoding="utf-8"))
    results = load_results(folder / "results.csv")
    summary = summary_table(results, config.get("format", "gsm8k"), grader_of(folder))
    methods = list(dict.fromkeys(results["method"]))
    entry = site.Entry(
        "evaluation",
        f"{Path(str(config.get('data', folder.name))).stem}: {', '.join(methods)}",
        f"evals/{slug}.html",
        [str(config.get("pair", "")), f"{results['problem_id'].nunique():,} problems", f"grader {grader_of(folder)}"],
        site.accuracy_table(summary),
    )
    differences = []
    if len(methods) >= 2:
        pairs = _parted(results, methods[0], methods[1])
        for problem, (a, b) in tqdm(
            pairs.items(), desc=f"{folder.name}: runs", unit="problem", leave=False, disable=not progress
        ):
            differences.append(
                {
                    "problem_id": problem,
                    "gold": a["gold"],
                    "left": a["prediction"],
                    "right": b["prediction"],
                    "href": _pair_page(folder, site_dir, slug, a, b),
                    "methods": (methods[0], methods[1]),
                }
            )
    entry.facts.append(
        f"{len(differences)} problems where {methods[0]} and {methods[1]} answer differently"
        if len(methods) > 1
        else "one method"
    )
    _write(site_dir / entry.href, site.evaluation_page(entry, differences))
    return entry


def _study(source: Source, site_dir: Path, slug: str, progress: bool):

    study = analyse(source.path)
    results = load_results(source.path / "results.csv")
    parted = _parted(results, REFERENCE, study["method"]["name"])
    runs = {}
    for problem in (found["problem_id"] for found in study["differences"]):
        if problem in parted and (href := _pair_page(source.path, site_dir, slug, *parted[problem])):
            runs[problem] = href
    # the report's own links to one-file exports lead to its differences/, which the site has not: to its run pages
    study["differences"] = [
        d | {"file": "../" + runs[d["problem_id"]] if d["problem_id"] in runs else None} for d in study["differences"]
    ]
    href = f"studies/{slug}.html"
    _write(site_dir / href, site.study_page(study, runs))
    accuracy = {row["method"]: row["accuracy"] for row in study["accuracy"]}
    facts = [study["config"]["pair"], f"{study['paired'].get('pairs', 0)} problems"]
    facts += [f"{m} {100 * a:.1f}%" for m, a in accuracy.items()]
    verdict = tag("p", study["verdict"])
    title = f"Does {study['method']['title']} help? {Path(study['config']['data']).name}"
    return site.Entry("study", title, href, facts, verdict)


BUILDERS = {"run": _run, "evaluation": _evaluation, "study": _study}


def _parted(results, a: str, b: str) -> dict[str, tuple[dict, dict]]:
    """Each problem (sample 0) whose answers by methods `a` and `b` differ: its two result rows."""
    first = results[results["sample"] == 0]
    left = {r["problem_id"]: r for r in first[first["method"] == a].to_dict("records")}
    right = {r["problem_id"]: r for r in first[first["method"] == b].to_dict("records")}
    return {p: (left[p], right[p]) for p in left if p in right and str(left[p]["prediction"]) != str(right[p]["prediction"])}


def _pair_page(folder: Path, site_dir: Path, slug: str, a: dict, b: dict) -> str | None:
    """The page of two result rows' runs, from the folder's traces/ (None where it kept none), at the parting token:
    runs/SLUG/ holds the folder's pages, each named by its problem id's file_stem (one page per id, whatever it is)."""

    paths = [trace_path(folder / "traces", row) for row in (a, b)]
    if not all(p.is_file() for p in paths):
        return None
    left, right = (trace_io.read_json(p)[0] for p in paths)
    href = f"runs/{slug}/{file_stem(str(a['problem_id']))}.html"
    _write(site_dir / href, site.run_page({"left": left, "right": right}, depth=2))
    fork = first_difference(left, right)
    return href + (f"#right-{fork}" if fork is not None else "")


def _pair(trace) -> str:
    return " → ".join(m for m in (trace.draft_model, trace.target_model) if m) or "models not recorded"


# --- files --------------------------------------------------------------------------------------


def _write(path: Path, html: str) -> None:

    write_text_whole(path, html, errors="replace")  # a lone surrogate of a token's bytes becomes "?"


def _unique(source: Path, taken: set[str]) -> str:
    """A source's name in the site (its page, the folder of its runs' pages): readable, and not another source's."""
    base = readable(source.stem if source.is_file() else source.resolve().name) or "source"
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}-{n}"
    taken.add(name)
    return name


def checked_out(out: Path) -> Path:
    """`out`, where a site may be built: a new folder in one that exists, an empty folder, or a site this command
    built (a folder a killed build left behind in it does not count)."""
    try:
        if not out.parent.resolve().is_dir():
            raise SettingsError("--out", f"the folder {out.parent} does not exist")
        if out.exists() and not out.is_dir():
            raise SettingsError("--out", f"{out} is a file: give a folder for the site")
        if out.is_dir() and not (out / MARK).is_file() and any(not p.name.startswith(BUILDING) for p in out.iterdir()):
            raise SettingsError("--out", f"{out} holds other files: give a new or empty folder, or a site this command built")
    except (OSError, ValueError) as err:  # a folder we may not read, a name the system refuses
        raise SettingsError("--out", f"{out}: {_reason(err)}") from None
    return out


@contextmanager
def _building(out: Path) -> Iterator[Path]:
    """A hidden folder inside `out` to build its site in, removed at the end; `out` made if new (and removed again if
    the build fails), locked against another build at the same time, and rid of any folder a killed build left.
    Made inside `out`, not beside it, so that `out` stays the folder (or link) it is, with its own permissions, and
    the renames into it stay on one file system."""
    made = not out.exists()
    try:
        out.mkdir(exist_ok=True)  # with the user's umask: readable by a web server running as someone else
        handle = os.open(out, os.O_RDONLY)
    except (OSError, ValueError) as err:
        raise SettingsError("--out", f"cannot make the folder {out}: {_reason(err)}") from None
    try:
        _lock(handle, out)
        for left in out.glob(BUILDING + "*"):
            shutil.rmtree(left, ignore_errors=True)
        try:
            building = Path(tempfile.mkdtemp(prefix=BUILDING, dir=out))
        except OSError as err:
            raise SettingsError("--out", f"cannot write in {out}: {_reason(err)}") from None
        try:
            yield building
        finally:
            shutil.rmtree(building, ignore_errors=True)
    except BaseException:
        if made:
            with suppress(OSError):
                out.rmdir()
        raise
    finally:
        os.close(handle)


def _lock(handle: int, out: Path) -> None:
    """Hold `out` for this build; refused while another build holds it. The lock goes with the process that holds it,
    however it ends, so a killed build never leaves the folder locked."""
    if fcntl is None:
        return
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SettingsError("--out", f"another build of a site is writing {out} now: try again when it has finished") from None


def _into_place(building: Path, out: Path) -> None:
    """The new site's entries (OWNED) where the old one's were, each by a rename; the mark first, so that the folder
    is a site all along. A folder of the old site, or an entry the new one does not have, is first moved aside into
    `building` (removed with it); a file is renamed over. Nothing else in `out` is touched."""
    aside = building / ".old"
    aside.mkdir()
    for name in OWNED:
        new, old = building / name, out / name
        if os.path.lexists(old) and not (new.is_file() and old.is_file()):
            os.replace(old, aside / name)
        if new.exists():
            os.replace(new, old)


def _reason(err: Exception) -> str:
    return getattr(err, "strerror", None) or str(err)
