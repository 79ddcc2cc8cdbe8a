"""`python -m easd study`: one command that says whether a method (EASD unless --method) helped over SD on a pair and a
data file, at what speed, how robust that is to its grid's settings (EASD's τ_H and τ_O), where it intervenes, how
many problems it would take to tell, and what was assumed (easd.lab.study)."""

from __future__ import annotations

import argparse
import math
import sys
import time

from ..errors import SettingsError, shown
from ..method.methods import with_values
from .evaluate import folder_config
from .flags import (
    add_batch_flag,
    add_data_flags,
    add_decode_flags,
    add_grader_flag,
    add_grid_flags,
    add_model_flags,
    add_tau_h_flags,
    apply_budget,
    check_batch_size,
    folder,
    grid_flag,
    grid_of,
    load_models,
    problems,
    settings_from_args,
    tau_h_of,
)

HELP = "does EASD (or --method) help over SD on this pair? paired accuracy, speed, its grid, where it intervenes: one report"


def add(parser: argparse.ArgumentParser) -> None:
    from ..lab.study import EFFECT_POINTS, SPEED_REPEATS, studied

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
    titles = ", ".join(f"{name} ({method.title})" for name, method in studied().items())
    group.add_argument("--method", default="easd", help=f"the method compared with SD and target-only: {titles}")
    group.add_argument("--grid-limit", type=int, default=20, help="the first this many problems also run the method's grid")
    add_grid_flags(group, list(studied().values()), chooser="--method")
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
        "--effect",
        type=float,
        default=EFFECT_POINTS,
        help="the gain in accuracy points the report says how many problems it would take to detect (default: the EASD "
        "paper's average gain over the target alone with its Qwen2.5 7B → 32B pair, Table 1)",
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
    from ..lab.study import StudyPlan, analyse, check_study_folder, run_study, studied, write_report

    if not args.app_url.startswith(("http://", "https://")):
        raise SettingsError("--app-url", f"must be the app's address, starting http:// or https:// (got {args.app_url[:40]!r})")
    if not (math.isfinite(args.effect) and 0 < args.effect <= 100):
        raise SettingsError("--effect", f"must be a gain in accuracy points, more than 0 and at most 100 (got {args.effect:g})")
    if args.report_only:
        return _report(args, write_report, analyse)
    if args.method not in studied():
        raise SettingsError(
            "--method", f"must be one of {', '.join(studied())}: the methods a study compares with SD (got {shown(args.method)})"
        )
    if args.data is None:
        raise SettingsError("--data", "is needed to decode: a JSONL file of problems (or --report-only to redraw the report)")
    for option, least in (("grid_limit", 0), ("speed_limit", 0), ("speed_repeats", 1)):
        if getattr(args, option) < least:
            raise SettingsError(f"--{option.replace('_', '-')}", f"must be ≥ {least} (got {getattr(args, option)})")
    check_batch_size(args)
    chosen = problems(args)
    apply_budget(args)
    args.tau_h, source = tau_h_of(args)
    base = settings_from_args(args)  # the method compared with SD at its settings
    grid = grid_of(args, studied()[args.method], base)
    for setting, values in grid.items():
        for number in values:
            try:
                with_values(base, **{setting: number}).validate()
            except SettingsError as err:
                raise SettingsError(grid_flag(setting), err.message) from None
    plan = StudyPlan(
        chosen,
        base,
        min(args.grid_limit, len(chosen)),
        min(args.speed_limit, len(chosen)),
        {setting: tuple(values) for setting, values in grid.items()},
        args.batch_size,
        args.target_runs == "all",
        args.speed_repeats,
    )
    config = folder_config(args, "", base, 1)  # its pair once loaded
    config["tau_h_source"] = source
    config["study"] = {
        "method": args.method,
        "problems": len(chosen),
        "offset": args.offset,
        "grid": grid,
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
    plan.method.check(pair, base)  # before anything decodes: SpecGuard's attention on llama.cpp is one line
    try:
        run_study(pair, plan, args.out, config, args.resume)
    except KeyboardInterrupt:
        print(f"\ninterrupted: every finished problem is in {args.out}; rerun with --resume", file=sys.stderr)
        return 130
    print(f"decoding: {time.perf_counter() - started:.0f} s of wall time", file=sys.stderr)
    return _report(args, write_report, analyse)


def _report(args: argparse.Namespace, write_report, analyse) -> int:
    out = args.out
    study = analyse(out, args.app_url, args.effect)
    write_report(out, study)
    print((out / "study.md").read_text(encoding="utf-8"))
    print(f"report: {out / 'study.html'}")
    return 0
