"""`python -m easd pairs`: the named model pairs, their size and memory, and whether they run here."""

from __future__ import annotations

import argparse

HELP = "list the named model pairs, their size, memory and availability here"


def add(parser: argparse.ArgumentParser) -> None:
    """No flags."""


def run(args: argparse.Namespace) -> int:
    from ..pairs.registry import default_pair_name, pairs_table

    default = default_pair_name()
    for row in pairs_table():
        mark = " (default)" if row["pair"] == default else ""
        print(f"{row['pair']}{mark}: {row['draft → target']}")
        print(f"    {row['about']}")
        print(f"    size: {row['size']} | memory: {row['memory']} | available here: {row['available']} ({row['why']})")
    return 0
