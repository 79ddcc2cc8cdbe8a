"""`python -m easd acceptance`: where SD accepts, by task: acceptance by Spec-Bench category and by the four task
domains of the seed study (code, mathematical reasoning, logical reasoning, open-ended chat), by draft position,
against both models' entropy, and how often EASD's penalty would fire (docs/evaluation.md, "acceptance").

SD runs greedily (unless --temperature) on the first N questions of each category, turn by turn as Spec-Bench runs
them (easd.lab.speed.specbench), and every figure is counted from the runs' traces. One folder:

    run.json       what the run was made with; --resume refuses a folder made with other models, data or settings
    questions/     one trace file per question (a run per turn), written whole when the question is done: a kill
                   loses at most the question in flight, and --resume decodes only the questions without a file
    figures.json   every figure of the report, for scripts
    report.md      the report's tables as markdown (docs/ quotes them)
    report.html    the report as one file that opens offline (easd.render.dynamics)

The unit of the per-position figures is an examined position: a drafted token the standard test judged, accepted or
not (easd.method.spec_metrics.verified_drafts). A position behind a rejection in the same draft was never judged
and is not counted; the drafts' totals are vLLM's (easd.method.spec_metrics).
"""

from __future__ import annotations

import json
import math
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ...errors import EasdError, SettingsError
from ...files import claim_folder, file_stem, write_text_whole
from ...method.origins import DRAFT_ACCEPTED
from ...method.pair import ModelPair
from ...method.settings import DecodeSettings
from ...method.spec_metrics import SpecMetrics, verified_drafts
from ...method.trace import Trace
from ...traces import files as trace_io
from ..reports.stats import cluster_bootstrap, spearman
from ..runs.results_table import check_config, read_config, versions
from ..speed.specbench import Question, decode_turns

# The seed study's four domains, each from the Spec-Bench categories that ask for that kind of work. MT-bench's
# coding, math and reasoning questions are code, mathematics and logic puzzles; math_reasoning is GSM8K; writing and
# roleplay are open-ended conversation. Left out (their own rows only): stem and humanities (explaining knowledge),
# extraction, translation, summarization, qa and rag (answers bound to a given text or a fact).
DOMAINS = {
    "code": ("coding",),
    "mathematical reasoning": ("math", "math_reasoning"),
    "logical reasoning": ("reasoning",),
    "open-ended chat": ("writing", "roleplay"),
}
RESUME_KEYS = ("models", "data", "settings")  # what must match for --resume to add to a folder
# what the report reads from run.json: one without any of them is cut short or not an acceptance run's
RUN_NEEDS = (
    *RESUME_KEYS,
    *("per_category", "command"),
    *(f"settings.{key}" for key in ("k", "temperature", "top_p", "seed", "max_new_tokens", "rule", "tau_h", "tau_o", "top_n")),
)
BOOTSTRAP_SAMPLES = 2_000  # resamples of questions per interval: its ends moved by under 0.005 between seeds (simulated)
INFO = "spec_bench_"  # the prefix of the keys a question's traces carry in their `info`: question, category, line, turn


@dataclass
class Answered:
    """One question's SD runs, a trace per turn, as its file holds them."""

    question_id: int | str
    category: str
    line: int  # its line in the question file: the report's order
    traces: list[Trace]


# --- the run --------------------------------------------------------------------------------------


def question_file(out: Path, question_id: int | str) -> Path:
    """The file under --out/questions/ that holds a question's runs (named by easd.files.file_stem: one file an id,
    whatever it holds)."""
    return out / "questions" / f"{file_stem(str(question_id))}.json"


def check_folder(out: Path, config: dict, resume: bool) -> None:
    """Refuse, before any model loads, an --out this run cannot have: one it cannot make or write in, a folder of
    other files (easd.files.claim_folder), one whose questions/ holds what no run leaves there, one that holds a run
    unless --resume, and one made otherwise."""
    claim_folder(out, "--out", "acceptance run", lambda folder: (folder / "questions").exists() or _holds_a_run(folder))
    saved, done = read_run(out), question_files(out)  # first: a run.json cut short is named as such
    if (saved is not None or done) and not resume:
        raise SettingsError("--out", f"{out} already holds a run; add --resume to continue it, or choose another folder")
    if saved is None:
        return
    plain = json.loads(json.dumps(config))  # as run.json reads back
    different = [key for key in RESUME_KEYS if saved.get(key) != plain.get(key)]
    if different:
        raise SettingsError("--resume", f"{out} was run with other {', '.join(different)}; choose another --out")


