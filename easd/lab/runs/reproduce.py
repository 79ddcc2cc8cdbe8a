"""`eval --check-reproducible N`: do EASD's decisions survive another, equally correct evaluation order?

A penalty decided by rounding (docs/method.md, "Fragile decisions") can move when the same computation
runs in another order: a row sharing its forward passes with other rows rather than alone, or
the other way round. This reruns the EASD variants of the first N problems (sample 0) in the
other order and compares each with the evaluation's own row: where its first penalty fell, and
whether the text is the same.
"""

from __future__ import annotations

import pandas as pd

from ...errors import SettingsError
from ...method.methods import METHODS, lookup
from ...method.pair import ModelPair
from ...method.references import REFERENCE
from ..grading.problems import Problem
from .evaluate import LocalRunner, Variant, WorkItem

COLUMNS = [
    "method",
    "problems",
    "eval_order",
    "rerun_order",
    "first_penalty_moved",
    "texts_differ",
    "penalties_eval",
    "penalties_rerun",
    "fragile_penalties_eval",
]


def rerun_batch_size(batch_size: int, count: int) -> int:
    """Rows the rerun decodes together: alone if the evaluation batched its rows, else all N together."""
    if batch_size > 1:
        return 1
    if count < 2:
        raise SettingsError(
            "--check-reproducible", "with --batch-size 1 the other order decodes the N problems together, so give N ≥ 2"
        )
    return count


def refusing(variants: list[Variant]) -> tuple[Variant, ...]:
    """The variants of methods that refuse drafts (the table's `refuses`: EASD's rule), whose first refusals a rerun
    checks; SettingsError naming --check-reproducible where there is none."""
    found = tuple(v for v in variants if lookup(v.settings.method).refuses)
    if not found:
        names = [m.name for m in METHODS.values() if m.refuses]
        raise SettingsError(
            "--check-reproducible",
            f"needs a method that refuses drafts ({', '.join(names)}) in --methods, e.g. --methods {REFERENCE},{names[0]}",
        )
    return found


def check_reproducible(
    pair: ModelPair, problems: list[Problem], variants: list[Variant], rows: list[dict], batch_size: int, count: int
) -> pd.DataFrame:
    """One row per variant of a method that refuses drafts (EASD's): how many of the first `count` problems' first
    refusals moved in the other order.

    `rows` are the evaluation's results (results.csv as read back); `batch_size` is the one it ran with.
    """
    easd = refusing(variants)
    rerun_rows = rerun_batch_size(batch_size, count)
    items = [WorkItem(problem, 0, easd) for problem in problems[:count]]
    reruns = {
        (row["problem_id"], row["method"]): row for _, finished in LocalRunner(pair, rerun_rows)(items) for row, _ in finished
    }
    originals = {(r["problem_id"], r["method"]): r for r in rows if str(r["sample"]) == "0"}
    table = []
    for variant in easd:
        keys = [(item.problem.id, variant.label) for item in items if (item.problem.id, variant.label) in originals]
        moved = sum(_cell(originals[k]["first_penalty_position"]) != _cell(reruns[k]["first_penalty_position"]) for k in keys)
        table.append(
            {
                "method": variant.label,
                "problems": len(keys),
                "eval_order": "alone" if batch_size == 1 else f"batched (up to {batch_size} rows)",
                "rerun_order": "alone" if rerun_rows == 1 else f"batched ({rerun_rows} rows)",
                "first_penalty_moved": moved,
                "texts_differ": sum(originals[k]["text"] != reruns[k]["text"] for k in keys),
                "penalties_eval": sum(int(originals[k]["penalized"]) for k in keys),
                "penalties_rerun": sum(int(reruns[k]["penalized"]) for k in keys),
                "fragile_penalties_eval": sum(int(originals[k]["fragile_penalties"] or 0) for k in keys),
            }
        )
    return pd.DataFrame(table, columns=COLUMNS)


def _cell(value) -> str:
    """results.csv's text for a value: "" for none."""
    return "" if value is None else str(value)
