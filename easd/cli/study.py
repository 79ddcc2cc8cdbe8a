"""`python -m easd study`: one command that says whether a method (EASD unless --method) helped over SD on a pair and a
data file, at what speed, how robust that is to its grid's settings (EASD's τ_H and τ_O), where it intervenes, how
many problems it would take to tell, and what was assumed (easd.lab.study)."""

from __future__ import annotations

import argparse
import math
import shlex
import sys
import time

from ..errors import SettingsError, shown
from ..method.methods import with_values
from ..method.references import PROPOSED, REFERENCE, SPEED_REFERENCE
from .evaluate import folder_config, runner
from .flags import (
    add_batch_flag,
    add_data_flags,
    add_decode_flags,
    add_grader_flag,
    add_grid_flags,
    add_model_flags,
    add_ray_flags,
    add_tau_h_flags,
    apply_budget,
    check_batch_size,
    check_ray_flags,
    folder,
    grid_flag,
    grid_of,
    model_args,
    problems,
    settings_from_args,
    tau_h_of,
)

HELP = "does EASD (or --method) help over SD on this pair? paired accuracy, speed, its grid, where it intervenes: one report"


def add(parser: argparse.ArgumentParser) -> None:
    from ..lab.study.plan import SPEED_REPEATS, studied

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
    group.add_argument("--method", default=PROPOSED, help=f"the method compared with SD and target-only: {titles}")
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
    add_report_flags(group)
    group.add_argument(
        "--out",
        type=folder,  # needed, but not required= here: `study merge` takes an --out of its own
        help="the study's folder (new, empty, or a study): results, traces, study.html, study.md",
    )
    group.add_argument("--resume", action="store_true", help="continue the study in --out")
    group.add_argument("--report-only", action="store_true", help="decode nothing: write the report from --out as it is")
    group.add_argument(
        "--shard",
        metavar="I/N",
        help="decode the I-th of N shares of the problems (by a hash of each id) into --out, one share a machine; "
        "`study merge` joins the N folders",
    )
    add_batch_flag(parser)
    add_ray_flags(parser)
    merge = parser.add_subparsers(title="more than one machine", dest="study_command", parser_class=type(parser))
    merging = merge.add_parser(
        "merge",
        help="join the folders of `study --shard I/N` into one study and its report",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    merging.add_argument("shards", nargs="+", type=folder, metavar="SHARD", help="the folder of every shard of one study")
    merging.add_argument("--out", type=folder, required=True, help="the merged study's folder: new or empty")
    add_report_flags(merging)
    merging.set_defaults(run=run_merge)


def add_report_flags(group) -> None:
    """What the report says beside the folder's figures: the gain it sizes the study for, and the app its links open."""
    from ..lab.reports.stats import EFFECT_POINTS

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


def check_report_flags(args: argparse.Namespace) -> None:
    if not args.app_url.startswith(("http://", "https://")):
        raise SettingsError("--app-url", f"must be the app's address, starting http:// or https:// (got {args.app_url[:40]!r})")
    if not (math.isfinite(args.effect) and 0 < args.effect <= 100):
        raise SettingsError("--effect", f"must be a gain in accuracy points, more than 0 and at most 100 (got {args.effect:g})")


def run(args: argparse.Namespace) -> int:
    from ..lab.runs.protocol import protocol_for, under
    from ..lab.runs.results_table import versions
    from ..lab.shards.recorded import recorded_files
    from ..lab.shards.split import parse_shard, shard_of
    from ..lab.study.findings import analyse
    from ..lab.study.plan import StudyPlan, check_study_folder, run_study, studied
    from ..lab.study.report import write_report

    check_report_flags(args)
    if args.out is None:
        raise SettingsError("--out", "is needed: the study's folder (new, empty, or a study's)")
    if args.report_only:
        _report(args, write_report, analyse)
        return 0
    if args.method not in studied():
        raise SettingsError(
            "--method", f"must be one of {', '.join(studied())}: the methods a study compares with SD (got {shown(args.method)})"
        )
    if args.data is None:
        raise SettingsError("--data", "is needed to decode: a JSONL file of problems (or --report-only to redraw the report)")
    shard = parse_shard(args.shard) if args.shard is not None else None
    for option, least in (("grid_limit", 0), ("speed_limit", 0), ("speed_repeats", 1)):
        if getattr(args, option) < least:
            raise SettingsError(f"--{option.replace('_', '-')}", f"must be ≥ {least} (got {getattr(args, option)})")
    check_batch_size(args)
    check_ray_flags(args)
    chosen = problems(args)
    apply_budget(args)
    args.tau_h, source = tau_h_of(args)
    base = settings_from_args(args)  # the method compared with SD at its settings
    protocol = protocol_for([REFERENCE, args.method, SPEED_REFERENCE], base)  # SD and target-only: the study's references
    base = under(protocol, base)
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
    config["protocol"] = protocol.as_dict()
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
    if shard is not None:  # this machine's share of the whole plan
        plan, config = shard_of(plan, config, *shard)
    model = model_args(args)
    # what `study merge` compares, beside the settings: the files by their hashes, and the versions that decode
    config |= {"files": recorded_files(args.data, model.pair, model.draft, model.target), "versions": versions()}
    check_study_folder(args.out, config, args.resume)  # before the model loads: a bad --out costs no load
    print(protocol.line(), file=sys.stderr)  # after every check: a refusal stays one line
    started = time.perf_counter()
    try:
        with runner(args, len(plan.problems)) as (decoder, description):  # the pair here, or Ray actors (--ray)
            config["pair"] = description
            if hasattr(decoder, "pair"):  # before anything decodes: SpecGuard's attention on llama.cpp is one line
                plan.method.check(decoder.pair, base)  # (Ray's actors check as their first problem starts)
            run_study(decoder, plan, args.out, config, args.resume)
    except KeyboardInterrupt:
        print(f"\ninterrupted: every finished problem is in {args.out}; rerun with --resume", file=sys.stderr)
        return 130
    print(f"decoding: {time.perf_counter() - started:.0f} s of wall time", file=sys.stderr)
    _report(args, write_report, analyse)
    return 0


def run_merge(args: argparse.Namespace) -> int:
    """`study merge SHARD... --out DIR`: one study folder and one report from the shards' folders."""
    from ..lab.shards.merge import merge_shards, target_note
    from ..lab.study.findings import analyse
    from ..lab.study.report import write_report

    check_report_flags(args)
    merge_shards(args.shards, args.out, "python -m easd " + shlex.join(sys.argv[1:]))
    note = target_note(_report(args, write_report, analyse))
    if note:
        print(note, file=sys.stderr)
    return 0


def _report(args: argparse.Namespace, write_report, analyse) -> dict:
    """The report written from --out's folder alone, its tables printed; its figures."""
    out = args.out
    study = analyse(out, args.app_url, args.effect)
    write_report(out, study)
    print((out / "study.md").read_text(encoding="utf-8"))
    print(f"report: {out / 'study.html'}")
    return study
