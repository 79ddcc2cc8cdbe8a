"""Flags shared by several commands, defined once: the models, decoding, data, batching and Ray;
and what the commands make of them (the settings, the pair, the problems)."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from ..errors import SettingsError, shown
from ..method.methods import METHODS, knobs, lookup, make_settings, owner, settings_values
from ..method.settings import DecodeSettings

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


def setting_help(name: str, values: str = "") -> str:
    """A setting's help, read the same on every command that takes it, in whatever shape: what it is and what a value
    must be, from its one declaration (easd.method.knobs); `values`, for a flag of several comma-separated values, says
    what each gives ("a row each of EASD", "the grid's points (--grid easd)"), and the range is then each value's."""
    knob = knobs()[name]
    if not values:
        return f"{knob.help} ({knob.describe()})"
    return f"{knob.help}; several, comma-separated, give {values} (each {knob.describe()})"


def add_decode_flags(
    parser: argparse.ArgumentParser,
    max_new_tokens: int | None = None,
    include: tuple[str, ...] | None = None,
    budget_by_format: bool = False,
    leave: tuple[str, ...] = (),
):
    """A flag for every setting (easd.method.methods.knobs: --tau-h, each method's own such as --mti-tau), made from
    its declaration, with its default; `include` keeps only those of the settings every method reads that it names
    (every method's own are always there, but those in `leave`, which the command declares its own way);
    `budget_by_format` leaves --max-new-tokens to the data's format (`apply_budget`)."""
    defaults = settings_values(DecodeSettings())
    group = parser.add_argument_group("decoding")
    titles = ", ".join(f"{name} ({method.title})" for name, method in METHODS.items())
    if include is None or "method" in include:
        group.add_argument("--method", default=defaults["method"], choices=tuple(METHODS), help=f"the decoding method: {titles}")
    for name, knob in knobs().items():
        common = owner(name)[0] is None
        if name in ("method", "record_top", *leave) or (common and include is not None and name not in include):
            continue
        flag, default = "--" + name.replace("_", "-"), defaults[name]
        if name == "max_new_tokens" and budget_by_format:
            from ..lab.grading.problems import BUDGETS

            budgets = ", ".join(f"{format} {tokens}" for format, tokens in BUDGETS.items())
            group.add_argument(flag, type=int, help=f"{knob.help}; default by the data's format: {budgets}")
        elif name == "max_new_tokens" and max_new_tokens is not None:
            group.add_argument(flag, type=int, default=max_new_tokens, help=knob.help)
        elif knob.choices:
            group.add_argument(flag, default=default, choices=knob.choices, help=knob.help)
        elif knob.kind == "text":  # shown in --help as typed (\n for a line break); argparse passes it through `type`
            group.add_argument(flag, type=line_breaks, default=default.replace("\n", "\\n"), help=knob.help)
        else:
            kind = int if knob.kind == "int" else float
            group.add_argument(flag, type=kind, default=default, help=setting_help(name))


def add_grid_flags(parser, methods, chooser: str = "--grid") -> None:
    """A list flag for every setting the grids of `methods` sweep (--tau-hs, --tau-os, --mti-taus, …), each made from
    its setting's declaration: its values, comma-separated, by default the setting's own grid (its one value where it
    declares none). `chooser`: the flag that picks the method, as the help names it (sweep's --grid)."""
    known = knobs()
    for setting in dict.fromkeys(name for method in methods for name in method.grid):
        knob, whose = known[setting], ", ".join(f"{chooser} {m.name}" for m in methods if setting in m.grid)
        default = ",".join(f"{value:g}" for value in knob.sweep) or None
        help = setting_help(setting, f"the grid's points ({whose})")
        help += "" if default else f"; default: --{setting.replace('_', '-')}'s one value"
        parser.add_argument(grid_flag(setting), default=default, help=help)


def grid_flag(setting: str) -> str:
    """The flag of a grid's values of a setting: --tau-hs for tau_h."""
    return "--" + setting.replace("_", "-") + "s"