def read_run(out: Path) -> dict | None:
    """The run.json of an acceptance run's folder, None where there is none; one cut short, not JSON, or without what
    the report reads is one line that names it (easd.lab.runs.results_table.unreadable), for --resume and the report alike."""
    config = read_config(out)
    if config is not None:
        check_config(out, config, RUN_NEEDS)
    return config


def _holds_a_run(out: Path) -> bool:
    try:
        return read_run(out) is not None
    except EasdError:  # a run.json not ours: the folder is someone else's
        return False


def question_files(out: Path) -> list[Path]:
    """The question files of --out (none where questions/ is missing); one line for what no run leaves there:
    questions/ that is not a folder, or a .json in it that is not a file (a folder, a pipe), which would be read."""
    folder = out / "questions"
    if not folder.exists():
        return []
    if not folder.is_dir():
        raise SettingsError("--out", f"{folder} is not a folder of question files; move it away, or choose another --out")
    paths = sorted(folder.glob("*.json"))
    for path in paths:
        if not path.is_file():
            raise SettingsError("--out", f"{path} is not a question's file (a folder, pipe or device); move it out of questions/")
    return paths


def command_line() -> str:
    return "python -m easd " + shlex.join(sys.argv[1:])  # argv[0] is easd/__main__.py's path


def run_questions(
    pair: ModelPair, questions: list[Question], settings: DecodeSettings, out: Path, config: dict, progress: bool = True
) -> None:
    """SD on every question that has no file yet, turn by turn; each question's file is written whole when it is done."""
    folder = out / "questions"
    folder.mkdir(parents=True, exist_ok=True)
    for leftover in folder.glob(".*.tmp-*"):  # a file a kill interrupted: its question is decoded again
        leftover.unlink()
    write_text_whole(out / "run.json", json.dumps(config, indent=1, ensure_ascii=False))
    missing = round_robin([q for q in questions if not question_file(out, q.question_id).exists()])
    if progress and len(missing) < len(questions):
        print(f"resuming: {len(questions) - len(missing)} of {len(questions)} questions already done", file=sys.stderr)
    for number, question in enumerate(missing, 1):
        traces = []
        for turn, (_, trace) in enumerate(decode_turns(pair, question, settings, "--data"), 1):
            trace.info |= {
                f"{INFO}question": question.question_id,
                f"{INFO}category": question.category,
                f"{INFO}line": question.line,
                f"{INFO}turn": turn,
            }
            traces.append(trace)
        trace_io.write_json(traces, question_file(out, question.question_id))
        if progress:
            tokens = sum(len(t.records) for t in traces)
            print(f"  question {number}/{len(missing)} ({question.category}) done: {tokens} tokens", file=sys.stderr, flush=True)


def round_robin(questions: list[Question]) -> list[Question]:
    """The questions a category at a time in turn (each category's in file order), so that a run stopped early has as
    many of every category as it could, not all of the first ones and none of the last."""
    by_category: dict[str, list[Question]] = {}
    for question in questions:
        by_category.setdefault(question.category, []).append(question)
    rounds = max((len(group) for group in by_category.values()), default=0)
    return [group[i] for i in range(rounds) for group in by_category.values() if i < len(group)]


# --- reading the folder ---------------------------------------------------------------------------


def read_answers(out: Path) -> list[Answered]:
    """Every question's runs in the folder, in the question file's order."""
    found = []
    for path in question_files(out):
        traces = trace_io.read_json(path, capped=False)
        info = traces[0].info if traces else {}
        try:
            found.append(Answered(info[f"{INFO}question"], info[f"{INFO}category"], int(info[f"{INFO}line"]), traces))
        except (KeyError, TypeError, ValueError):
            raise EasdError(f"{path}: not a question's runs of `python -m easd acceptance`; move it out of questions/") from None
    return sorted(found, key=lambda a: a.line)


def observations(traces: list[Trace]) -> pd.DataFrame:
    """One row per examined position of these runs: its place in its draft (1..k), whether it was accepted, the
    draft's and the target's entropy there, and whether EASD's rule fired there (`triggered`, recorded in SD's runs)."""
    drafts = [judged for trace in traces for _, _, judged in verified_drafts(trace)]
    rows = [
        (draft, place, record.origin == DRAFT_ACCEPTED.name, record.h_draft, record.h_target, bool(record.triggered))
        for draft, judged in enumerate(drafts)
        for place, record in enumerate(judged, 1)
    ]
    columns = ["draft", "position", "accepted", "h_draft", "h_target", "triggered"]
    return pd.DataFrame(rows, columns=columns).astype({"h_draft": float, "h_target": float})


