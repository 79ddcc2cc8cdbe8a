"""`python -m easd`: generate, bench, pairs, eval, calibrate and sweep.

Errors a user can fix print one line naming the flag and exit with status 2, before any model
loads where possible, so a typo never costs a model load.
"""

from __future__ import annotations

import argparse
import sys
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path

from .core import trace as trace_io
from .core.settings import METHODS, RULES, SIGNALS, DecodeSettings
from .errors import EasdError, SettingsError


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (plus a pointer to --help) and exit status 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from .pairs.registry import PAIRS

    parser = OneLineParser(
        prog="python -m easd", description="Entropy-aware speculative decoding (EASD) vs speculative decoding (SD)."
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    formatter = argparse.ArgumentDefaultsHelpFormatter

    generate = commands.add_parser(
        "generate", help="generate text with one method and print a summary", formatter_class=formatter
    )
    _add_model_flags(generate, PAIRS)
    _add_decode_flags(generate)
    prompt = generate.add_mutually_exclusive_group(required=True)
    prompt.add_argument("--prompt", help="the prompt text (sent through the chat template unless --no-chat)")
    prompt.add_argument("--prompt-file", type=Path, help="read the prompt from this UTF-8 file")
    generate.add_argument("--no-chat", action="store_true", help="send the prompt as raw text, without the chat template")
    generate.add_argument("--trace", type=Path, metavar="FILE.csv", help="write the per-token trace as CSV")
    generate.add_argument("--json", type=Path, metavar="FILE.json", help="write the trace as JSON, with settings and summary")
    generate.set_defaults(run=run_generate)

    bench = commands.add_parser(
        "bench", help="tokens/s of target-only, transformers assisted, SD and EASD on the same prompts", formatter_class=formatter
    )
    _add_model_flags(bench, PAIRS)
    bench.add_argument("--prompts", type=int, default=5, help="how many built-in prompts to run (1 to 10)")
    bench.add_argument("--max-new-tokens", type=int, default=128, help="new tokens per prompt (≥ 1)")
    bench.add_argument(
        "--k",
        default="4",
        help="draft tokens per block (1 to 64); several, comma-separated, give an SD row each (the first is EASD's and the peers')",
    )
    bench.add_argument(
        "--tau-h",
        default="1.0",
        help="EASD entropy threshold(s) in nats (≥ 0): one EASD row per comma-separated value, e.g. 0.5,1,1.5,2",
    )
    bench.add_argument("--repeats", type=int, default=1, help="passes over the prompts; all of them count")
    bench.add_argument(
        "--batch-sizes",
        help="instead: total tokens/s with B rows per pass for each B given, e.g. 1,2,4,8,16 (target-only, SD, EASD at the "
        "first --tau-h, and transformers' batched generate of the target as the reference)",
    )
    bench.set_defaults(run=run_bench)
    suite = bench.add_argument_group('Spec-Bench (README, "Spec-Bench")')
    suite.add_argument(
        "--suite",
        nargs=2,
        metavar=("spec-bench", "FILE"),
        help="run target-only, SD and EASD on Spec-Bench's question file instead of the built-in prompts",
    )
    suite.add_argument("--per-category", type=int, default=5, help="with --suite: questions per category (≥ 1)")
    suite.add_argument(
        "--answers", type=Path, metavar="DIR", help="with --suite: write one Spec-Bench answer file per method into DIR"
    )
    suite.add_argument(
        "--skip-long", action="store_true", help="with --suite: leave out the questions that may not fit the pair's context"
    )

    commands.add_parser(
        "lm-eval",
        add_help=False,
        help="run EleutherAI's lm-evaluation-harness with EASD as its model 'easd' (needs requirements-research.txt); "
        "every flag after it is lm-eval's own, e.g. --model_args pair=qwen-coder,method=easd,tau_h=1.5 --tasks gsm8k_cot_zeroshot",
    )  # main() hands its command line to lm-eval before parsing; this entry is for --help

    listing = commands.add_parser("pairs", help="list the named model pairs, their size, memory and availability here")
    listing.set_defaults(run=run_pairs)
    _add_evaluation_commands(commands, formatter, PAIRS)
    return parser


def _add_evaluation_commands(commands, formatter, pairs: dict) -> None:
    evaluate = commands.add_parser(
        "eval", help="accuracy, speed and intervention rate of methods on reasoning problems", formatter_class=formatter
    )
    _add_model_flags(evaluate, pairs)
    _add_data_flags(evaluate, limit=None)
    _add_decode_flags(
        evaluate,
        max_new_tokens=512,
        include=("k", "tau_h", "tau_o", "top_n", "temperature", "top_p", "max_new_tokens", "seed", "signals"),
    )
    evaluate.add_argument(
        "--methods",
        default="sd,easd",
        help="comma-separated: target, draft, sd, easd, easd:RULE (RULE: no_overlap, no_draft_entropy, target_entropy_only)",
    )
    evaluate.add_argument(
        "--samples",
        type=int,
        default=1,
        help="runs per problem with seeds seed, seed+1, …; with a temperature > 0 the summary adds mean ± std and majority-vote accuracy",
    )
    evaluate.add_argument(
        "--out", type=Path, required=True, help="output folder: results.csv, summary.csv, paired.csv, report.html"
    )
    evaluate.add_argument(
        "--resume",
        action="store_true",
        help="continue the results in --out, skipping every (problem, method, sample) already done",
    )
    evaluate.add_argument("--traces", action="store_true", help="also save every run's trace as JSON under --out/traces")
    evaluate.add_argument(
        "--check-reproducible",
        type=int,
        default=0,
        metavar="N",
        help="then rerun the EASD methods on the first N problems in another evaluation order (alone if the eval batched, "
        "else together) and count the first penalties that moved; writes reproducibility.csv (README, 'Fragile decisions')",
    )
    _add_batch_flag(evaluate)
    _add_ray_flags(evaluate)
    evaluate.set_defaults(run=run_eval)

    calibration = commands.add_parser(
        "calibrate", help="choose τ_H from the models' greedy entropies (the paper's procedure)", formatter_class=formatter
    )
    _add_model_flags(calibration, pairs)
    _add_data_flags(calibration, limit=20)
    calibration.add_argument("--max-new-tokens", type=int, default=512, help="most tokens per greedy generation (≥ 1)")
    _add_batch_flag(calibration)
    calibration.add_argument(
        "--out", type=Path, default=Path("runs/calibration"), help="folder for calibration.json and calibration.html"
    )
    calibration.set_defaults(run=run_calibrate)

    sweep = commands.add_parser(
        "sweep", help="EASD accuracy and penalty frequency over a τ_H × τ_O grid", formatter_class=formatter
    )
    _add_model_flags(sweep, pairs)
    _add_data_flags(sweep, limit=40)
    _add_decode_flags(
        sweep, max_new_tokens=512, include=("k", "top_n", "temperature", "top_p", "max_new_tokens", "seed", "signals")
    )
    sweep.add_argument("--tau-hs", default="1,1.5,2", help="τ_H values of the grid, comma-separated")
    sweep.add_argument("--tau-os", default="0.2,0.4,0.6,0.8,1.0", help="τ_O values of the grid, comma-separated")
    sweep.add_argument(
        "--with-target", action="store_true", help="also run target-only as a reference (greedy SD already equals it)"
    )
    sweep.add_argument("--out", type=Path, required=True, help="output folder: results.csv, sweep.csv, sweep.html")
    sweep.add_argument("--resume", action="store_true", help="continue the results in --out")
    _add_batch_flag(sweep)
    _add_ray_flags(sweep)
    sweep.set_defaults(run=run_sweep)


def _add_batch_flag(parser: argparse.ArgumentParser) -> None:
    from .lab.evaluate import DEFAULT_BATCH_SIZE

    parser.add_argument(
        "--batch-size",
        type=int,
        default=DEFAULT_BATCH_SIZE,
        help="rows (problem × method × sample) decoded together in each forward pass; 1 decodes one at a time. "
        "A pass over 8 rows costs about 3x one row on a 2-core CPU, and far less on a GPU",
    )


def _add_ray_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Ray cluster (pip install -r requirements-cluster.txt)")
    group.add_argument(
        "--ray",
        nargs="?",
        const="local",
        metavar="ADDRESS",
        help="decode on Ray actors, each loading the pair once: no ADDRESS starts a local cluster, 'auto' joins the one "
        "`ray start` runs here, host:port or ray://host:10001 another",
    )
    group.add_argument(
        "--ray-actors",
        type=int,
        help="actors (default: the cluster's GPUs ÷ --ray-gpus-per-actor, or CPUs ÷ --ray-cpus-per-actor)",
    )
    group.add_argument("--ray-cpus-per-actor", type=int, default=1, help="CPUs per actor, also its torch threads")
    group.add_argument("--ray-gpus-per-actor", type=float, help="GPUs per actor (default: 1 when the cluster has GPUs, else 0)")


def _add_data_flags(parser: argparse.ArgumentParser, limit: int | None) -> None:
    from .lab.problems import FORMATS

    group = parser.add_argument_group("data")
    group.add_argument("--data", type=Path, required=True, help="a JSONL file of problems, or GPQA-Diamond's CSV")
    group.add_argument(
        "--format",
        default="auto",
        choices=("auto", *FORMATS),
        help="auto: detect from the first record's fields; gsm8k: question/answer '#### N'; math: problem + solution/answer "
        "with \\boxed{}; choice: question, options, answer letter; math500, aime (AIME24/25, AMC23), minerva, olympiad, "
        'gpqa (CSV): the benchmarks as distributed (README, "Benchmark files")',
    )
    group.add_argument("--limit", type=int, default=limit, help="how many problems (after --shuffle and --offset)")
    group.add_argument("--offset", type=int, default=0, help="skip this many problems first")
    group.add_argument(
        "--shuffle",
        type=int,
        default=None,
        metavar="SEED",
        help="take problems in a fixed order shuffled with this seed (a reproducible sample)",
    )


def _add_model_flags(parser: argparse.ArgumentParser, pairs: dict) -> None:
    group = parser.add_argument_group("models")
    group.add_argument(
        "--pair", choices=sorted(pairs), help="a named pair (default: qwen-coder when installed, else tiny-random)"
    )
    add_weight_flags(group)


def add_weight_flags(parser, defaults: dict | None = None) -> None:
    """--draft, --target, --backend, --dtype and --int8: defined once for the CLI and app.py (which takes its defaults
    from the environment)."""
    from .pairs.loading import BACKENDS, DTYPES, INT8

    d = {"draft": None, "target": None, "backend": "auto", "dtype": "auto", "int8": "none", **(defaults or {})}
    parser.add_argument(
        "--draft", default=d["draft"], help="draft model: a local folder, a .gguf file or a hub id (with --target)"
    )
    parser.add_argument(
        "--target", default=d["target"], help="target model: a local folder, a .gguf file or a hub id (with --draft)"
    )
    parser.add_argument(
        "--backend",
        default=d["backend"],
        help=f"what runs the models ({', '.join(BACKENDS)}): llama.cpp reads .gguf files as they are (fast on a CPU); "
        "transformers reads anything (exact in float32, GPUs); auto = llama.cpp for a GGUF pair on a CPU, else transformers. "
        "bench takes several, comma-separated",
    )
    parser.add_argument(
        "--dtype",
        default=d["dtype"],
        choices=DTYPES,
        help="transformers' dtype; auto = bfloat16 where the hardware supports it (CUDA, or CPUs with AVX512-BF16/AMX), else float32",
    )
    parser.add_argument(
        "--int8",
        default=d["int8"],
        choices=INT8,
        help="dynamic int8 weights, CPU only. 'draft' is faster and keeps SD lossless (the output is still exactly the "
        "target's; only the acceptance rate changes); 'target' or 'both' change the target itself, so the output is no "
        "longer the unquantized target's",
    )


def check_model_flags(pair: str | None, draft: str | None, target: str | None) -> None:
    """--draft and --target come together, and never with a --pair (SettingsError naming the flag)."""
    if (draft is None) != (target is None):
        missing = "--target" if target is None else "--draft"
        raise SettingsError(missing, "is needed too: give --draft and --target together, or a --pair")
    if draft is not None and pair is not None:
        raise SettingsError("--pair", "cannot be combined with --draft/--target; choose one way to name the models")


def _add_decode_flags(
    parser: argparse.ArgumentParser, max_new_tokens: int | None = None, include: tuple[str, ...] | None = None
) -> None:
    d = DecodeSettings()
    group = _Only(parser.add_argument_group("decoding"), include)
    group.add_argument(
        "--method", default=d.method, choices=METHODS, help="target-only, draft-only, speculative decoding or EASD"
    )
    group.add_argument("--rule", default=d.rule, choices=RULES, help="EASD trigger rule: full, or one of the paper's ablations")
    group.add_argument("--k", type=int, default=d.k, help="draft tokens per block (1 to 64)")
    group.add_argument("--tau-h", type=float, default=d.tau_h, help="entropy threshold τ_H in nats, for draft and target (≥ 0)")
    group.add_argument(
        "--tau-o", type=float, default=d.tau_o, help="overlap threshold τ_O in [0, 1]: at least ceil(τ_O·n) shared top-n tokens"
    )
    group.add_argument("--top-n", type=int, default=d.top_n, help="n, the size of the top-n sets compared (1 to 100)")
    group.add_argument("--temperature", type=float, default=d.temperature, help="sampling temperature (≥ 0; 0 = greedy)")
    group.add_argument("--top-p", type=float, default=d.top_p, help="nucleus sampling mass in (0, 1]")
    group.add_argument(
        "--max-new-tokens", type=int, default=max_new_tokens or d.max_new_tokens, help="most tokens to generate (≥ 1)"
    )
    group.add_argument(
        "--seed", type=int, default=d.seed, help="random seed (≥ 0); SD and EASD with one seed agree until the first penalty"
    )
    group.add_argument(
        "--signals",
        default=d.signals,
        choices=SIGNALS,
        help="logits the rule, sampling and the trace use: float32 from the last hidden state even for bfloat16 weights, "
        "or in the model's own dtype (README, 'Fragile decisions')",
    )


class _Only:
    """An argument group that adds only the flags in `include` (all when None), so commands share one definition."""

    def __init__(self, group, include: tuple[str, ...] | None):
        self.group, self.include = group, include

    def add_argument(self, flag: str, **kwargs):
        if self.include is None or flag.removeprefix("--").replace("-", "_") in self.include:
            self.group.add_argument(flag, **kwargs)


def settings_from_args(args: argparse.Namespace) -> DecodeSettings:
    values = {f.name: getattr(args, f.name) for f in fields(DecodeSettings) if hasattr(args, f.name)}
    return DecodeSettings(**values).validate()


def load_models(args: argparse.Namespace):
    """The pair the flags name, announced on stderr (stdout carries only the result)."""
    from .pairs.registry import default_pair_name, load_named_pair

    args = _model_args(args)
    if args.draft is not None:
        from .pairs.loading import load_pair

        pair = load_pair(args.draft, args.target, runtime_of(args))
    else:
        pair = load_named_pair(args.pair or default_pair_name(), runtime_of(args))
    print(f"models: {pair.describe()}", file=sys.stderr)
    if pair.note:
        print(f"note: {pair.note}", file=sys.stderr)
    return pair


# --- generate -----------------------------------------------------------------------------------


def run_generate(args: argparse.Namespace) -> int:
    from .core.decoding import Generation

    settings = settings_from_args(args)
    prompt = _read_prompt(args)
    for option, path in (("--trace", args.trace), ("--json", args.json)):
        _check_writable(option, path)
    pair = load_models(args)
    generation = Generation(pair, prompt, settings, chat=not args.no_chat)
    try:
        for block in generation:
            for record in block.records:
                print(record.token_text, end="", flush=True)
    except KeyboardInterrupt:
        print("\n[stopped]", end="")
    print()
    trace = generation.trace
    if args.trace:
        trace_io.write_csv([trace], args.trace)
    if args.json:
        trace_io.write_json([trace], args.json)
    print(summary_line(trace.summary()))
    return 0


def _read_prompt(args: argparse.Namespace) -> str:
    if args.prompt_file is None:
        prompt = args.prompt
    elif not args.prompt_file.is_file():
        raise SettingsError("--prompt-file", f"no such file: {args.prompt_file}")
    else:
        try:
            prompt = args.prompt_file.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise SettingsError("--prompt-file", f"{args.prompt_file} is not UTF-8 text") from None
    if not prompt.strip():
        raise SettingsError(
            "--prompt-file" if args.prompt_file else "--prompt", "is empty; give the text the models should answer"
        )
    return prompt


def _check_writable(option: str, path: Path | None) -> None:
    if path is not None and not path.parent.resolve().is_dir():
        raise SettingsError(option, f"the folder {path.parent} does not exist")


def summary_line(summary: dict) -> str:
    parts = [f"{summary['new_tokens']} tokens", f"{_fmt(summary['tokens_per_s'], '.2f')} tokens/s"]
    parts.append(f"acceptance {_fmt(summary['acceptance_rate'], '.3f')}")
    parts.append(f"mean accepted length {_fmt(summary['mean_accepted_length'], '.2f')}")
    parts.append(f"{summary['penalized']} penalized ({summary['fragile_penalties']} fragile)")
    parts.append(f"rule fired {summary['fired']} ({summary['fragile']} fragile decisions)")
    parts.append(f"stop: {summary['stop_reason']}")
    return " | ".join(parts)


def _fmt(value, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


# --- bench --------------------------------------------------------------------------------------


def run_bench(args: argparse.Namespace) -> int:
    from .lab.bench import run_benchmark

    if args.suite is not None:
        return run_suite(args)

    from .lab.bench import PROMPTS, Plan

    if not 1 <= args.prompts <= 10:
        raise SettingsError("--prompts", f"must be from 1 to 10 (got {args.prompts})")
    if args.repeats < 1:
        raise SettingsError("--repeats", f"must be ≥ 1 (got {args.repeats})")
    tau_hs, ks = _numbers("--tau-h", args.tau_h), _whole_numbers("--k", args.k)
    for settings in [DecodeSettings(k=k) for k in ks] + [
        DecodeSettings(tau_h=t, max_new_tokens=args.max_new_tokens) for t in tau_hs
    ]:
        settings.validate()
    backends = [b.strip() for b in args.backend.split(",") if b.strip()]
    transformers_only = {"dtype": "auto", "int8": "none"}  # --dtype and --int8 are transformers' own
    pairs_args = [
        argparse.Namespace(**{**vars(args), "backend": backend, **(transformers_only if backend == "llama.cpp" else {})})
        for backend in backends
    ]
    for each in pairs_args:
        runtime_of(each).checked()  # every backend's flags are checked before any model loads
    if args.batch_sizes is not None:
        sizes = _whole_numbers("--batch-sizes", args.batch_sizes)
        from .lab.bench import run_batched_benchmark

        return max(run_batched_benchmark(load_models(each), sizes, args.max_new_tokens, ks[0], tau_hs[0]) for each in pairs_args)
    pairs = [load_models(each) for each in pairs_args]
    return run_benchmark(pairs, Plan(PROMPTS[: args.prompts], args.max_new_tokens, ks, tau_hs, args.repeats))


def _whole_numbers(option: str, text: str) -> list[int]:
    """Comma-separated whole numbers ≥ 1, or SettingsError naming the option."""
    values = _numbers(option, text)
    if min(values) < 1 or any(value != int(value) for value in values):
        raise SettingsError(option, f"must be whole numbers ≥ 1 separated by commas (got {text!r})")
    return [int(value) for value in values]


def run_suite(args: argparse.Namespace) -> int:
    """`bench --suite spec-bench FILE`: Spec-Bench's questions, table and answer files."""
    from .lab import specbench

    name, path = args.suite
    if name != "spec-bench":
        raise SettingsError("--suite", f"must be spec-bench followed by its question file (got {name!r})")
    if args.per_category < 1:
        raise SettingsError("--per-category", f"must be ≥ 1 (got {args.per_category})")
    if args.answers is not None and not args.answers.parent.resolve().is_dir():
        raise SettingsError("--answers", f"the folder {args.answers.parent} does not exist")
    methods = specbench.methods_for(_whole_numbers("--k", args.k)[0], _numbers("--tau-h", args.tau_h), args.max_new_tokens)
    for method in methods:
        method.settings.validate()
    questions = specbench.load_questions(Path(path), args.per_category)
    pair = load_models(args)
    return specbench.run_spec_bench(pair, questions, methods, args.answers, args.skip_long)


def _numbers(option: str, text: str) -> list[float]:
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values:
        raise SettingsError(option, f"must be one or more numbers separated by commas (got {text!r})")
    return values


def run_pairs(args: argparse.Namespace) -> int:
    from .pairs.registry import default_pair_name, pairs_table

    default = default_pair_name()
    for row in pairs_table():
        mark = " (default)" if row["pair"] == default else ""
        print(f"{row['pair']}{mark}: {row['draft → target']}")
        print(f"    {row['about']}")
        print(f"    size: {row['size']} | memory: {row['memory']} | available here: {row['available']} ({row['why']})")
    return 0


# --- evaluation ---------------------------------------------------------------------------------


def _problems(args: argparse.Namespace):
    from .lab.problems import load_problems

    for option in ("limit", "offset"):
        value = getattr(args, option)
        if value is not None and value < (1 if option == "limit" else 0):
            raise SettingsError(f"--{option}", f"must be {'≥ 1' if option == 'limit' else '≥ 0'} (got {value})")
    problems = load_problems(args.data, args.format, args.limit, args.offset, args.shuffle)
    args.format = problems[0].format  # --format auto resolved: config, grading and reports name the real format
    return problems


def _config(args: argparse.Namespace, pair: str, base: DecodeSettings, samples: int) -> dict:
    settings = {k: v for k, v in base.as_dict().items() if k not in ("method", "rule")}
    return {
        "pair": pair,
        "data": str(args.data.resolve()),
        "format": args.format,
        "shuffle": args.shuffle,
        "samples": samples,
        "settings": settings,
        "command": " ".join(sys.argv),
    }


def run_eval(args: argparse.Namespace) -> int:
    import time

    from .lab.evaluate import parse_methods, run_evaluation
    from .lab.report import write_reports

    base = settings_from_args(args)
    variants = parse_methods(args.methods, base)
    if args.samples < 1:
        raise SettingsError("--samples", f"must be ≥ 1 (got {args.samples})")
    _check_batch_size(args)
    checked = _check_reproducible_flag(args, variants)
    problems = _problems(args)
    started = time.perf_counter()
    try:
        with _runner(args, len(problems) * args.samples) as (runner, pair):
            rows = run_evaluation(
                runner,
                problems,
                variants,
                args.samples,
                args.out,
                _config(args, pair, base, args.samples),
                args.resume,
                args.traces,
            )
            if checked:
                from .lab.reproduce import check_reproducible

                print(f"--check-reproducible: rerunning {checked} problem(s) in another order", file=sys.stderr)
                reproducibility = check_reproducible(runner.pair, problems, variants, rows, args.batch_size, checked)
    except KeyboardInterrupt:
        print(
            f"\ninterrupted: every finished problem is in {args.out / 'results.csv'}; rerun with --resume to continue",
            file=sys.stderr,
        )
        return 130
    summary, paired = write_reports(args.out, args.format)
    _print_tables(summary, paired)
    if checked:
        reproducibility.to_csv(args.out / "reproducibility.csv", index=False)
        _print_tables(reproducibility)
    print(f"wall time {time.perf_counter() - started:.0f} s; tables and report.html in {args.out}")
    return 0


def _check_reproducible_flag(args: argparse.Namespace, variants) -> int:
    """N of --check-reproducible N, checked before any model loads; 0 when not asked."""
    from .lab.reproduce import rerun_batch_size

    count = args.check_reproducible
    if count == 0:
        return 0
    if count < 0:
        raise SettingsError("--check-reproducible", f"must be a number of problems ≥ 1 (got {count})")
    if args.ray is not None:
        raise SettingsError("--check-reproducible", "reruns on this machine; drop --ray, or run it as a separate local eval")
    if not any(v.settings.method == "easd" for v in variants):
        raise SettingsError("--check-reproducible", "needs an EASD method in --methods, e.g. --methods sd,easd")
    rerun_batch_size(args.batch_size, count)
    return count


def _check_batch_size(args: argparse.Namespace) -> None:
    if args.batch_size < 1:
        raise SettingsError("--batch-size", f"must be an integer ≥ 1 (got {args.batch_size})")


@contextmanager
def _runner(args: argparse.Namespace, work: int):
    """(runner, the pair's description): the pair loaded here, or with --ray, Ray actors that each load it."""
    from .lab.evaluate import LocalRunner

    ray_flags = {"--ray-actors": args.ray_actors, "--ray-gpus-per-actor": args.ray_gpus_per_actor}
    if args.ray is None:
        stray = [flag for flag, value in ray_flags.items() if value is not None]
        if stray:
            raise SettingsError(stray[0], "needs --ray (it sizes the Ray actors)")
        pair = load_models(args)
        if args.batch_size > 1 and pair.info.get("int8") in ("draft", "both"):
            print(INT8_BATCH_NOTE, file=sys.stderr)
        yield LocalRunner(pair, args.batch_size), pair.describe()
        return
    from functools import partial

    from .lab.cluster import ClusterSettings, ray_runner

    cluster = ClusterSettings(
        args.ray, args.ray_actors, args.ray_cpus_per_actor, args.ray_gpus_per_actor, args.batch_size
    ).validate()
    load_pair = partial(load_models, _model_args(args))  # the flags' errors here, before any actor starts
    with ray_runner(load_pair, cluster, work) as runner:
        print(f"models: {runner.pair_description} on {len(runner.actors)} Ray actor(s)", file=sys.stderr)
        yield runner, runner.pair_description
        print(runner.summary())


INT8_BATCH_NOTE = (
    "note: the int8 draft quantizes each pass's activations with one scale for all its rows, so with --batch-size > 1 "
    "the draft's entropies and top-n (and so EASD's decisions) depend on the batch; SD's text does not. "
    "Use --batch-size 1 or no --int8 where EASD's decisions must be reproducible"
)


def _model_args(args: argparse.Namespace) -> argparse.Namespace:
    """Only the flags that name the pair and how it runs, checked: what `load_models` and each Ray actor need."""
    check_model_flags(args.pair, args.draft, args.target)
    runtime_of(args).checked()
    return argparse.Namespace(**{name: getattr(args, name) for name in ("pair", "draft", "target", "backend", "dtype", "int8")})


def runtime_of(args: argparse.Namespace):
    """How the flags say the pair runs (--backend, --dtype, --int8), as one object."""
    from .pairs.loading import Runtime

    if "," in args.backend:
        raise SettingsError("--backend", f"takes one backend here; only bench takes several (got {args.backend!r})")
    return Runtime(backend=args.backend, dtype=args.dtype, int8=args.int8)


def _print_tables(*tables) -> None:
    import pandas as pd

    with pd.option_context("display.width", 200, "display.max_columns", 30, "display.float_format", "{:.4f}".format):
        for table in tables:
            print(table.to_string(index=False), end="\n\n")


def run_calibrate(args: argparse.Namespace) -> int:
    from .lab.calibrate import calibrate, collect_entropies, write_calibration

    if args.max_new_tokens < 1:
        raise SettingsError("--max-new-tokens", f"must be ≥ 1 (got {args.max_new_tokens})")
    _check_batch_size(args)
    problems = _problems(args)
    pair = load_models(args)
    entropies = collect_entropies(pair, problems, DecodeSettings(max_new_tokens=args.max_new_tokens), args.batch_size)
    results = calibrate(entropies)
    write_calibration(args.out, results, entropies)
    for result in results:
        print(
            f"{result.model}: mean entropy of the top 5% of {result.tokens} greedy tokens = {result.raw:.3f} nats → τ_H = {result.tau_h:g}"
        )
    print(f"histograms: {args.out / 'calibration.html'}")
    return 0


def run_sweep(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from .lab.evaluate import Variant, grid_variants, run_evaluation
    from .lab.report import write_sweep

    base = settings_from_args(args)
    tau_hs, tau_os = _numbers("--tau-hs", args.tau_hs), _numbers("--tau-os", args.tau_os)
    variants = grid_variants(base, tau_hs, tau_os) + (
        [Variant("target", replace(base, method="target"))] if args.with_target else []
    )
    for variant in variants:
        variant.settings.validate()
    _check_batch_size(args)
    problems = _problems(args)
    try:
        with _runner(args, len(problems)) as (runner, pair):
            run_evaluation(runner, problems, variants, 1, args.out, _config(args, pair, base, 1), args.resume)
    except KeyboardInterrupt:
        print("\ninterrupted; rerun with --resume to continue", file=sys.stderr)
        return 130
    _print_tables(write_sweep(args.out, args.format))
    print(f"sweep.csv and sweep.html in {args.out}")
    return 0


# --- lm-eval ------------------------------------------------------------------------------------


def run_lm_eval(argv: list[str]) -> int:
    """lm-eval's own CLI with the easd model registered; `--model easd` unless another --model is given."""
    try:
        from lm_eval._cli import HarnessCLI
        from lm_eval.utils import setup_logging

        from .lab import harness
    except ImportError as err:
        raise EasdError(f"lm-eval: {err.name or 'lm_eval'} is not installed; pip install -r requirements-research.txt") from None
    if argv[:1] not in (["run"], ["ls"], ["validate"], ["-h"], ["--help"]):
        argv = ["run", *argv]  # lm-eval's own legacy form: flags without a subcommand mean `run`
    if argv[0] == "run" and not any(a == "--model" or a.startswith("--model=") for a in argv):
        argv = [*argv, "--model", harness.MODEL_NAME]
    setup_logging()
    cli = HarnessCLI()
    saved, sys.argv = sys.argv, ["python -m easd lm-eval", *argv]  # HarnessCLI reads sys.argv
    try:
        cli.execute(cli.parse_args())
    finally:
        sys.argv = saved
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["lm-eval"]:  # every flag after it is lm-eval's, so our parser must not see them
        try:
            return run_lm_eval(argv[1:])
        except EasdError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except EasdError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