def grid_of(args: argparse.Namespace, method, base: DecodeSettings) -> dict[str, list[float]]:
    """The values of each setting `method`'s grid sweeps, as its flags give them (SettingsError naming the flag)."""
    grid = {}
    for setting in method.grid:
        flag, knob = grid_flag(setting), knobs()[setting]
        text = getattr(args, flag[2:].replace("-", "_"))
        grid[setting] = numbers(flag, text) if text is not None else [settings_values(base)[setting]]
        for value in grid[setting]:  # each in the setting's own range, as its one-value flag checks it
            knob.check(flag, int(value) if knob.kind == "int" and value == int(value) else value)
    return grid


def add_tau_h_flags(parser: argparse.ArgumentParser) -> None:
    """--tau-h or --calibration: EASD's entropy threshold, given or calibrated, so that a folder records which."""
    group = parser.add_argument_group("τ_H")
    default = DecodeSettings().tau_h
    # "%(default).0s" prints nothing: it only keeps argparse from adding "(default: None)" after the true default
    calibrated = f"{setting_help('tau_h')}; default: --calibration's, else {default:g}%(default).0s"
    group.add_argument("--tau-h", type=float, help=calibrated)
    group.add_argument(
        "--calibration", type=Path, help="a calibration.json from `python -m easd calibrate`: τ_H is its target's value"
    )


def tau_h_of(args: argparse.Namespace) -> tuple[float, str]:
    """τ_H and where it came from: a calibration file's target value, --tau-h, or the default; both flags are refused."""
    if args.calibration is None:
        if args.tau_h is None:
            default = DecodeSettings().tau_h
            return default, f"not calibrated: the default {default:g}"
        return args.tau_h, f"not calibrated: --tau-h {args.tau_h:g}"
    if args.tau_h is not None:
        raise SettingsError("--tau-h", "and --calibration both set τ_H: give one")
    found = _calibration(Path(args.calibration))
    target = found["target"]
    draft = f"; the draft's {found['draft']['tau_h']:g}" if "draft" in found else ""
    return target["tau_h"], (
        f"calibrated: {Path(args.calibration).name}, the target's mean top-5% entropy {target['raw']:.3f} over "
        f"{target['tokens']:,} tokens → {target['tau_h']:g}{draft}"
    )


MAX_CALIBRATION_BYTES = 2**20  # `calibrate` writes a few hundred bytes


def _calibration(path: Path) -> dict[str, dict]:
    """A calibration.json's entries by model, each with its numbers checked; one line naming --calibration if it is
    not a file, too big, not UTF-8 JSON or not of `python -m easd calibrate`'s shape."""
    from ..errors import SHOWN_CHARS
    from ..files import read_json, read_text

    text = read_text(path, "--calibration", MAX_CALIBRATION_BYTES)
    try:
        found = {entry["model"]: entry for entry in read_json(text, f"--calibration: {path}")}
        for entry in found.values():
            entry["tau_h"], entry["raw"], entry["tokens"] = float(entry["tau_h"]), float(entry["raw"]), int(entry["tokens"])
        if "target" not in found:
            raise KeyError("target")
    except (ValueError, KeyError, TypeError, OverflowError) as err:
        raise SettingsError(
            "--calibration",
            f"{path} is not a calibration.json of `python -m easd calibrate` ({type(err).__name__}: {str(err)[:SHOWN_CHARS]})",
        ) from None
    return found


def line_breaks(text: str) -> str:
    """A flag's text with `\\n` and `\\t` as typed in a shell turned into a line break and a tab."""
    return text.replace("\\n", "\n").replace("\\t", "\t")


def settings_from_args(args: argparse.Namespace) -> DecodeSettings:
    """The settings the flags give (every setting the command has a flag for), checked."""
    settings = make_settings({name: getattr(args, name) for name in knobs() if hasattr(args, name)}).validate()
    lookup(settings.method)
    check_prm_flag(args, [settings.method])
    return settings


def check_prm_flag(args: argparse.Namespace, methods: list[str]) -> None:
    """RSD needs --prm: refused before any model loads."""
    if any(METHODS[m].needs_prm for m in methods if m in METHODS) and getattr(args, "prm", None) is None:
        raise SettingsError("--prm", "RSD asks a process reward model to score each step: give one (a folder or hub id)")


