"""`python -m easd eval`: accuracy, speed and intervention rate of methods on the same problems, with paired
statistics; decoded here, or on Ray actors (--ray). `sweep` runs through the same `runner`."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from ..errors import SettingsError
from ..method.methods import METHODS, settings_values
from ..method.settings import DecodeSettings
from .flags import (
    add_batch_flag,
    add_data_flags,
    add_decode_flags,
    add_grader_flag,
    add_model_flags,
    add_ray_flags,
    add_tau_h_flags,
    apply_budget,
    check_batch_size,
    check_prm_flag,
    check_ray_flags,
    load_models,
    model_args,
    print_tables,
    problems,
    settings_from_args,
    tau_h_of,
)

HELP = "accuracy, speed and intervention rate of methods on reasoning problems"
NAME = "eval"
INT8_BATCH_NOTE = (
    "note: the int8 draft quantizes each pass's activations with one scale for all its rows, so with --batch-size > 1 "
    "the draft's entropies and top-n (and so EASD's decisions) depend on the batch; SD's text does not. "
    "Use --batch-size 1 or no --int8 where EASD's decisions must be reproducible"
)


def add(parser: argparse.ArgumentParser) -> None:
    add_model_flags(parser)
    add_data_flags(parser, limit=None, required=False)  # needed, but not required= here: `eval merge` decodes nothing
    add_grader_flag(parser)
    decoding = (
        "k",
        "tau_o",
        "top_n",
        "temperature",
        "top_p",
        "max_new_tokens",
        "seed",
        "signals",
        "entropy",
    )  # and each method's own
    add_decode_flags(parser, include=decoding, budget_by_format=True)
    add_tau_h_flags(parser)
    parser.add_argument(
        "--methods", default="sd,easd", help=f"comma-separated: {', '.join(METHODS)}; easd:RULE for an ablation, beam:N[/α]"
    )
    parser.add_argument("--samples", type=int, default=1, help="runs per problem, with seeds seed, seed+1, …")
    parser.add_argument(
        "--out", type=Path, help="output folder: results.csv, summary.csv, paired.csv, paper.md, report.html (needed)"
    )
    parser.add_argument("--resume", action="store_true", help="continue the results in --out")
    parser.add_argument("--traces", action="store_true", help="also save every run's trace as JSON under --out/traces")
    parser.add_argument(
        "--check-reproducible", type=int, default=0, metavar="N", help="rerun EASD on N problems in another order"
    )
    parser.add_argument(
        "--shard",
        metavar="I/N",
        help="decode the I-th of N shares of the problems (by a hash of each id) into --out, one share a machine or a "
        "session; `eval merge` joins the N folders",
    )
    add_batch_flag(parser)
    add_ray_flags(parser)
    merge = parser.add_subparsers(title="more than one machine", dest="eval_command", parser_class=type(parser))
    merging = merge.add_parser(
        "merge",
        help="join the folders of `eval --shard I/N` into one evaluation and its tables",
        description="Join the folders of `eval --shard I/N` into one evaluation: every row of every shard accounted for "
        "against the plan, then the tables and report one machine would have written.",
    )
    merging.add_argument("shards", nargs="+", type=Path, metavar="SHARD", help="the folder of every shard of one evaluation")
    merging.add_argument("--out", type=Path, required=True, help="the merged evaluation's folder: new or empty")
    merging.set_defaults(run=run_merge)


def run(args: argparse.Namespace) -> int:
    from ..lab.runs.evaluate import parse_methods, run_evaluation
    from ..lab.runs.protocol import protocol_for, under
    from ..lab.shards.split import parse_shard

    if args.data is None:
        raise SettingsError("--data", "is needed: a JSONL file of problems")
    if args.out is None:
        raise SettingsError("--out", "is needed: the output folder (new, empty, or an evaluation's with --resume)")
    shard = parse_shard(args.shard) if args.shard is not None else None
    chosen = problems(args)
    apply_budget(args)
    args.tau_h, tau_h_source = tau_h_of(args)
    base = settings_from_args(args)
    variants = parse_methods(args.methods, base)
    check_prm_flag(args, [v.settings.method for v in variants])
    protocol = protocol_for([v.settings.method for v in variants], base)  # one sampling setting for every method
    variants = [replace(v, settings=under(protocol, v.settings)) for v in variants]
    base = replace(base, temperature=protocol.temperature, top_p=protocol.top_p)
    if args.samples < 1:
        raise SettingsError("--samples", f"must be ≥ 1 (got {args.samples})")
    check_batch_size(args)
    checked = _check_reproducible_flag(args, variants)
    planned = {}
    if shard is not None:  # this machine's share of the problems, and what `eval merge` compares and accounts by
        chosen, planned = shard_plan(args, chosen, variants, shard)
    if args.resume:
        check_shard_resumed(args.out, planned.get("plan", {}).get("shard"))
    print(protocol.line(), file=sys.stderr)  # after every check: a refusal stays one line
    started = time.perf_counter()
    try:
        with runner(args, len(chosen) * args.samples) as (decoder, pair):
            config = folder_config(args, pair, base, args.samples) | {
                "tau_h_source": tau_h_source,
                "protocol": protocol.as_dict(),
            }
            rows = run_evaluation(decoder, chosen, variants, args.samples, args.out, config | planned, args.resume, args.traces)
            if checked:
                from ..lab.runs.reproduce import check_reproducible

                print(f"--check-reproducible: rerunning {checked} problem(s) in another order", file=sys.stderr)
                reproducibility = check_reproducible(decoder.pair, chosen, variants, rows, args.batch_size, checked)
    except KeyboardInterrupt:
        print(f"\ninterrupted: every finished problem is in {args.out / 'results.csv'}; rerun with --resume", file=sys.stderr)
        return 130
    _report(args.out, args.format, args.grader)
    if checked:
        reproducibility.to_csv(args.out / "reproducibility.csv", index=False)
        print_tables(reproducibility)
    print(f"wall time {time.perf_counter() - started:.0f} s; tables and report.html in {args.out}")
    return 0


def _report(out: Path, data_format: str, grader: str) -> None:
    """The folder's tables, paper.md and report.html written from its rows, and printed."""
    from ..lab.reports.report import grader_lines, graders_compared, write_reports
    from ..lab.runs.results_table import load_results

    summary, paired = write_reports(out, data_format)
    print_tables(summary, paired)
    print((out / "paper.md").read_text(encoding="utf-8"))
    print("\n".join(grader_lines(graders_compared(load_results(out / "results.csv"), data_format, grader))))


