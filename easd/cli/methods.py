"""`python -m easd methods`: the methods' table (easd.method.methods) as docs/method.md shows it, a row per method."""

from __future__ import annotations

import argparse

HELP = "list the decoding methods: what each runs, what its tokens say, its own settings (a Markdown table)"
HEADER = (
    "| method | title | draft | target | verifies (SD's block) | EASD's signals | origins of its tokens | interventions "
    "| models (Table 1) | its own settings | its own trace columns | `sweep --grid` | `bench` rows by | a generation holds |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def add(parser: argparse.ArgumentParser) -> None:
    """No flags."""


def run(args: argparse.Namespace) -> int:
    print(methods_table())
    return 0


def methods_table() -> str:
    """Every method of the table, a Markdown row each, in the table's order."""
    from ..method.methods import METHODS, columns_of, own_knobs

    yes = lambda flag: "yes" if flag else "—"  # noqa: E731
    rows = [HEADER]
    for name, method in METHODS.items():
        interventions = f"{', '.join(method.intervention_origins)} ({method.intervention[1]})" if method.intervenes else "—"
        own = ", ".join(f"`--{flag.replace('_', '-')}`" for flag in own_knobs(method)) or "—"
        grid = ", ".join(f"`{setting}`" for setting in method.grid) or "—"
        record = ", ".join(f"`{column}`" for column in columns_of(method.record)) or "—"
        cells = [f"`{name}`", method.title, yes(method.uses_draft), yes(method.uses_target), yes(method.verifies)]
        cells += [
            yes(method.signals),
            ", ".join(method.origin_names),
            interventions,
            method.models,
            own,
            record,
            grid,
            f"`--{method.bench.replace('_', '-')}`" if method.bench else "—",
            f"{'a group of rows' if method.grouped else 'a row'} of the batch",
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)