def numbers(option: str, text: str) -> list[float]:
    """Comma-separated finite numbers, each once, or SettingsError naming the option: every list flag (a grid's
    values, bench's rows and batch sizes) is read here."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    try:
        values = [float(part) for part in parts]
    except ValueError:
        values = []
    if not values:
        raise SettingsError(option, f"must be one or more numbers separated by commas (got {shown(text)})")
    for part, value in zip(parts, values):  # float() reads "nan" and "inf", and "1e309" as inf: none is a value
        if not math.isfinite(value):
            raise SettingsError(option, f"must be finite numbers separated by commas ({shown(part)} is not one)")
    # compared as a grid names its points (easd@1/0.8): two that print alike would be one point run twice, whose
    # rows share a name
    seen: dict[str, str] = {}
    for part, value in zip(parts, values):
        name = f"{value:g}"
        if name in seen:
            said = (
                f"{shown(part)} is given twice" if part == seen[name] else f"{shown(seen[name])} and {shown(part)} are one value"
            )
            raise SettingsError(option, f"{said}; give each value once")
        seen[name] = part
    return values


def whole_numbers(option: str, text: str, low: int = 1) -> list[int]:
    """Comma-separated whole numbers ≥ `low`, or SettingsError naming the option."""
    values = numbers(option, text)
    if min(values) < low or any(value != int(value) for value in values):
        raise SettingsError(option, f"must be whole numbers ≥ {low} separated by commas (got {text!r})")
    return [int(value) for value in values]


def folder(text: str) -> Path:
    """An output folder's flag as argparse reads it: a path, never the empty one (which would be the current folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty: give the folder to write in")
    return Path(text)


# --- data, batches, Ray -------------------------------------------------------------------------


def add_data_flags(parser: argparse.ArgumentParser, limit: int | None, required: bool = True) -> None:
    from ..lab.grading.problems import FORMATS, PROMPT_STYLES

    group = parser.add_argument_group("data")
    group.add_argument("--data", type=Path, required=required, help="a JSONL file of problems, or GPQA-Diamond's CSV")
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


def add_grader_flag(parser: argparse.ArgumentParser) -> None:
    from ..lab.grading.answers import GRADERS

    parser.add_argument(
        "--grader",
        default=GRADERS[0],
        choices=GRADERS,
        help="what marks an answer right: math-verify (ours) or qwen25-math (the Qwen2.5-Math harness's rules, which "
        "the paper's benchmarks use); the reports also print the other's verdicts where the two part",
    )


def apply_budget(args: argparse.Namespace) -> None:
    """--max-new-tokens, when not given, from the (resolved) format's budget."""
    from ..lab.grading.problems import BUDGETS

    if args.max_new_tokens is None:
        args.max_new_tokens = BUDGETS[args.format]


def problems(args: argparse.Namespace):
    """The problems the data flags select; --format auto is resolved in `args`."""
    from ..lab.grading.problems import default_style, load_problems

    for option in ("limit", "offset"):
        value = getattr(args, option)
        if value is not None and value < (1 if option == "limit" else 0):
            raise SettingsError(f"--{option}", f"must be {'≥ 1' if option == 'limit' else '≥ 0'} (got {value})")
    found = load_problems(args.data, args.format, args.limit, args.offset, args.shuffle, args.prompt_style)
    args.format = found[0].format  # config, grading and reports name the real format
    args.prompt_style = default_style(args.format) if args.prompt_style == "auto" else args.prompt_style
    return found


def add_batch_flag(parser: argparse.ArgumentParser) -> None:
    from ..lab.runs.evaluate import DEFAULT_BATCH_SIZE

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


def check_ray_flags(args: argparse.Namespace) -> None:
    """The flags that size Ray's actors, refused without --ray (before a folder is made or a model loads)."""
    if args.ray is None:
        given = {"--ray-actors": args.ray_actors, "--ray-gpus-per-actor": args.ray_gpus_per_actor}
        stray = [flag for flag, value in given.items() if value is not None]
        if stray:
            raise SettingsError(stray[0], "needs --ray (it sizes the Ray actors)")


def print_tables(*tables) -> None:
    import pandas as pd

    with pd.option_context("display.width", 200, "display.max_columns", 30, "display.float_format", "{:.4f}".format):
        for table in tables:
            print(table.to_string(index=False), end="\n\n")
