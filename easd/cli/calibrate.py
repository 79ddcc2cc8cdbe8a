"""`python -m easd calibrate`: choose τ_H the paper's way, from each model's greedy entropies."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import SettingsError
from ..method.settings import DecodeSettings
from .flags import add_batch_flag, add_data_flags, add_model_flags, apply_budget, check_batch_size, load_models, problems

HELP = "choose τ_H from the models' greedy entropies (the paper's procedure)"


def add(parser: argparse.ArgumentParser) -> None:
    add_model_flags(parser)
    add_data_flags(parser, limit=None)  # the paper calibrates on the whole of LIMO: every problem unless --limit
    from ..lab.grading.problems import BUDGETS

    budgets = ", ".join(f"{format} {tokens}" for format, tokens in BUDGETS.items())
    parser.add_argument(
        "--max-new-tokens", type=int, help=f"most tokens per greedy generation (≥ 1); default by the data's format: {budgets}"
    )
    add_batch_flag(parser)
    parser.add_argument("--out", type=Path, default=Path("runs/calibration"), help="folder for calibration.json and .html")


def run(args: argparse.Namespace) -> int:
    from ..lab.acceptance.calibrate import calibrate, collect_entropies, write_calibration

    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        raise SettingsError("--max-new-tokens", f"must be ≥ 1 (got {args.max_new_tokens})")
    check_batch_size(args)
    chosen = problems(args)
    apply_budget(args)
    pair = load_models(args)
    entropies = collect_entropies(pair, chosen, DecodeSettings(max_new_tokens=args.max_new_tokens), args.batch_size)
    results = calibrate(entropies)
    write_calibration(args.out, results, entropies)
    for result in results:
        top = f"mean entropy of the top 5% of {result.tokens} greedy tokens = {result.raw:.3f} nats"
        print(f"{result.model}: {top} → τ_H = {result.tau_h:g}")
    print(
        f"{len(chosen)} problems, at most {args.max_new_tokens:,} tokens each; the paper uses one τ_H, the target's: "
        f"give `--calibration {args.out / 'calibration.json'}` to study (or --tau-h to eval)"
    )
    print(f"histograms: {args.out / 'calibration.html'}")
    return 0
