"""Flags shared by several commands, defined once: the models, decoding, data, batching and Ray;
and what the commands make of them (the settings, the pair, the problems)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from pathlib import Path

from ..errors import SettingsError
from ..method.methods import METHODS
from ..method.settings import RULES, SIGNALS, DecodeSettings

# --- models -------------------------------------------------------------------------------------


def add_model_flags(parser: argparse.ArgumentParser) -> None:
    from ..pairs.registry import PAIRS

    group = parser.add_argument_group("models")
    group.add_argument(
        "--pair", choices=sorted(PAIRS), help="a named pair (default: qwen-coder when installed, else tiny-random)"
    )
    add_weight_flags(group)


def add_weight_flags(parser) -> None:
    """--draft, --target, --backend, --dtype and --int8, for the CLI and app.py."""
    from ..backends import BACKENDS, DTYPES, INT8

    parser.add_argument("--draft", help="draft model: a folder, a .gguf file or a hub id (with --target)")
    parser.add_argument("--target", help="target model: a folder, a .gguf file or a hub id (with --draft)")
    parser.add_argument(
        "--backend",
        default="auto",
        help=f"{', '.join(BACKENDS)}; auto = llama.cpp for GGUF files on a CPU, else transformers",
    )
    parser.add_argument("--dtype", default="auto", choices=DTYPES, help="transformers' dtype; auto = bfloat16 where native")
    parser.add_argument("--int8", default="none", choices=INT8, help="transformers on a CPU: dynamic int8 weights for these")
    parser.add_argument("--prm", help="RSD's process reward model: a folder or hub id in Skywork's PRM layout (transformers)")


def check_model_flags(pair: str | None, draft: str | None, target: str | None) -> None:
    """--draft and --target come together, and never with a --pair (SettingsError naming the flag)."""
    if (draft is None) != (target is None):
        missing = "--target" if target is None else "--draft"
        raise SettingsError(missing, "is needed too: give --draft and --target together, or a --pair")
    if draft is not None and pair is not None:
        raise SettingsError("--pair", "cannot be combined with --draft/--target; choose one way to name the models")


def runtime_of(args: argparse.Namespace):
    """How the flags say the pair runs (--backend, --dtype, --int8), as one object."""
    from ..pairs.loading import Runtime

    if "," in args.backend:
        raise SettingsError("--backend", f"takes one backend here; only bench takes several (got {args.backend!r})")
    return Runtime(backend=args.backend, dtype=args.dtype, int8=args.int8)


def model_args(args: argparse.Namespace) -> argparse.Namespace:
    """Only the flags that name the pair and how it runs, checked: what `load_models` and each Ray actor need."""
    check_model_flags(args.pair, args.draft, args.target)
    runtime_of(args).checked()
    names = ("pair", "draft", "target", "backend", "dtype", "int8", "prm")
    return argparse.Namespace(**{name: getattr(args, name) for name in names})


def load_models(args: argparse.Namespace):
    """The pair the flags name, announced on stderr (stdout carries only the result)."""
    from ..pairs.loading import load_pair, with_prm
    from ..pairs.registry import default_pair_name, load_named_pair

    args = model_args(args)
    if args.draft is not None:
        pair = load_pair(args.draft, args.target, runtime_of(args))
    else:
        pair = load_named_pair(args.pair or default_pair_name(), runtime_of(args))
    pair = with_prm(pair, args.prm, runtime_of(args))
    print(f"models: {pair.describe()}", file=sys.stderr)
    if pair.note:
        print(f"note: {pair.note}", file=sys.stderr)
    return pair


# --- decoding -----------------------------------------------------------------------------------


def add_decode_flags(
    parser: argparse.ArgumentParser,
    max_new_tokens: int | None = None,
    include: tuple[str, ...] | None = None,
    budget_by_format: bool = False,
):
    """The DecodeSettings flags (those in `include`, or all), with the settings' defaults; `budget_by_format` leaves
    --max-new-tokens to the data's format (`apply_budget`)."""
    d = DecodeSettings()
    group = _Only(parser.add_argument_group("decoding"), include)
    group.add_argument("--method", default=d.method, choices=tuple(METHODS), help="target-only, draft-only, SD, EASD, MTI or RSD")
    group.add_argument("--rule", default=d.rule, choices=RULES, help="EASD's trigger rule: full, or one of the paper's ablations")
    group.add_argument("--k", type=int, default=d.k, help="draft tokens per block (1 to 64)")
    group.add_argument("--tau-h", type=float, default=d.tau_h, help="entropy threshold τ_H in nats (≥ 0)")
    group.add_argument("--tau-o", type=float, default=d.tau_o, help="overlap threshold τ_O in [0, 1]")
    group.add_argument("--top-n", type=int, default=d.top_n, help="n, the size of the top-n sets compared (1 to 100)")
    group.add_argument("--temperature", type=float, default=d.temperature, help="0 = greedy, else at least 0.001")
    group.add_argument("--top-p", type=float, default=d.top_p, help="nucleus mass in [0.001, 1]")
    if budget_by_format:
        from ..lab.problems import BUDGETS

        budgets = ", ".join(f"{name} {tokens}" for name, tokens in BUDGETS.items())
        group.add_argument("--max-new-tokens", type=int, help=f"most new tokens (≥ 1); default by the data's format: {budgets}")
    else:
        group.add_argument("--max-new-tokens", type=int, default=max_new_tokens or d.max_new_tokens, help="most new tokens (≥ 1)")
    group.add_argument("--seed", type=int, default=d.seed, help="random seed (≥ 0)")
    group.add_argument(
        "--signals", default=d.signals, choices=SIGNALS, help="logits the rule reads: float32, or the model's dtype"
    )
    group.add_argument(
        "--mti-tau", type=float, default=d.mti_tau, help="MTI: guide where the target's entropy exceeds this (nats)"
    )
    group.add_argument("--mti-omega", type=float, default=d.mti_omega, help="MTI: guidance strength ω (1 to 10; 1 = none)")
    group.add_argument("--mti-negative", default=d.mti_negative, help="MTI: the negative prompt put after the context")
    group.add_argument("--rsd-delta", type=float, default=d.rsd_delta, help="RSD: keep a draft step whose PRM reward ≥ δ")
    group.add_argument(
        "--rsd-delimiter",
        type=line_breaks,
        default=d.rsd_delimiter.replace("\n", "\\n"),  # shown in --help as typed; argparse passes it through `type`
        help="RSD: the text that ends a reasoning step (write \\n for a line break)",
    )


