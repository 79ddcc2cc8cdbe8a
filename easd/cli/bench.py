"""`python -m easd bench`: tokens/s of every way to decode on the same prompts, against the backends' own
generation; or rows per pass (--batch-sizes); or Spec-Bench's questions (--suite)."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from ..errors import SettingsError, shown
from ..method.methods import METHODS, knobs, own_knobs, settings_values, with_values
from ..method.references import REFERENCE
from ..method.settings import DecodeSettings
from ..serving.worker import ROW_ALLOWANCE
from .flags import add_decode_flags, add_model_flags, load_models, numbers, runtime_of, setting_help, whole_numbers

TIMED_TOKENS = 64  # new tokens per prompt, by default, in the timed comparison
LONG_TOKENS = 128  # … and per row with --batch-sizes, per question with --suite (as before the comparison was repeated)
HELP = "tokens/s of target-only and every method of the table on the same prompts, against each backend's own generation"


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
    benched = [m for m in METHODS.values() if m.bench]
    parser.add_argument(
        "--methods",
        help="the methods that get rows, comma-separated (those needing a PRM only with --prm); target-only always runs "
        f"(default: {','.join(m.name for m in benched)}; --batch-sizes and --suite run their own and refuse it)",
    )
    for setting in dict.fromkeys(m.bench for m in benched):  # each method's bench setting, its values a row each
        owners = ", ".join(m.title for m in benched if m.bench == setting)
        parser.add_argument(
            "--" + setting.replace("_", "-"),
            default=_default(setting),
            help=setting_help(setting, f"a row each of {owners}"),
        )
    # every method's other settings at one value for all its rows, as `generate` takes them (--specguard-grounding
    # none runs SpecGuard on llama.cpp, --smc-final sample, …)
    # --temperature and --top-p: one sampling protocol for every row (easd.lab.runs.protocol), as eval's; greedy by default
    add_decode_flags(parser, include=("temperature", "top_p"), leave=tuple(values_flags()))
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="repetitions: passes over the prompts, every method interleaved in each; with 2 or more, each tokens/s and "
        "ratio also prints its median, range and 95%% interval over the repetitions, and how many would give ±3%%",
    )
    parser.add_argument("--batch-sizes", help="instead: total tokens/s at each B rows per pass, e.g. 1,4,16")
    parser.add_argument(
        "--beside",
        metavar="METHODS",
        help="instead: an SD lane's tokens/s in a batch beside one generation of each of these methods (comma-separated, "
        "e.g. smc,specguard,beam), against beside another SD lane: what one user's choice costs a neighbour in a class",
    )
    parser.add_argument(
        "--row-allowance",
        help="with --beside: the class's row allowances to time each neighbour at, comma-separated (app.py "
        f"--row-allowance; 0: none, every row steps every step; default 0,{ROW_ALLOWANCE})",
    )
    suite = parser.add_argument_group("Spec-Bench (docs/evaluation.md)")
    suite.add_argument("--suite", nargs=2, metavar=("spec-bench", "FILE"), help="Spec-Bench's question file instead")
    suite.add_argument("--per-category", type=int, default=5, help="with --suite: questions per category (≥ 1)")
    suite.add_argument("--answers", type=Path, metavar="DIR", help="with --suite: write Spec-Bench answer files into DIR")
    suite.add_argument("--skip-long", action="store_true", help="with --suite: leave out questions that may not fit the context")


def run(args: argparse.Namespace) -> int:
    modes = [flag for flag in ("--suite", "--batch-sizes", "--beside") if getattr(args, flag[2:].replace("-", "_")) is not None]
    if len(modes) > 1:
        raise SettingsError(modes[1], f"is a benchmark of its own, as {modes[0]} is: give one of them")
    if args.row_allowance is not None and args.beside is None:  # it would be dropped unsaid
        raise SettingsError("--row-allowance", "applies to --beside's lanes only: give --beside too, or drop it")
    other = modes[0] if modes else None
    if args.methods is not None and other is not None:  # their rows are fixed: --methods would be dropped unsaid
        raise SettingsError("--methods", f"picks the timed comparison's rows; {other} runs its own: drop one of the two")
    default = DecodeSettings()
    sampled = "--temperature" if args.temperature != default.temperature else "--top-p" if args.top_p != default.top_p else None
    if sampled and other is not None:  # its rows decode their own way: the flag would be dropped unsaid
        raise SettingsError(sampled, f"samples the timed comparison's rows; {other} runs its own greedily: drop one of the two")
    if args.max_new_tokens is None:
        args.max_new_tokens = LONG_TOKENS if args.suite is not None or args.batch_sizes is not None else TIMED_TOKENS
    if args.suite is not None:
        return run_suite(args)
    from ..lab.speed.batched import run_batched_benchmark
    from ..lab.speed.bench import run_benchmark
    from ..lab.speed.beside import run_beside_benchmark
    from ..lab.speed.timing import PROMPTS, BenchPlan

    if not 1 <= args.prompts <= 10:
        raise SettingsError("--prompts", f"must be from 1 to 10 (got {args.prompts})")
    if args.repeats < 1:
        raise SettingsError("--repeats", f"must be ≥ 1 (got {args.repeats})")
    values = bench_values(args)
    rowed = values_flags()
    own = {name: getattr(args, name) for m in METHODS.values() for name in own_knobs(m) if name not in rowed}
    sampling = replace(DecodeSettings(), temperature=args.temperature, top_p=args.top_p)
    with_values(sampling, **own).validate()  # a bad value is refused naming its flag, before any model loads
    protocol = bench_protocol(sampling, values, own)
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
        k, tau_h = values[REFERENCE][0], numbers("--tau-h", args.tau_h)[0]
        return max(run_batched_benchmark(load_models(each), sizes, args.max_new_tokens, k, tau_h) for each in each_backend)
    plan = BenchPlan(PROMPTS[: args.prompts], args.max_new_tokens, values, args.repeats, own, protocol)
    if args.beside is not None:
        neighbours, allowances = (
            beside_methods(args.beside),
            whole_numbers("--row-allowance", args.row_allowance or f"0,{ROW_ALLOWANCE}", low=0),
        )
        return max(run_beside_benchmark(load_models(each), plan, neighbours, allowances) for each in each_backend)
    pairs = [load_models(each) for each in each_backend]
    return run_benchmark(pairs, plan)


def bench_protocol(sampling: DecodeSettings, values: dict[str, list], own: dict):
    """How every row decodes: greedy by default (SMC-SD, which has no greedy form, then samples at its own
    temperatures); with --temperature, every row under that one protocol, each method's own sampling settings
    with it (a method's own temperature set apart is refused naming its flag, as eval refuses it). None: greedy."""
    from ..lab.runs.protocol import Protocol, under

    if sampling.greedy:
        return None
    protocol = Protocol(sampling.temperature, sampling.top_p, "as --temperature asks")
    for name in values:  # each row's settings placed under it now, so that a clash is refused before any model loads
        under(protocol, with_values(replace(sampling, method=name), **own))
    return protocol


def beside_methods(text: str) -> list[str]:
    """--beside's methods, each a method of the table (SettingsError naming the flag)."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise SettingsError("--beside", f"names no method (got {shown(text)}); give some of {', '.join(METHODS)}")
    for name in names:
        if name not in METHODS:
            raise SettingsError("--beside", f"{shown(name)} is not a method; give some of {', '.join(METHODS)}")
    return names


def values_flags() -> set[str]:
    """The settings whose values give bench rows (--k, --tau-h, --specguard-threshold, …): lists, not one value."""
    return {m.bench for m in METHODS.values() if m.bench}


def bench_values(args: argparse.Namespace) -> dict[str, list]:
    """For each method that gets rows, the values of its bench setting, each checked (SettingsError naming its flag);
    SD always, whose first k every other row takes. A method that needs a process reward model gets rows with --prm,
    and its flag given without one is refused."""
    benched = [m.name for m in METHODS.values() if m.bench]
    names = benched if args.methods is None else [name.strip() for name in args.methods.split(",") if name.strip()]
    if not names:
        raise SettingsError("--methods", f"names no method (got {shown(args.methods)}); give some of {', '.join(benched)}")
    for name in names:
        if name not in METHODS or not METHODS[name].bench:
            raise SettingsError("--methods", f"{name!r} has no bench rows; give some of {', '.join(benched)}")
    values = {}
    for name in dict.fromkeys([REFERENCE, *names]):
        method, flag = METHODS[name], "--" + METHODS[name].bench.replace("_", "-")
        text = getattr(args, method.bench)
        if method.needs_prm and args.prm is None:
            if text != _default(method.bench):
                raise SettingsError(flag, f"{method.title}'s rows need a process reward model: give --prm too")
            continue
        parsed = whole_numbers(flag, text) if knobs()[method.bench].kind == "int" else numbers(flag, text)
        for value in parsed:
            try:
                with_values(DecodeSettings(max_new_tokens=args.max_new_tokens), method=name, **{method.bench: value}).validate()
            except SettingsError as err:
                raise SettingsError(flag, err.message) from None
        values[name] = parsed
    return values


def _default(setting: str) -> str:
    """A bench setting's flag's default: the setting's own default, one value."""
    return f"{settings_values(DecodeSettings())[setting]:g}"


def run_suite(args: argparse.Namespace) -> int:
    """`bench --suite spec-bench FILE`: Spec-Bench's questions, table and answer files."""
    from ..lab.speed import specbench

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
