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


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    from ..lab.report import benchmark_name, paper_table

    blocks: dict[str, tuple[dict, dict]] = {}  # by pair: (summaries, paired), each by benchmark
    for folder in args.folders:
        if not (folder / "summary.csv").is_file():
            raise EasdError(f"{folder}: holds no summary.csv; give folders that `python -m easd eval --out` wrote")
        summaries, paired = blocks.setdefault(_pair_of(folder), ({}, {}))
        name = benchmark_name(folder)
        name = name if name not in summaries else str(folder)
        summaries[name] = pd.read_csv(folder / "summary.csv")
        if (folder / "paired.csv").is_file():
            paired[name] = pd.read_csv(folder / "paired.csv")
    for i, (pair, (summaries, paired)) in enumerate(blocks.items()):
        if len(blocks) > 1:
            print(f"{chr(10) if i else ''}### {pair}\n")
        print(paper_table(summaries, paired))
    return 0


def _pair_of(folder: Path) -> str:
    """The pair an eval folder ran (its run.json), or "unknown pair" for a folder without one."""
    config = folder / "run.json"
    pair = json.loads(config.read_text(encoding="utf-8")).get("pair") if config.is_file() else None
    return str(pair) if pair else "unknown pair"
