"""Building a static site of recorded runs, evaluations and studies (`python -m easd site`, the page's and the
Evaluation tab's "Make a static site"): the sources read, a page per comparison, evaluation and study
(easd.render.site draws them), Plotly and the page script once in assets/, the Space's README; built aside and
renamed into place, so that a failure leaves the old site as it was and nothing half-written.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from tqdm import tqdm

from ..errors import EasdError, SettingsError
from ..files import write_text_whole
from ..method.compare import first_difference
from ..render import site
from ..render.html import tag
from ..traces import files as trace_io
from .evaluate import trace_name
from .report import grader_of, summary_table
from .results_table import load_results
from .study import analyse

MARK = ".easd-site"  # in every site this command built: the one kind of folder --out may replace

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
    """Build the site of `sources` (trace files, eval folders, study folders) at `out` -> `out`."""

    out = checked_out(out)
    if max_trace_mb <= 0:
        raise SettingsError("--max-trace-mb", f"must be above 0 (got {max_trace_mb:g})")
    kinds = [(_kind(source), source) for source in sources]  # every source read before anything is built
    for kind, source in kinds:
        if kind == "run" and source.stat().st_size > max_trace_mb * 2**20:
            raise SettingsError(
                "--max-trace-mb",
                f"{source} is {source.stat().st_size / 2**20:.0f} MB, over the limit of {max_trace_mb:g}: "
                "raise --max-trace-mb to build its page",
            )
    building = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        (building / MARK).write_text("built by python -m easd site\n", encoding="utf-8")
        for name, text in site.ASSETS.items():
            write_text_whole(building / "assets" / name, text())
        entries, names = [], set()
        with tqdm(total=len(kinds), desc="sources", unit="source", dynamic_ncols=True, disable=not progress) as bar:
            for kind, source in kinds:
                entries.append(BUILDERS[kind](source, building, _unique(source, names), progress))
                bar.update()
        write_text_whole(building / "index.html", site.home_page(title, entries), errors="replace")
        write_text_whole(building / "README.md", space_readme(title))
        _into_place(building, out)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return out


def space_readme(title: str) -> str:
    """The README a Space reads its settings from: the title quoted as JSON (a YAML double-quoted string), so that a
    colon or a `#` in it, as in "EASD Lab: gsm8k", stays the title instead of breaking the front matter."""
    title = " ".join(title.split())
    return SPACE_README.format(quoted=json.dumps(title, ensure_ascii=False), title=title)


# --- sources ------------------------------------------------------------------------------------


def _kind(source: Path) -> str:
    if source.is_file() and source.suffix.lower() in (".json", ".csv"):
        return "run"
    if source.is_dir() and (source / "run.json").is_file() and (source / "results.csv").is_file():
        try:
            config = json.loads((source / "run.json").read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise EasdError(f"{source / 'run.json'}: not readable JSON") from None
        return "study" if isinstance(config, dict) and "study" in config else "evaluation"
    if not source.exists():
        raise EasdError(f"{source}: no such file or folder")
    raise EasdError(f"{source}: not a trace file (.json, .csv), an `eval` folder or a `study` folder (run.json, results.csv)")


def _run(source: Path, site_dir: Path, slug: str, progress: bool):

    traces = trace_io.load(source)
    if not traces:
        raise EasdError(f"{source}: holds no run")
    lanes = dict(zip(("left", "right"), traces[:2] + [None]))
    href = f"runs/{slug}.html"
    shown = [t for t in lanes.values() if t is not None]
    tokens = sum(len(t.records) for t in shown)
    # every token's details take most of a page's time (about 0.5 ms a token): a long run's page has a bar of its own
    with tqdm(total=tokens, desc=f"{source.name}: tokens", unit="token", leave=False, disable=not progress) as bar:
        _write(site_dir / href, site.run_page(lanes, drawn=bar.update))
    fork = first_difference(lanes["left"], lanes["right"])
    facts = [
        " vs ".join(t.settings.method for t in shown),
        f"{tokens:,} tokens",
        _pair(shown[0]),
        "the lanes part at token " + str(fork) if fork is not None else "the lanes never part",
    ]
    return site.Entry(
        "run",
        " ".join(shown[0].prompt.split())[:100] or source.name,
        href + (f"#right-{fork}" if fork is not None else ""),
        facts,
    )


def _evaluation(source: Path, site_dir: Path, slug: str, progress: bool):

    config = json.loads((source / "run.json").read_text(encoding="utf-8"))
    results = load_results(source / "results.csv")
    summary = summary_table(results, config.get("format", "gsm8k"), grader_of(source))
    methods = list(dict.fromkeys(results["method"]))
    entry = site.Entry(
        "evaluation",
        f"{Path(str(config.get('data', source.name))).stem}: {', '.join(methods)}",
        f"evals/{slug}.html",
        [str(config.get("pair", "")), f"{results['problem_id'].nunique():,} problems", f"grader {grader_of(source)}"],
        site.accuracy_table(summary),
    )
    differences = []
    if len(methods) >= 2:
        pairs = _parted(results, methods[0], methods[1])
        for problem, (a, b) in tqdm(
            pairs.items(), desc=f"{source.name}: runs", unit="problem", leave=False, disable=not progress
        ):
            href = _pair_page(source, site_dir, f"{slug}-{_slug(problem)}", a, b)
            differences.append(
                {
                    "problem_id": problem,
                    "gold": a["gold"],
                    "left": a["prediction"],
                    "right": b["prediction"],
                    "href": href,
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


def _study(source: Path, site_dir: Path, slug: str, progress: bool):

    study = analyse(source)
    results = load_results(source / "results.csv")
    parted = _parted(results, "sd", "easd")
    runs = {}
    for problem in (found["problem_id"] for found in study["differences"]):
        if problem in parted:
            runs[problem] = _pair_page(source, site_dir, f"{slug}-{_slug(problem)}", *parted[problem])
    href = f"studies/{slug}.html"
    _write(site_dir / href, site.study_page(study, runs))
    accuracy = {row["method"]: row["accuracy"] for row in study["accuracy"]}
    facts = [study["config"]["pair"], f"{study['paired'].get('pairs', 0)} problems"]
    facts += [f"{m} {100 * a:.1f}%" for m, a in accuracy.items()]
    verdict = tag("p", study["verdict"])
    return site.Entry("study", f"Does EASD help? {Path(study['config']['data']).name}", href, facts, verdict)


BUILDERS = {"run": _run, "evaluation": _evaluation, "study": _study}


def _parted(results, a: str, b: str) -> dict[str, tuple[dict, dict]]:
    """Each problem (sample 0) whose answers by methods `a` and `b` differ: its two result rows."""
    first = results[results["sample"] == 0]
    left = {r["problem_id"]: r for r in first[first["method"] == a].to_dict("records")}
    right = {r["problem_id"]: r for r in first[first["method"] == b].to_dict("records")}
    return {p: (left[p], right[p]) for p in left if p in right and str(left[p]["prediction"]) != str(right[p]["prediction"])}


def _pair_page(source: Path, site_dir: Path, slug: str, a: dict, b: dict) -> str | None:
    """The page of two result rows' runs, from the folder's traces/ (None where it kept none), at the parting token."""

    paths = [source / "traces" / trace_name(row) for row in (a, b)]
    if not all(p.is_file() for p in paths):
        return None
    left, right = (trace_io.read_json(p)[0] for p in paths)
    href = f"runs/{slug}.html"
    _write(site_dir / href, site.run_page({"left": left, "right": right}))
    fork = first_difference(left, right)
    return href + (f"#right-{fork}" if fork is not None else "")


def _pair(trace) -> str:
    return " → ".join(m for m in (trace.draft_model, trace.target_model) if m) or "models not recorded"


# --- files --------------------------------------------------------------------------------------


def _write(path: Path, html: str) -> None:

    write_text_whole(path, html, errors="replace")  # a lone surrogate of a token's bytes becomes "?"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", str(text)).strip("-.")[:60] or "x"


def _unique(source: Path, taken: set[str]) -> str:
    base = _slug(source.stem if source.is_file() else source.name)
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}-{n}"
    taken.add(name)
    return name


def checked_out(out: Path) -> Path:
    if not out.parent.resolve().is_dir():
        raise SettingsError("--out", f"the folder {out.parent} does not exist")
    if out.exists() and not out.is_dir():
        raise SettingsError("--out", f"{out} is a file: give a folder for the site")
    if out.is_dir() and any(out.iterdir()) and not (out / MARK).is_file():
        raise SettingsError("--out", f"{out} holds other files: give a new or empty folder, or a site this command built")
    return out


def _into_place(building: Path, out: Path) -> None:
    """The new site where the old one was (if any), by renames: the old one goes only once the new one is in place."""
    old = None
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}-old-", dir=out.parent))
        os.rmdir(old)
        os.replace(out, old)
    os.replace(building, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
