"""`python -m easd sweep`: a method over the grid its table entry names (`--grid`): EASD over τ_H × τ_O, with SD (and
target-only) as reference lines; MTI over τ × ω, RSD over δ, with target-only as the reference."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from ..errors import SettingsError
from ..method.methods import METHODS
from ..method.references import PROPOSED, SPEED_REFERENCE
from .evaluate import folder_config, runner
from .flags import (
    add_batch_flag,
    add_data_flags,
    add_decode_flags,
    add_grader_flag,
    add_grid_flags,
    add_model_flags,
    add_ray_flags,
    apply_budget,
    check_batch_size,
    check_prm_flag,
    grid_flag,
    grid_of,
    print_tables,
    problems,
    settings_from_args,
)

HELP = "a method's accuracy and interventions over its grid: EASD's τ_H × τ_O, MTI's τ × ω, RSD's δ"


def add(parser: argparse.ArgumentParser) -> None:
    add_model_flags(parser)
    add_data_flags(parser, limit=40)
    add_grader_flag(parser)
    add_decode_flags(
        parser,
        budget_by_format=True,
        include=("k", "top_n", "temperature", "top_p", "max_new_tokens", "seed", "signals", "entropy"),  # and each method's own
    )
    gridded = [method for method in METHODS.values() if method.grid]  # those whose table entry names a grid
    parser.add_argument("--grid", default=PROPOSED, choices=[m.name for m in gridded], help="whose grid to sweep")
    add_grid_flags(parser, gridded)
    parser.add_argument(
        "--with-target", action="store_true", help="also run target-only as a reference (where the method follows another)"
    )
    parser.add_argument("--out", type=Path, required=True, help="output folder: results.csv, sweep.csv, sweep.html")
    parser.add_argument("--resume", action="store_true", help="continue the results in --out")
    add_batch_flag(parser)
    add_ray_flags(parser)


def run(args: argparse.Namespace) -> int:
    from ..lab.reports.report import write_sweep
    from ..lab.runs.evaluate import Variant, grid_variants, run_evaluation
    from ..lab.runs.protocol import protocol_for, under

    chosen = problems(args)
    apply_budget(args)
    base = settings_from_args(args)
    check_prm_flag(args, [args.grid])
    variants = grid_variants(base, args.grid, grid_of(args, METHODS[args.grid], base))
    if args.with_target and variants[0].settings.method != SPEED_REFERENCE:
        variants.append(Variant(SPEED_REFERENCE, replace(base, method=SPEED_REFERENCE)))
    protocol = protocol_for([v.settings.method for v in variants], base)  # one sampling setting for every run
    variants = [replace(v, settings=under(protocol, v.settings)) for v in variants]
    base = replace(base, temperature=protocol.temperature, top_p=protocol.top_p)
    for variant in variants:
        try:
            variant.settings.validate()
        except SettingsError as err:  # a grid value out of range: name the grid's flag
            raise SettingsError(grid_flag(err.setting), err.message) from None
    check_batch_size(args)
    print(protocol.line(), file=sys.stderr)  # after every check: a refusal stays one line
    try:
        with runner(args, len(chosen)) as (decoder, pair):
            config = folder_config(args, pair, base, 1) | {"protocol": protocol.as_dict()}
            run_evaluation(decoder, chosen, variants, 1, args.out, config, args.resume)
    except KeyboardInterrupt:
        print("\ninterrupted; rerun with --resume to continue", file=sys.stderr)
        return 130
    print_tables(write_sweep(args.out, args.format))
    print(f"sweep.csv and sweep.html in {args.out}")
    return 0
