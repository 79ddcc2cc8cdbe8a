"""`python -m easd calibrate`: choose τ_H the paper's way.

Take each model's greedy generations on the data, take the mean entropy of its 5% highest-entropy
tokens, and map that to the nearest of {0.5, 1.0, 1.5, 2.0}. The target's generations come from
greedy SD, whose text *is* the target's greedy text and which records the target's entropy at
every token, at SD's speed instead of the target's. The draft's come from draft-only runs.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
from tqdm import tqdm

from ...method.generation import Generation
from ...method.methods.draft import DRAFT
from ...method.methods.sd import SD
from ...method.pair import ModelPair
from ...method.settings import DecodeSettings
from ...method.step import Batch
from ..grading.problems import Problem
from ..reports.figures import write_html

CANDIDATES = (0.5, 1.0, 1.5, 2.0)
TOP_SHARE = 0.05


@dataclass
class Calibration:
    model: str  # target | draft
    tokens: int
    raw: float  # mean entropy of the top 5% tokens, nats
    tau_h: float  # the nearest candidate


def top_share_mean(entropies, share: float = TOP_SHARE) -> float:
    """Mean of the highest `share` of the values (at least one value)."""
    values = np.sort(np.asarray(entropies, dtype=float))[::-1]
    if len(values) == 0:
        return math.nan
    return float(values[: max(1, math.ceil(share * len(values)))].mean())


def nearest_candidate(value: float, candidates=CANDIDATES) -> float:
    """The candidate closest to `value`; on a tie, the smaller one."""
    return min(candidates, key=lambda c: (abs(c - value), c))


def collect_entropies(
    pair: ModelPair, problems: list[Problem], settings: DecodeSettings, batch_size: int = 1, progress: bool = True
) -> dict[str, list[float]]:
    """Per-token entropies of each model's own greedy text: the target's via SD, the draft's via draft-only;
    `batch_size` rows decoded together (a row decodes as it would alone, so the entropies do not depend on it)."""
    greedy = replace(settings, temperature=0.0)
    rows = [
        (model, Generation(pair, problem.prompt, replace(greedy, method=method), system=problem.system))
        for problem in problems
        for model, method in (("target", SD.name), ("draft", DRAFT.name))
    ]
    entropies = {"target": [], "draft": []}
    with tqdm(total=len(rows), desc="calibrating", unit="run", disable=not progress) as bar:
        for block in Batch(pair, [generation for _, generation in rows], max_rows=batch_size):
            bar.update(block.generation.done)
    for model, generation in rows:  # in the problems' order, whatever order the rows ended in
        entropies[model] += [r.h_target if model == "target" else r.h_draft for r in generation.trace.records]
    return entropies


def calibrate(entropies: dict[str, list[float]]) -> list[Calibration]:
    return [
        Calibration(model, len(values), raw := top_share_mean(values), nearest_candidate(raw))
        for model, values in entropies.items()
    ]


def write_calibration(out: Path, results: list[Calibration], entropies: dict[str, list[float]]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "calibration.json").write_text(json.dumps([asdict(r) for r in results], indent=1), encoding="utf-8")
    figures = []
    for result in results:
        figure = go.Figure(go.Histogram(x=entropies[result.model], nbinsx=80, name=result.model))
        cut = np.sort(entropies[result.model])[::-1][max(1, math.ceil(TOP_SHARE * result.tokens)) - 1]
        figure.add_vline(x=cut, line_dash="dot", annotation_text=f"top 5% from {cut:.2f}")
        figure.add_vline(
            x=result.raw, line_color="red", annotation_text=f"mean of top 5%: {result.raw:.2f} → τ_H {result.tau_h:g}"
        )
        figure.update_layout(
            title=f"{result.model}: entropy of {result.tokens} greedy tokens (nats)", yaxis_type="log", xaxis_title="nats"
        )
        figures.append(figure)
    write_html(out / "calibration.html", "τ_H calibration", figures)