def line_breaks(text: str) -> str:
    """A flag's text with `\\n` and `\\t` as typed in a shell turned into a line break and a tab."""
    return text.replace("\\n", "\n").replace("\\t", "\t")


class _Only:
    """An argument group that adds only the flags in `include` (all when None), so commands share one definition."""

    def __init__(self, group, include: tuple[str, ...] | None):
        self.group, self.include = group, include

    def add_argument(self, flag: str, **kwargs):
        if self.include is None or flag.removeprefix("--").replace("-", "_") in self.include:
            self.group.add_argument(flag, **kwargs)


def settings_from_args(args: argparse.Namespace) -> DecodeSettings:
    values = {f.name: getattr(args, f.name) for f in fields(DecodeSettings) if hasattr(args, f.name)}
    settings = DecodeSettings(**values).validate()
    check_prm_flag(args, [settings.method])
    return settings


def check_prm_flag(args: argparse.Namespace, methods: list[str]) -> None:
    """RSD needs --prm: refused before any model loads."""
    if any(METHODS[m].needs_prm for m in methods if m in METHODS) and getattr(args, "prm", None) is None:
        raise SettingsError("--prm", "RSD asks a process reward model to score each step: give one (a folder or hub id)")


def numbers(option: str, text: str) -> list[float]:
    """Comma-separated numbers, or SettingsError naming the option."""
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values:
        raise SettingsError(option, f"must be one or more numbers separated by commas (got {text!r})")
    return values