def analyse(out: Path) -> dict:
    """Every figure of the report, from the folder alone (a resumed or copied folder reads the same)."""
    config = read_run(out)
    if config is None or not (out / "questions").exists():  # questions/ as a file: named by read_answers
        raise SettingsError("--out", f"{out} holds no acceptance run: run `python -m easd acceptance` with this --out first")
    answers = read_answers(out)
    seen = {a.question_id: observations(a.traces) for a in answers}
    categories = list(dict.fromkeys(a.category for a in answers))
    domain_of = {category: domain for domain, members in DOMAINS.items() for category in members}
    category_rows = [
        {"domain": domain_of.get(c)} | group_figures(c, [a for a in answers if a.category == c], seen) for c in categories
    ]
    domain_rows = [
        {"categories": [c for c in members if c in categories]}
        | group_figures(domain, [a for a in answers if a.category in members], seen)
        for domain, members in DOMAINS.items()
        if set(members) & set(categories)
    ]
    found = {
        "folder": str(out),
        "config": config,
        "domains_map": {domain: list(members) for domain, members in DOMAINS.items()},
        "categories": category_rows,
        "domains": domain_rows,
        "overall": group_figures("overall", answers, seen),
        "decoding_seconds": sum(t.stats.seconds or 0.0 for a in answers for t in a.traces),
        "versions": versions(),
    }
    return found | {"findings": findings(found), "assumptions": assumptions(found)}


def group_figures(name: str, answers: list[Answered], seen: dict[int | str, pd.DataFrame]) -> dict:
    """A group's figures (a category, a domain, or all): the drafts' totals in vLLM's terms, acceptance by position,
    Spearman's ρ between acceptance and each model's entropy with a 95% interval over resampled questions, and how
    often EASD's rule fires and its penalty would."""
    traces = [t for a in answers for t in a.traces]
    metrics = SpecMetrics.of(traces)
    frames = [seen[a.question_id] for a in answers]
    table = pd.concat(frames, ignore_index=True) if frames else observations([])
    tokens = sum(len(t.records) for t in traces)
    # kept by the standard test, refused by the rule: EASD's block ends at the first, so one a draft at most (a
    # question's drafts are numbered apart from another's, so the count is of (question, draft) pairs)
    fired = [frame[frame["accepted"] & frame["triggered"]]["draft"].nunique() for frame in frames]
    penalties = int(sum(fired))
    return {
        "name": name,
        "questions": len(answers),
        "turns": len(traces),
        "tokens": tokens,
        "num_drafts": metrics.num_drafts,
        "num_draft_tokens": metrics.num_draft_tokens,
        "num_accepted_tokens": metrics.num_accepted_tokens,
        "mean_acceptance_length": metrics.mean_acceptance_length,
        "draft_acceptance_rate": metrics.draft_acceptance_rate,
        "examined": len(table),
        "examined_acceptance": _share(table["accepted"].sum(), len(table)),
        "reached_per_position": metrics.reached_per_position,
        "conditional_acceptance": metrics.conditional_acceptance,
        "acceptance_per_position": metrics.acceptance_per_position,
        "h_draft_mean": _mean(table["h_draft"]),
        "h_target_mean": _mean(table["h_target"]),
        "rho_draft": rank_correlation(frames, "h_draft"),
        "rho_target": rank_correlation(frames, "h_target"),
        "rule_fires": int(table["triggered"].sum()),
        "rule_share": _share(table["triggered"].sum(), len(table)),
        "penalties": penalties,
        "penalty_share": _share(penalties, len(table)),
        "penalties_per_1k": _share(1000 * penalties, tokens),
    }


def rank_correlation(frames: list[pd.DataFrame], column: str) -> dict:
    """Spearman's ρ between acceptance (1 or 0) and `column` over every examined position of these questions, and its
    95% interval from resampling whole questions (a question's positions are dependent, so they are drawn together;
    none from a single question)."""
    clusters = []
    for frame in frames:
        kept = frame[frame[column].notna()]
        clusters.append((kept["accepted"].to_numpy(dtype=float), kept[column].to_numpy(dtype=float)))
    if not clusters:
        return {"rho": None, "low": None, "high": None}
    rho = spearman(*(np.concatenate([c[i] for c in clusters]) for i in (0, 1)))
    low, high = math.nan, math.nan
    if not math.isnan(rho) and len(clusters) > 1:  # one question resamples to itself: no interval
        low, high = cluster_bootstrap(spearman, clusters, BOOTSTRAP_SAMPLES)
    return {"rho": _number(rho), "low": _number(low), "high": _number(high)}


def _number(value: float) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


def _share(part, whole) -> float | None:
    return float(part) / whole if whole else None


def _mean(column: pd.Series) -> float | None:
    return _number(column.mean()) if column.notna().any() else None


