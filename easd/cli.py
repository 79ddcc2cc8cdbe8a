"""`python -m easd`: generate with one method, or benchmark the methods against each other.

Errors a user can fix print one line naming the flag and exit with status 2, before any model
loads where possible, so a typo never costs a model load.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from pathlib import Path

from . import trace as trace_io
from .errors import EasdError, SettingsError
from .settings import METHODS, RULES, DecodeSettings


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (plus a pointer to --help) and exit status 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from .pairs import PAIRS

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
        "--k", type=int, default=4, help="draft tokens per block, for SD, EASD and constant-k assisted generation (1 to 64)"
    )
    bench.add_argument(
        "--tau-h",
        default="1.0",
        help="EASD entropy threshold(s) in nats (≥ 0): one EASD row per comma-separated value, e.g. 0.5,1,1.5,2",
    )
    bench.add_argument("--repeats", type=int, default=1, help="passes over the prompts; all of them count")
    bench.set_defaults(run=run_bench)

    listing = commands.add_parser("pairs", help="list the named model pairs, their size, memory and availability here")
    listing.set_defaults(run=run_pairs)
    return parser


def _add_model_flags(parser: argparse.ArgumentParser, pairs: dict) -> None:
    group = parser.add_argument_group("models")
    group.add_argument(
        "--pair", choices=sorted(pairs), help="a named pair (default: qwen-coder when installed, else tiny-random)"
    )
    group.add_argument("--draft", help="draft model: a local folder, a .gguf file or a hub id (with --target)")
    group.add_argument("--target", help="target model: a local folder, a .gguf file or a hub id (with --draft)")
    group.add_argument(
        "--dtype",
        default="auto",
        choices=("auto", "float32", "bfloat16"),
        help="weights' dtype; auto = bfloat16 where the hardware supports it (CUDA, or CPUs with AVX512-BF16/AMX), else float32",
    )
    group.add_argument(
        "--int8",
        default="none",
        choices=("none", "draft", "target", "both"),
        help="dynamic int8 weights, CPU only. 'draft' is faster and keeps SD lossless (the output is still exactly the "
        "target's; only the acceptance rate changes); 'target' or 'both' change the target itself, so the output is no "
        "longer the unquantized target's",
    )


def _add_decode_flags(parser: argparse.ArgumentParser) -> None:
    d = DecodeSettings()
    group = parser.add_argument_group("decoding")
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
    group.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens, help="most tokens to generate (≥ 1)")
    group.add_argument(
        "--seed", type=int, default=d.seed, help="random seed (≥ 0); SD and EASD with one seed agree until the first penalty"
    )


def settings_from_args(args: argparse.Namespace) -> DecodeSettings:
    values = {f.name: getattr(args, f.name) for f in fields(DecodeSettings) if hasattr(args, f.name)}
    return DecodeSettings(**values).validate()


def load_models(args: argparse.Namespace):
    """The pair the flags name, announced on stderr (stdout carries only the result)."""
    from .pairs import default_pair_name, load_named_pair

    if (args.draft is None) != (args.target is None):
        missing = "--target" if args.target is None else "--draft"
        raise SettingsError(missing, "is needed too: give --draft and --target together, or a --pair")
    if args.draft is not None and args.pair is not None:
        raise SettingsError("--pair", "cannot be combined with --draft/--target; choose one way to name the models")
    if args.draft is not None:
        from .models import load_pair

        pair = load_pair(args.draft, args.target, args.dtype, int8=args.int8)
    else:
        pair = load_named_pair(args.pair or default_pair_name(), args.dtype, args.int8)
    print(f"models: {pair.describe()}", file=sys.stderr)
    if pair.note:
        print(f"note: {pair.note}", file=sys.stderr)
    return pair


# --- generate -----------------------------------------------------------------------------------


def run_generate(args: argparse.Namespace) -> int:
    from .decoding import Generation

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
    parts.append(f"{summary['penalized']} penalized")
    parts.append(f"stop: {summary['stop_reason']}")
    return " | ".join(parts)


def _fmt(value, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


# --- bench --------------------------------------------------------------------------------------


def run_bench(args: argparse.Namespace) -> int:
    from .bench import run_benchmark

    if not 1 <= args.prompts <= 10:
        raise SettingsError("--prompts", f"must be from 1 to 10 (got {args.prompts})")
    if args.repeats < 1:
        raise SettingsError("--repeats", f"must be ≥ 1 (got {args.repeats})")
    tau_hs = _numbers("--tau-h", args.tau_h)
    for tau_h in tau_hs:
        DecodeSettings(k=args.k, tau_h=tau_h, max_new_tokens=args.max_new_tokens).validate()
    pair = load_models(args)
    return run_benchmark(pair, args.prompts, args.max_new_tokens, args.k, tau_hs, args.repeats)


def _numbers(option: str, text: str) -> list[float]:
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values:
        raise SettingsError(option, f"must be one or more numbers separated by commas (got {text!r})")
    return values


def run_pairs(args: argparse.Namespace) -> int:
    from .pairs import default_pair_name, pairs_table

    default = default_pair_name()
    for row in pairs_table():
        mark = " (default)" if row["pair"] == default else ""
        print(f"{row['pair']}{mark}: {row['draft → target']}")
        print(f"    {row['about']}")
        print(f"    size: {row['size']} | memory: {row['memory']} | available here: {row['available']} ({row['why']})")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except EasdError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