def whole_numbers(option: str, text: str) -> list[int]:
    """Comma-separated whole numbers ≥ 1, or SettingsError naming the option."""
    values = numbers(option, text)
    if min(values) < 1 or any(value != int(value) for value in values):
        raise SettingsError(option, f"must be whole numbers ≥ 1 separated by commas (got {text!r})")
    return [int(value) for value in values]


# --- data, batches, Ray -------------------------------------------------------------------------


def add_data_flags(parser: argparse.ArgumentParser, limit: int | None) -> None:
    from ..lab.problems import FORMATS, PROMPT_STYLES

    group = parser.add_argument_group("data")
    group.add_argument("--data", type=Path, required=True, help="a JSONL file of problems, or GPQA-Diamond's CSV")
    group.add_argument("--format", default="auto", choices=("auto", *FORMATS), help="auto detects it from the first record")
    group.add_argument("--limit", type=int, default=limit, help="how many problems (after --shuffle and --offset)")
    group.add_argument("--offset", type=int, default=0, help="skip this many problems first")
    group.add_argument("--shuffle", type=int, metavar="SEED", help="take the problems in an order shuffled with this seed")
    group.add_argument(
        "--prompt-style",
        default="auto",
        choices=("auto", *PROMPT_STYLES),
        help="how a problem is asked: qwen25-math-cot (the Qwen2.5-Math evaluation's system prompt, the question bare) "
        "or easd (our instruction after the question); auto: qwen25-math-cot for the math formats, easd for choice and gpqa",
    )


def apply_budget(args: argparse.Namespace) -> None:
    """--max-new-tokens, when not given, from the (resolved) format's budget."""
    from ..lab.problems import BUDGETS

    if args.max_new_tokens is None:
        args.max_new_tokens = BUDGETS[args.format]


def problems(args: argparse.Namespace):
    """The problems the data flags select; --format auto is resolved in `args`."""
    from ..lab.problems import default_style, load_problems

    for option in ("limit", "offset"):
        value = getattr(args, option)
        if value is not None and value < (1 if option == "limit" else 0):
            raise SettingsError(f"--{option}", f"must be {'≥ 1' if option == 'limit' else '≥ 0'} (got {value})")
    found = load_problems(args.data, args.format, args.limit, args.offset, args.shuffle, args.prompt_style)
    args.format = found[0].format  # config, grading and reports name the real format
    args.prompt_style = default_style(args.format) if args.prompt_style == "auto" else args.prompt_style
    return found


def add_batch_flag(parser: argparse.ArgumentParser) -> None:
    from ..lab.evaluate import DEFAULT_BATCH_SIZE

    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="rows decoded together; 1 = one at a time")


def check_batch_size(args: argparse.Namespace) -> None:
    if args.batch_size < 1:
        raise SettingsError("--batch-size", f"must be an integer ≥ 1 (got {args.batch_size})")


def add_ray_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Ray cluster (pip install -r requirements-cluster.txt)")
    group.add_argument(
        "--ray", nargs="?", const="local", metavar="ADDRESS", help="decode on Ray actors; no ADDRESS starts a local cluster"
    )
    group.add_argument("--ray-actors", type=int, help="actors (default: the cluster's GPUs, or CPUs ÷ --ray-cpus-per-actor)")
    group.add_argument("--ray-cpus-per-actor", type=int, default=1, help="CPUs per actor, also its torch threads")
    group.add_argument("--ray-gpus-per-actor", type=float, help="GPUs per actor (default: 1 when the cluster has GPUs)")


def print_tables(*tables) -> None:
    import pandas as pd

    with pd.option_context("display.width", 200, "display.max_columns", 30, "display.float_format", "{:.4f}".format):
        for table in tables:
            print(table.to_string(index=False), end="\n\n")