# --- what the figures say -------------------------------------------------------------------------


def findings(found: dict) -> list[str]:
    """The seed study's three findings, each put to these runs in one sentence of figures (no verdict is drawn)."""
    domains, overall = found["domains"], found["overall"]
    if not domains or not overall["examined"]:
        return ["No question of the four domains has a verified draft yet."]
    by_domain = {d["name"]: d for d in domains}
    spread = _range({name: d["examined_acceptance"] for name, d in by_domain.items()})
    positions = _range({f"position {i + 1}": rate for i, rate in enumerate(overall["conditional_acceptance"])})
    per_draft = {name: d["mean_acceptance_length"] - 1 for name, d in by_domain.items() if d["mean_acceptance_length"]}
    above = [name for name, value in per_draft.items() if value > 1]
    lines = [
        f"Task type and position: the share of examined positions accepted spans {spread} across the domains, and "
        f"the conditional acceptance {positions} across draft positions (all questions).",
        "Accepted tokens per draft (mean acceptance length − 1): "
        + ", ".join(f"{name} {value:.2f}" for name, value in per_draft.items())
        + f"; above 1.0 in {len(above)} of {len(per_draft)} domains.",
    ]
    for side, label in (("rho_draft", "the draft's"), ("rho_target", "the target's")):
        rhos = {name: d[side]["rho"] for name, d in by_domain.items() if d[side]["rho"] is not None}
        below = sum(1 for d in domains if d[side]["high"] is not None and d[side]["high"] < 0)
        if rhos:
            lines.append(
                f"Spearman ρ between acceptance and {label} entropy per domain: {_range(rhos, '{:+.2f}')}; its 95% "
                f"interval lies below 0 in {below} of {len(domains)} domains."
            )
    return lines


def _range(values: dict[str, float | None], form: str = "{:.3f}") -> str:
    """The lowest and the highest of the values that exist, each with its name: "from 0.51 (math) to 0.57 (chat)"."""
    known = {name: value for name, value in values.items() if value is not None}
    if not known:
        return "nothing yet"
    low, high = min(known, key=known.get), max(known, key=known.get)
    return f"from {form.format(known[low])} ({low}) to {form.format(known[high])} ({high})"


def assumptions(found: dict) -> list[str]:
    """Everything a reader needs to rerun the report's runs from the report alone."""
    config, settings = found["config"], found["config"]["settings"]
    mapped = "; ".join(f"{domain}: {', '.join(members)}" for domain, members in found["domains_map"].items())
    skipped = config.get("skipped") or []
    return [
        f"pair: {config.get('pair', 'not recorded')}",
        f"data: {config['data']}, the first {config['per_category']} questions of each category in file order, every "
        f"turn of each (the second turn's prompt holds the first turn's answer)"
        + (f"; left out as too long for the context: {', '.join(map(str, skipped))}" if skipped else ""),
        f"method: SD, k = {settings['k']}, temperature {settings['temperature']:g}"
        + (f", top-p {settings['top_p']:g}, seed {settings['seed']}" if settings["temperature"] else " (greedy)")
        + f", at most {settings['max_new_tokens']:,} new tokens per turn",
        f"EASD's rule, recorded at every examined position of SD's runs: {settings['rule']}, τ_H = {settings['tau_h']:g} "
        f"({config.get('tau_h_source', 'not recorded')}), τ_O = {settings['tau_o']:g}, n = {settings['top_n']}; H of "
        f"{'the sampling distribution' if settings.get('entropy') == 'sampling' else 'the models at temperature 1'}, in nats",
        f"domains (the seed study's four, from Spec-Bench's categories): {mapped}; other categories have their own rows only",
        f"ρ: Spearman's, over examined positions, acceptance as 1 or 0 (ties at their mean rank); 95% intervals are "
        f"percentiles of {BOOTSTRAP_SAMPLES:,} resamples of whole questions",
        f"decoding time: {found['decoding_seconds']:,.0f} s, the runs' own wall time summed (model loading and the "
        "report not included)",
        f"command: {config['command']}",
        "versions: " + ", ".join(f"{k} {v}" for k, v in found["versions"].items()),
    ]


# --- the report -----------------------------------------------------------------------------------


def write_report(out: Path, found: dict) -> None:
    """figures.json, report.md and report.html, from `analyse`'s figures."""
    from ...render.dynamics import dynamics_file, markdown

    write_text_whole(out / "figures.json", json.dumps(found, indent=1, ensure_ascii=False))
    write_text_whole(out / "report.md", markdown(found))
    write_text_whole(out / "report.html", dynamics_file(found), errors="replace")
