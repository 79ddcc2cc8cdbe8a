"""`python -m easd eval` and `sweep`: accuracy, speed and intervention rate on reasoning problems.

Each problem is decoded by every requested variant (method, rule, thresholds), once per sample.
EASD variants reuse the SD run of the same problem and seed up to their first penalty
(`easd.prefix`), so the shared prefix is decoded once. Rows go to `results.csv` as soon as a
problem is done, so a crash, Ctrl-C or kill loses at most the problem in flight, and `--resume`
picks up where it stopped. `summary.csv`, `paired.csv` and `report.html` are rewritten at the end.
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

from tqdm import tqdm

from ..core import trace as trace_io
from ..core.decoding import Generation
from ..errors import EasdError
from ..core.pair import ModelPair
from ..core.prefix import easd_after_sd
from .problems import Problem, extract_answer, is_correct
from ..core.settings import RULES, DecodeSettings
from ..core.trace import Trace

RESULT_COLUMNS = [
    "problem_id",
    "method",
    "sample",
    "seed",
    "prediction",
    "extraction",
    "gold",
    "correct",
    "new_tokens",
    "seconds",
    "tokens_per_s",
    "acceptance_rate",
    "accepted",
    "examined",
    "penalized",
    "first_penalty_position",
    "target_calls",
    "draft_calls",
    "stop_reason",
    "saved_seconds",
    "tau_h",
    "tau_o",
    "text",
]
# What must match for --resume to add to an output folder (methods and --limit may grow).
RESUME_KEYS = ("pair", "data", "format", "shuffle", "samples", "settings")


@dataclass(frozen=True)
class Variant:
    label: str  # how results name it: sd, easd, easd:no_overlap, easd@1.5/0.6 …
    settings: DecodeSettings


def parse_methods(text: str, base: DecodeSettings) -> list[Variant]:
    """`target,draft,sd,easd,easd:no_overlap` → variants; SD first, so EASD variants can reuse it."""
    variants = []
    for label in [part.strip() for part in text.split(",") if part.strip()]:
        method, _, rule = label.partition(":")
        if method not in ("target", "draft", "sd", "easd") or (rule and (method != "easd" or rule not in RULES)):
            raise EasdError(f"--methods: {label!r} is not one of target, draft, sd, easd, easd:RULE (RULE: {', '.join(RULES)})")
        variants.append(Variant(label, replace(base, method=method, rule=rule or base.rule)))
    if not variants:
        raise EasdError("--methods: give at least one method, e.g. sd,easd")
    return sorted(variants, key=lambda v: v.settings.method != "sd")


def grid_variants(base: DecodeSettings, tau_hs: list[float], tau_os: list[float]) -> list[Variant]:
    """SD plus EASD at every (τ_H, τ_O), for `sweep`."""
    grid = [Variant(f"easd@{h:g}/{o:g}", replace(base, method="easd", tau_h=h, tau_o=o)) for h in tau_hs for o in tau_os]
    return [Variant("sd", replace(base, method="sd")), *grid]


# --- one problem --------------------------------------------------------------------------------


def run_problem(pair: ModelPair, problem: Problem, variants: list[Variant], sample: int, traces_dir: Path | None) -> list[dict]:
    """Every variant on one problem with one seed; EASD variants build on the SD run when there is one."""
    rows, sd = [], None
    for variant in variants:
        settings = replace(variant.settings, seed=variant.settings.seed + sample)
        if settings.method == "easd" and sd is not None:
            shared = easd_after_sd(sd, settings)
            trace, saved = shared.trace, shared.saved_seconds
        else:
            generation = Generation(pair, problem.prompt, settings)
            trace, saved = generation.run(), 0.0
            sd = generation if settings.method == "sd" else sd
        rows.append(result_row(problem, variant.label, sample, trace, saved))
        if traces_dir is not None:
            trace_io.write_json(
                [trace], traces_dir / f"{problem.id}-{variant.label.replace(':', '_').replace('/', '_')}-s{sample}.json"
            )
    return rows


def result_row(problem: Problem, label: str, sample: int, trace: Trace, saved_seconds: float) -> dict:
    text = trace.text  # joined from every record: build it once
    prediction, rule = extract_answer(text)
    summary = trace.summary()
    examined = sum(r.draft_token_id is not None for r in trace.records)
    return {
        "problem_id": problem.id,
        "method": label,
        "sample": sample,
        "seed": trace.settings.seed,
        "prediction": "" if prediction is None else prediction,
        "extraction": rule,
        "gold": problem.gold,
        "correct": is_correct(prediction, problem.gold, problem.format),
        "new_tokens": summary["new_tokens"],
        "seconds": round(summary["seconds"] or 0.0, 4),
        "tokens_per_s": round(summary["tokens_per_s"] or 0.0, 4),
        "acceptance_rate": summary["acceptance_rate"],
        "accepted": sum(r.origin == "draft_accepted" for r in trace.records),
        "examined": examined,
        "penalized": summary["penalized"],
        "first_penalty_position": summary["first_penalty_position"],
        "target_calls": summary["target_calls"],
        "draft_calls": summary["draft_calls"],
        "stop_reason": summary["stop_reason"],
        "saved_seconds": round(saved_seconds, 4),
        "tau_h": trace.settings.tau_h,
        "tau_o": trace.settings.tau_o,
        "text": text,
    }


# --- the output folder --------------------------------------------------------------------------


class ResultsFile:
    """results.csv, appended one problem at a time and fsynced, so a kill loses at most one problem."""

    def __init__(self, folder: Path):
        self.path = folder / "results.csv"

    def read(self) -> list[dict]:
        """Rows written so far; a half-written last line from a killed run is dropped (and the file repaired)."""
        if not self.path.exists():
            return []
        with self.path.open(newline="", encoding="utf-8") as handle:
            lines = list(csv.reader(handle))
        if not lines or lines[0] != RESULT_COLUMNS:
            raise EasdError(f"{self.path} is not a results file of this version; choose another --out")
        rows = [dict(zip(RESULT_COLUMNS, line)) for line in lines[1:] if len(line) == len(RESULT_COLUMNS)]
        if len(rows) != len(lines) - 1:
            self._rewrite(rows)
        return rows

    def append(self, rows: list[dict]) -> None:
        new = not self.path.exists()
        with self.path.open("a", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, RESULT_COLUMNS, lineterminator="\r\n")
            if new:
                writer.writeheader()
            writer.writerows(rows)
            handle.flush()
            os.fsync(handle.fileno())

    def _rewrite(self, rows: list[dict]) -> None:
        partial = self.path.with_suffix(".csv.tmp")
        with partial.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, RESULT_COLUMNS, lineterminator="\r\n")
            writer.writeheader()
            writer.writerows(rows)
        os.replace(partial, self.path)


def prepare_folder(out: Path, config: dict, resume: bool) -> ResultsFile:
    """Create or reopen the output folder; refuse to mix results of different settings."""
    results = ResultsFile(out)
    config_path = out / "run.json"
    if results.path.exists() and not resume:
        raise EasdError(f"--out: {out} already holds results; add --resume to continue them, or choose another folder")
    if resume and config_path.exists():
        saved = json.loads(config_path.read_text(encoding="utf-8"))
        different = [key for key in RESUME_KEYS if saved.get(key) != config.get(key)]
        if different:
            raise EasdError(f"--resume: {out} was run with other {', '.join(different)}; choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    config_path.write_text(json.dumps(config, indent=1, ensure_ascii=False), encoding="utf-8")
    return results


# --- the whole run ------------------------------------------------------------------------------


def run_evaluation(
    pair: ModelPair,
    problems: list[Problem],
    variants: list[Variant],
    samples: int,
    out: Path,
    config: dict,
    resume: bool = False,
    keep_traces: bool = False,
    progress: bool = True,
) -> list[dict]:
    """Decode every (problem, sample) not done yet, appending its rows; returns all rows."""
    results = prepare_folder(out, config, resume)
    done = {(r["problem_id"], r["method"], int(r["sample"])) for r in results.read()}
    traces_dir = out / "traces" if keep_traces else None
    if traces_dir:
        traces_dir.mkdir(exist_ok=True)
    work = [(p, s) for p in problems for s in range(samples)]
    with tqdm(total=len(work), desc="problems", unit="problem", disable=not progress, dynamic_ncols=True) as bar:
        for problem, sample in work:
            missing = [v for v in variants if (problem.id, v.label, sample) not in done]
            if missing:
                new_rows = run_problem(pair, problem, missing, sample, traces_dir)
                results.append(new_rows)
            bar.update()
    return results.read()
