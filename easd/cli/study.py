"""`python -m easd study`: one command that says whether EASD helped on a pair and a data file, at what speed, how
robust that is to τ_H and τ_O, where the penalty fires, and what was assumed (easd.lab.study)."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

from ..errors import SettingsError
from .evaluate import folder_config
from .flags import (
    add_batch_flag,
    add_data_flags,
    add_decode_flags,
    add_grader_flag,
    add_model_flags,
    add_tau_h_flags,
    apply_budget,
    check_batch_size,
    folder,
    load_models,
    numbers,
    problems,
    settings_from_args,
    tau_h_of,
)

HELP = "does EASD help on this pair? accuracy with paired statistics, speed, a τ_H × τ_O grid, where it fires: one report"


def add(parser: argparse.ArgumentParser) -> None:
    from ..lab.study import SPEED_REPEATS

    add_model_flags(parser)
    add_data_flags(parser, limit=100, required=False)  # --report-only reads --out alone
    add_grader_flag(parser)
    add_decode_flags(
        parser,
        budget_by_format=True,
        include=("k", "tau_o", "top_n", "temperature", "top_p", "max_new_tokens", "seed", "signals", "entropy"),
    )
    add_tau_h_flags(parser)
    group = parser.add_argument_group("the study")
    group.add_argument("--grid-limit", type=int, default=20, help="the first this many problems also run the τ_H × τ_O grid")
    group.add_argument("--tau-hs", default="1,1.5,2", help="τ_H values of the grid (the paper's)")
    group.add_argument("--tau-os", default="0.2,0.4,0.6,0.8,1.0", help="τ_O values of the grid (the paper's)")
    group.add_argument("--speed-limit", type=int, default=5, help="the first this many problems are timed one row at a time")
    group.add_argument(
        "--speed-repeats",
        type=int,
        default=SPEED_REPEATS,
        help="times each method is timed on them, in turns: the report gives the median and says when the repetitions "
        "differ enough to show a busy machine",
    )
    group.add_argument(
        "--target-runs",
        default="timed",
        choices=("timed", "all"),
        help="greedy: run target-only on the timed problems and read SD's text as its own elsewhere where all were equal "
        "(timed), or on every problem (all); sampled runs always run it on every problem",
    )
    group.add_argument(
        "--app-url", default="http://127.0.0.1:7860/", help="the app the report's links open (python app.py --eval-dir OUT)"
    )
    group.add_argument(
        "--out",
        type=folder,
        required=True,
        help="the study's folder (new, empty, or a study): results, traces, study.html, study.md",
    )
    group.add_argument("--resume", action="store_true", help="continue the study in --out")
    group.add_argument("--report-only", action="store_true", help="decode nothing: write the report from --out as it is")
    add_batch_flag(parser)


def run(args: argparse.Namespace) -> int:
    from ..lab.study import StudyPlan, analyse, check_study_folder, run_study, write_report

    if not args.app_url.startswith(("http://", "https://")):
        raise SettingsError("--app-url", f"must be the app's address, starting http:// or https:// (got {args.app_url[:40]!r})")
    if args.report_only:
        return _report(args.out, args.app_url, write_report, analyse)
    if args.data is None:
        raise SettingsError("--data", "is needed to decode: a JSONL file of problems (or --report-only to redraw the report)")
    for option, least in (("grid_limit", 0), ("speed_limit", 0), ("speed_repeats", 1)):
        if getattr(args, option) < least:
            raise SettingsError(f"--{option.replace('_', '-')}", f"must be ≥ {least} (got {getattr(args, option)})")
    check_batch_size(args)
    chosen = problems(args)
    apply_budget(args)
    args.tau_h, source = tau_h_of(args)
    base = replace(settings_from_args(args), method="easd")
    tau_hs, tau_os = numbers("--tau-hs", args.tau_hs), numbers("--tau-os", args.tau_os)
    for option, values, value in (("--tau-hs", tau_hs, "tau_h"), ("--tau-os", tau_os, "tau_o")):
        for number in values:
            try:
                replace(base, **{value: number}).validate()
            except SettingsError as err:
                raise SettingsError(option, err.message) from None
    plan = StudyPlan(
        chosen,
        base,
        min(args.grid_limit, len(chosen)),
        min(args.speed_limit, len(chosen)),
        tuple(tau_hs),
        tuple(tau_os),
        args.batch_size,
        args.target_runs == "all",
        args.speed_repeats,
    )
    config = folder_config(args, "", base, 1)  # its pair once loaded
    config["tau_h_source"] = source
    config["study"] = {
        "problems": len(chosen),
        "offset": args.offset,
        "tau_hs": list(tau_hs),
        "tau_os": list(tau_os),
        "grid_problems": [p.id for p in chosen[: plan.grid_limit]],
        "speed_problems": [p.id for p in chosen[: plan.speed_limit]],
        "speed_repeats": args.speed_repeats,
        "target_runs": args.target_runs,
        "batch_size": args.batch_size,
    }
    check_study_folder(args.out, config, args.resume)  # before the model loads: a bad --out costs no load
    started = time.perf_counter()
    pair = load_models(args)
    config["pair"] = pair.describe()
    try:
        run_study(pair, plan, args.out, config, args.resume)
    except KeyboardInterrupt:
        print(f"\ninterrupted: every finished problem is in {args.out}; rerun with --resume", file=sys.stderr)
        return 130
    print(f"decoding: {time.perf_counter() - started:.0f} s of wall time", file=sys.stderr)
    return _report(args.out, args.app_url, write_report, analyse)


def _report(out: Path, app_url: str, write_report, analyse) -> int:
    study = analyse(out, app_url)
    write_report(out, study)
    print((out / "study.md").read_text(encoding="utf-8"))
    print(f"report: {out / 'study.html'}")
    return 0
