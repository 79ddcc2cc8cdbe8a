"""`python -m easd sweep`: EASD over a τ_H × τ_O grid, with SD (and target-only) as reference lines; or MTI over τ
(`--grid mti`), with target-only as the reference."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from ..errors import SettingsError
from ..method.methods import METHODS, settings_values
from .evaluate import folder_config, runner
from .flags import (
    add_batch_flag,
    add_data_flags,
    add_decode_flags,
    add_grader_flag,
    add_model_flags,
    add_ray_flags,
    apply_budget,
    check_batch_size,
    check_prm_flag,
    numbers,
    print_tables,
    problems,
    settings_from_args,
)

HELP = "EASD accuracy and penalty frequency over a τ_H × τ_O grid, or MTI's over τ × ω, or RSD's over δ"


def add(parser: argparse.ArgumentParser) -> None:
    add_model_flags(parser)
    add_data_flags(parser, limit=40)
    add_grader_flag(parser)
    add_decode_flags(
        parser,
        budget_by_format=True,
        include=("k", "top_n", "temperature", "top_p", "max_new_tokens", "seed", "signals", "entropy"),  # and each method's own
    )
    grids = [method.name for method in METHODS.values() if method.grid]  # those whose table entry names a grid
    parser.add_argument("--grid", default="easd", choices=("easd", *grids), help="whose thresholds to sweep")
    parser.add_argument("--tau-hs", default="1,1.5,2", help="τ_H values of the grid, comma-separated")
    parser.add_argument("--tau-os", default="0.2,0.4,0.6,0.8,1.0", help="τ_O values of the grid, comma-separated")
    parser.add_argument("--mti-taus", default="0.1,0.5,1,1.5,2", help="MTI's entropy thresholds τ (--grid mti)")
    parser.add_argument(
        "--mti-omegas",
        help="MTI's guidance strengths ω ≥ 1 (--grid mti), swept with each τ (default: --mti-omega's one value); the "
        "paper's β grid {0.5, 1, 1.5, 2} read as ω − 1 is 1.5,2,2.5,3",
    )
    parser.add_argument("--rsd-deltas", default="0.5,0.6,0.7,0.8,0.9", help="RSD's δ values (--grid rsd; needs --prm)")
    parser.add_argument("--with-target", action="store_true", help="also run target-only as a reference (--grid easd)")
    parser.add_argument("--out", type=Path, required=True, help="output folder: results.csv, sweep.csv, sweep.html")
    parser.add_argument("--resume", action="store_true", help="continue the results in --out")
    add_batch_flag(parser)
    add_ray_flags(parser)


def run(args: argparse.Namespace) -> int:
    from ..lab.evaluate import Variant, baseline_variants, grid_variants, run_evaluation
    from ..lab.report import write_sweep

    chosen = problems(args)
    apply_budget(args)
    base = settings_from_args(args)
    if args.grid == "mti":
        omegas = numbers("--mti-omegas", args.mti_omegas) if args.mti_omegas is not None else [settings_values(base)["mti_omega"]]
        grid = {"mti_tau": numbers("--mti-taus", args.mti_taus), "mti_omega": omegas}
        variants = baseline_variants(base, "mti", grid)
    elif args.grid == "rsd":
        variants = baseline_variants(base, "rsd", {"rsd_delta": numbers("--rsd-deltas", args.rsd_deltas)})
        check_prm_flag(args, [args.grid])
    else:
        variants = grid_variants(base, numbers("--tau-hs", args.tau_hs), numbers("--tau-os", args.tau_os))
    if args.with_target and args.grid == "easd":
        variants.append(Variant("target", replace(base, method="target")))
    for variant in variants:
        try:
            variant.settings.validate()
        except SettingsError as err:  # a grid value out of range: name the grid's flag
            raise SettingsError(f"--{err.setting.replace('_', '-')}s", err.message) from None
    check_batch_size(args)
    try:
        with runner(args, len(chosen)) as (decoder, pair):
            run_evaluation(decoder, chosen, variants, 1, args.out, folder_config(args, pair, base, 1), args.resume)
    except KeyboardInterrupt:
        print("\ninterrupted; rerun with --resume to continue", file=sys.stderr)
        return 130
    print_tables(write_sweep(args.out, args.format))
    print(f"sweep.csv and sweep.html in {args.out}")
    return 0
