"""`python -m easd table`: the paper's main table over several `eval` folders, one benchmark each."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import EasdError

HELP = "the paper's table (accuracy per benchmark and average, tokens/s, interventions, passes; paired against target-only) over eval folders"


def add(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("folders", type=Path, nargs="+", help="eval output folders (each holds a summary.csv)")


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    from ..lab.report import benchmark_name, paper_table

    summaries, paired = {}, {}
    for folder in args.folders:
        if not (folder / "summary.csv").is_file():
            raise EasdError(f"{folder}: holds no summary.csv; give folders that `python -m easd eval --out` wrote")
        name = benchmark_name(folder)
        name = name if name not in summaries else str(folder)
        summaries[name] = pd.read_csv(folder / "summary.csv")
        if (folder / "paired.csv").is_file():
            paired[name] = pd.read_csv(folder / "paired.csv")
    print(paper_table(summaries, paired))
    return 0
