"""`python -m easd bench`: tokens/s of every way to decode on the same prompts, against the backends' own
generation; or rows per pass (--batch-sizes); or Spec-Bench's questions (--suite)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import SettingsError
from ..method.methods import make_settings
from ..method.settings import DecodeSettings
from .flags import add_model_flags, load_models, numbers, runtime_of, whole_numbers

TIMED_TOKENS = 64  # new tokens per prompt, by default, in the timed comparison
LONG_TOKENS = 128  # … and per row with --batch-sizes, per question with --suite (as before the comparison was repeated)
HELP = "tokens/s of target-only, SD, EASD, MTI and RSD on the same prompts, against each backend's own generation"


def add(parser: argparse.ArgumentParser) -> None:
    add_model_flags(parser)
    # the defaults time 2 prompts × 64 tokens 3 times, about 5 minutes on the embedded pair on a quiet 2-core machine:
    # every figure's range within ±1.5% of its median, the ratios' 95% intervals ±0.4–4.7% (docs/benchmarks.md,
    # 2026-12-05); one pass over 5 prompts × 128 tokens, the old default, moved ±10% between runs
    parser.add_argument("--prompts", type=int, default=2, help="how many built-in prompts to run (1 to 10)")
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        help=f"new tokens per prompt (≥ 1; default {TIMED_TOKENS}, and {LONG_TOKENS} with --batch-sizes or --suite)",
    )
    parser.add_argument("--k", default="4", help="draft tokens per block; several (comma-separated) give an SD row each")
    parser.add_argument("--tau-h", default="1.0", help="EASD's τ_H; several (comma-separated) give an EASD row each")
    parser.add_argument("--mti-tau", default="1.0", help="MTI's τ; several (comma-separated) give an MTI row each")
    parser.add_argument(
        "--rsd-delta", help="with --prm: RSD's δ; several (comma-separated) give an RSD row each, and a draft-only row"
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="repetitions: passes over the prompts, every method interleaved in each; with 2 or more, each tokens/s and "
        "ratio also prints its median, range and 95%% interval over the repetitions, and how many would give ±3%%",
    )
    parser.add_argument("--batch-sizes", help="instead: total tokens/s at each B rows per pass, e.g. 1,4,16")
    suite = parser.add_argument_group("Spec-Bench (docs/evaluation.md)")
    suite.add_argument("--suite", nargs=2, metavar=("spec-bench", "FILE"), help="Spec-Bench's question file instead")
    suite.add_argument("--per-category", type=int, default=5, help="with --suite: questions per category (≥ 1)")
    suite.add_argument("--answers", type=Path, metavar="DIR", help="with --suite: write Spec-Bench answer files into DIR")
    suite.add_argument("--skip-long", action="store_true", help="with --suite: leave out questions that may not fit the context")


def run(args: argparse.Namespace) -> int:
    if args.max_new_tokens is None:
        args.max_new_tokens = LONG_TOKENS if args.suite is not None or args.batch_sizes is not None else TIMED_TOKENS
    if args.suite is not None:
        return run_suite(args)
    from ..lab.bench import PROMPTS, BenchPlan, run_batched_benchmark, run_benchmark

    if not 1 <= args.prompts <= 10:
        raise SettingsError("--prompts", f"must be from 1 to 10 (got {args.prompts})")
    if args.repeats < 1:
        raise SettingsError("--repeats", f"must be ≥ 1 (got {args.repeats})")
    tau_hs, ks = numbers("--tau-h", args.tau_h), whole_numbers("--k", args.k)
    mti_taus = numbers("--mti-tau", args.mti_tau)
    if args.rsd_delta is not None and args.prm is None:
        raise SettingsError("--rsd-delta", "RSD's rows need a process reward model: give --prm too")
    rsd_deltas = numbers("--rsd-delta", args.rsd_delta) if args.rsd_delta is not None else []
    for settings in (
        [DecodeSettings(k=k) for k in ks]
        + [DecodeSettings(tau_h=t, max_new_tokens=args.max_new_tokens) for t in tau_hs]
        + [make_settings(method="mti", mti_tau=t) for t in mti_taus]
        + [make_settings(method="rsd", rsd_delta=d) for d in rsd_deltas]
    ):
        settings.validate()
    backends = [b.strip() for b in args.backend.split(",") if b.strip()]
    transformers_only = {"dtype": "auto", "int8": "none"}  # --dtype and --int8 are transformers' own
    each_backend = [
        argparse.Namespace(**{**vars(args), "backend": backend, **(transformers_only if backend == "llama.cpp" else {})})
        for backend in backends
    ]
    for each in each_backend:
        runtime_of(each).checked()  # every backend's flags are checked before any model loads
    if args.batch_sizes is not None:
        sizes = whole_numbers("--batch-sizes", args.batch_sizes)
        return max(
            run_batched_benchmark(load_models(each), sizes, args.max_new_tokens, ks[0], tau_hs[0]) for each in each_backend
        )
    pairs = [load_models(each) for each in each_backend]
    plan = BenchPlan(PROMPTS[: args.prompts], args.max_new_tokens, ks, tau_hs, args.repeats, tuple(mti_taus), tuple(rsd_deltas))
    return run_benchmark(pairs, plan)


def run_suite(args: argparse.Namespace) -> int:
    """`bench --suite spec-bench FILE`: Spec-Bench's questions, table and answer files."""
    from ..lab import specbench

    name, path = args.suite
    if name != "spec-bench":
        raise SettingsError("--suite", f"must be spec-bench followed by its question file (got {name!r})")
    if args.per_category < 1:
        raise SettingsError("--per-category", f"must be ≥ 1 (got {args.per_category})")
    if args.answers is not None and not args.answers.parent.resolve().is_dir():
        raise SettingsError("--answers", f"the folder {args.answers.parent} does not exist")
    methods = specbench.methods_for(whole_numbers("--k", args.k)[0], numbers("--tau-h", args.tau_h), args.max_new_tokens)
    for method in methods:
        method.settings.validate()
    questions = specbench.load_questions(Path(path), args.per_category)
    pair = load_models(args)
    return specbench.run_spec_bench(pair, questions, methods, args.answers, args.skip_long)