def shard_plan(args: argparse.Namespace, chosen: list, variants: list, shard: tuple[int, int]) -> tuple[list, dict]:
    """The problems of shard I of N (those whose id hashes to I), and what its run.json records for `eval merge`: its
    methods, its problems and the whole plan's, the data and model files by their hashes, and the versions."""
    from ..lab.runs.results_table import versions
    from ..lab.shards.recorded import recorded_files
    from ..lab.shards.split import owner

    index, count = shard
    mine = [p for p in chosen if owner(p.id, count) == index]
    model = model_args(args)
    plan = {
        "shard": f"{index}/{count}",
        "methods": [v.label for v in variants],
        "traces": args.traces,
        "problems": len(mine),
        "whole": {"problems": len(chosen), "offset": args.offset, "limit": args.limit},
    }
    files = recorded_files(args.data, model.pair, model.draft, model.target)
    return mine, {"plan": plan, "files": files, "versions": versions()}


def check_shard_resumed(out: Path, shard: str | None) -> None:
    """Before the model loads: a resumed folder continues as the shard it was begun as, or as a whole evaluation."""
    from ..lab.runs.results_table import read_config

    saved = read_config(out) if out.is_dir() else None
    plan = saved.get("plan") if saved is not None else None
    was = plan.get("shard") if isinstance(plan, dict) else None
    if saved is not None and "study" not in saved and was != shard:
        raise SettingsError(
            "--shard",
            f"{out} holds shard {was} of an evaluation: resume with --shard {was}, or choose another --out"
            if was
            else f"{out} holds an evaluation run without --shard: resume without it, or choose another --out",
        )


def run_merge(args: argparse.Namespace) -> int:
    """`eval merge SHARD... --out DIR`: one evaluation's folder and tables from its shards' folders."""
    from ..lab.runs.results_table import read_config
    from ..lab.shards.merge import merge_shards

    merge_shards(args.shards, args.out, "python -m easd " + shlex.join(sys.argv[1:]), kind="eval")
    config = read_config(args.out)
    _report(args.out, config["format"], config["grader"])
    return 0


def _check_reproducible_flag(args: argparse.Namespace, variants) -> int:
    """N of --check-reproducible N, checked before any model loads; 0 when not asked."""
    from ..lab.runs.reproduce import refusing, rerun_batch_size

    count = args.check_reproducible
    if count == 0:
        return 0
    if count < 0:
        raise SettingsError("--check-reproducible", f"must be a number of problems ≥ 1 (got {count})")
    if args.ray is not None:
        raise SettingsError("--check-reproducible", "reruns on this machine; drop --ray, or run it as a separate local eval")
    refusing(variants)
    rerun_batch_size(args.batch_size, count)
    return count


def folder_config(args: argparse.Namespace, pair: str, base: DecodeSettings, samples: int) -> dict:
    """What an output folder was made with; --resume refuses a folder made otherwise."""
    settings = {k: v for k, v in settings_values(base).items() if k not in ("method", "rule")}
    return {
        "pair": pair,
        "data": str(args.data.resolve()),
        "format": args.format,
        "shuffle": args.shuffle,
        "prompt_style": args.prompt_style,
        "grader": args.grader,
        "samples": samples,
        "settings": settings,
        "command": "python -m easd " + shlex.join(sys.argv[1:]),  # argv[0] is easd/__main__.py's path
    }


@contextmanager
def runner(args: argparse.Namespace, work: int):
    """(runner, the pair's description): the pair loaded here, or with --ray, Ray actors that each load it."""
    from ..lab.runs.evaluate import LocalRunner

    check_ray_flags(args)
    if args.ray is None:
        pair = load_models(args)
        if args.batch_size > 1 and pair.info.get("int8") in ("draft", "both"):
            print(INT8_BATCH_NOTE, file=sys.stderr)
        yield LocalRunner(pair, args.batch_size), pair.describe()
        return
    from functools import partial

    from ..lab.runs.cluster import ClusterSettings, ray_runner

    cluster = ClusterSettings(args.ray, args.ray_actors, args.ray_cpus_per_actor, args.ray_gpus_per_actor, args.batch_size)
    cluster = cluster.validate()
    load_pair = partial(load_models, model_args(args))  # the flags' errors here, before any actor starts
    with ray_runner(load_pair, cluster, work) as ray:
        print(f"models: {ray.pair_description} on {len(ray.actors)} Ray actor(s)", file=sys.stderr)
        yield ray, ray.pair_description
        print(ray.summary())
