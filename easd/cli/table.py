"""`python -m easd table`: the paper's main table over several `eval` folders, one benchmark each; folders of
several pairs (two target scales, as the paper's Table 1) give a block per pair."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..errors import EasdError

HELP = "the paper's table (accuracy per benchmark and average, tokens/s, interventions, passes; paired against target-only) over eval folders"


def add(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("folders", type=Path, nargs="+", help="eval output folders (each holds a summary.csv)")
    parser.add_argument(
        "--best-on-test",
        type=Path,
        nargs="+",
        default=[],
        metavar="SWEEP",
        help="sweep folders run on an eval folder's own problems: adds the best grid point's row, marked as chosen on "
        "the test problems (the paper's protocol for MTI); the eval's own rows stay chosen on held-out problems",
    )


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    from ..lab.grading.answers import GRADERS
    from ..lab.reports.paper import benchmark_name, paper_table
    from ..lab.reports.report import grader_of

    blocks: dict[str, tuple[dict, dict]] = {}  # by pair: (summaries, paired), each by benchmark
    names: dict[Path, str] = {}  # each folder's benchmark column
    for folder in args.folders:
        if not (folder / "summary.csv").is_file():
            raise EasdError(f"{folder}: holds no summary.csv; give folders that `python -m easd eval --out` wrote")
        summaries, paired = blocks.setdefault(_pair_of(folder), ({}, {}))
        name = benchmark_name(folder)
        names[folder] = name = name if name not in summaries else str(folder)
        summaries[name] = pd.read_csv(folder / "summary.csv")
        if (folder / "paired.csv").is_file():
            paired[name] = pd.read_csv(folder / "paired.csv")
    for sweep in args.best_on_test:
        _add_best_on_test(sweep, names, blocks)
    for i, (pair, (summaries, paired)) in enumerate(blocks.items()):
        if len(blocks) > 1:
            print(f"{chr(10) if i else ''}### {pair}\n")
        print(paper_table(summaries, paired))
        notes = [
            n
            for folder, name in names.items()
            if _pair_of(folder) == pair
            for n in _easd_notes(folder, name, summaries) + _variant_notes(folder, name, summaries)
        ]
        if notes:
            print("\n" + "\n".join(notes))
    protocols = {names[folder]: _protocol(folder) for folder in args.folders}
    print("\n" + "\n".join(f"{name}: {line}" for name, line in protocols.items()))
    if len(set(protocols.values())) > 1:
        print("the folders were decoded under different sampling protocols: compare rows within a column, not across")
    graders = {names[folder]: grader_of(folder) for folder in args.folders}
    if set(graders.values()) != {GRADERS[0]}:  # ours everywhere goes unsaid, as it always has
        print("\ngraded by " + ", ".join(f"{grader} on {name}" for name, grader in graders.items()))
    return 0


def _easd_notes(folder: Path, name: str, summaries: dict) -> list[str]:
    """The settings that change an EASD row's text and that the paper leaves open or tunes (k, τ_H and where it came
    from, τ_O, n), one line per EASD row of an eval folder, from its run.json; "not calibrated" said where τ_H was."""
    from ..method.methods import METHODS

    config = folder / "run.json"
    rows = [
        m for m in summaries[name]["method"] if (method := METHODS.get(str(m).split(":")[0].split("@")[0])) and method.refuses
    ]
    if not rows or not config.is_file():
        return []
    saved = json.loads(config.read_text(encoding="utf-8"))
    settings = saved.get("settings", {})
    source = saved.get("tau_h_source") or "not calibrated: τ_H's source was not recorded (a folder from before it was)"
    where = f"k = {settings.get('k')}, τ_H = {settings.get('tau_h')} ({source}), τ_O = {settings.get('tau_o')}, n = {settings.get('top_n')}"
    if settings.get("entropy") == "sampling":
        where += f", H of the sampling distribution (T = {settings.get('temperature')}, top-p = {settings.get('top_p')})"
    return [f"{row} on {name}: {where}" for row in rows if "@" not in str(row)]


def _variant_notes(folder: Path, name: str, summaries: dict) -> list[str]:
    """How each NAME:SPEC row of an eval folder (its summary in `summaries[name]`) ran, where its method describes its
    settings in words (beam search: its beams and their ranking), from its run.json."""
    from ..lab.runs.evaluate import parse_methods
    from ..method.methods import METHODS, knobs, make_settings

    labelled = [str(m) for m in summaries[name]["method"] if ":" in str(m) and str(m).split(":")[0] in METHODS]
    config = folder / "run.json"
    if not labelled or not config.is_file():
        return []
    saved = json.loads(config.read_text(encoding="utf-8")).get("settings", {})
    base = make_settings({name: value for name, value in saved.items() if name in knobs()})  # another version may hold others
    notes = [(v.label, METHODS[v.settings.method].describe(v.settings)) for v in parse_methods(",".join(labelled), base)]
    return [f"{label} on {name}: {described}" for label, described in notes if described]


def _add_best_on_test(sweep: Path, names: dict[Path, str], blocks: dict) -> None:
    """The sweep's best grid point (by accuracy), as a row of the eval folder that ran the same problems on the same
    pair, labelled as chosen on those problems; EasdError naming --best-on-test when no folder ran them."""
    import pandas as pd

    from ..lab.reports.report import grader_of, summary_table
    from ..lab.runs.results_table import load_results

    if not (sweep / "results.csv").is_file():
        raise EasdError(f"--best-on-test: {sweep} holds no results.csv; give folders that `python -m easd sweep` wrote")
    results = load_results(sweep / "results.csv")
    grid = results[results["method"].str.contains("@")]
    if not len(grid):
        raise EasdError(f"--best-on-test: {sweep} holds no grid points (mti@τ/ω, easd@τ_H/τ_O, rsd@δ)")
    problems = set(grid["problem_id"])
    twin = next(
        (f for f in names if _pair_of(f) == _pair_of(sweep) and set(load_results(f / "results.csv")["problem_id"]) == problems),
        None,
    )
    if twin is None:
        raise EasdError(
            f"--best-on-test: {sweep} ran no eval folder's problems on its pair; run the sweep on the same --data, --shuffle, --offset and --limit"
        )
    config = json.loads((sweep / "run.json").read_text(encoding="utf-8"))
    summary = summary_table(grid, config["format"], grader_of(sweep))
    rows = []
    for label, points in readings(list(summary["method"]), config.get("settings", {})):
        chosen = summary[summary["method"].isin(points)]
        best = chosen.loc[[chosen["accuracy"].idxmax()]].copy()
        best["method"] = best["method"] + f", {label}, best on these problems (the paper's protocol)"
        rows.append(best)
    summaries = blocks[_pair_of(twin)][0]
    summaries[names[twin]] = pd.concat([summaries[names[twin]], *rows], ignore_index=True)


BETAS = (0.5, 1.0, 1.5, 2.0)  # the paper's grid of MTI's "intervention scale β", which may be τ or ω − 1 (docs/method.md)


def readings(labels: list[str], settings: dict) -> list[tuple[str, list[str]]]:
    """The grids a sweep's points are chosen from, each with its size in its label: for MTI the paper's two 4-point
    readings of β (β = τ at the sweep's ω; β = ω − 1 at its τ), so that a bigger τ × ω grid does not flatter MTI; for
    any other grid, all its points."""
    points = {label: [float(v) for v in label.split("@")[1].split("/")] for label in labels if label.startswith("mti@")}
    found = []
    if points:
        omega, tau = settings.get("mti_omega", 1.5), settings.get("mti_tau", 1.0)
        as_tau = [label for label, (t, w) in points.items() if w == omega and t in BETAS]
        as_omega = [label for label, (t, w) in points.items() if t == tau and w - 1 in BETAS]
        if as_tau:
            found.append((f"best of {len(as_tau)} τ at ω = {omega:g} (β read as τ)", as_tau))
        if as_omega:
            found.append((f"best of {len(as_omega)} ω at τ = {tau:g} (β read as ω − 1)", as_omega))
    return found or [(f"best of {len(labels)} grid points", labels)]


def _protocol(folder: Path) -> str:
    """How an eval folder's methods sampled (easd.lab.runs.protocol), in a line."""
    from ..lab.runs.protocol import Protocol

    config = folder / "run.json"
    return Protocol.of_config(json.loads(config.read_text(encoding="utf-8")) if config.is_file() else {}).line()


def _pair_of(folder: Path) -> str:
    """The pair an eval folder ran (its run.json), or "unknown pair" for a folder without one."""
    config = folder / "run.json"
    pair = json.loads(config.read_text(encoding="utf-8")).get("pair") if config.is_file() else None
    return str(pair) if pair else "unknown pair"
