"""`python -m easd generate`: one method on one prompt, streamed to stdout, with a summary and traces."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import SettingsError
from ..method.summary import summarize
from ..traces import files as trace_io
from .flags import add_decode_flags, add_model_flags, load_models, settings_from_args

HELP = "generate text with one method and print a summary"


def add(parser: argparse.ArgumentParser) -> None:
    add_model_flags(parser)
    add_decode_flags(parser)
    prompt = parser.add_mutually_exclusive_group(required=True)
    prompt.add_argument("--prompt", help="the prompt text (sent through the chat template unless --no-chat)")
    prompt.add_argument("--prompt-file", type=Path, help="read the prompt from this UTF-8 file")
    parser.add_argument("--no-chat", action="store_true", help="send the prompt as raw text, without the chat template")
    parser.add_argument("--trace", type=Path, metavar="FILE.csv", help="write the per-token trace as CSV")
    parser.add_argument("--json", type=Path, metavar="FILE.json", help="write the trace as JSON, with settings and summary")


def run(args: argparse.Namespace) -> int:
    from ..method.methods import lookup

    settings = settings_from_args(args)
    prompt = _read_prompt(args)
    for option, path in (("--trace", args.trace), ("--json", args.json)):
        if path is not None and not path.parent.resolve().is_dir():
            raise SettingsError(option, f"the folder {path.parent} does not exist")
    pair = load_models(args)
    trace = _stream(pair, prompt, settings, chat=not args.no_chat)
    if args.trace:
        trace_io.write_csv([trace], args.trace)
    if args.json:
        trace_io.write_json([trace], args.json)
    print(summary_line(summarize(trace), lookup(trace.settings.method)))
    return 0


def _stream(pair, prompt: str, settings, chat: bool):
    """Decode, printing each token as it comes; Ctrl-C stops and keeps what was emitted.  -> the trace"""
    from ..method.generation import Generation

    generation = Generation(pair, prompt, settings, chat=chat)
    try:
        for block in generation:
            for record in block.records:
                print(record.token_text, end="", flush=True)
    except KeyboardInterrupt:
        print("\n[stopped]", end="")
    print()
    return generation.trace


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


def summary_line(summary: dict, method) -> str:
    """One line of a run's figures; its interventions in its method's words (EASD's penalties, MTI's guided tokens)."""
    parts = [f"{summary['new_tokens']} tokens", f"{_fmt(summary['tokens_per_s'], '.2f')} tokens/s"]
    parts.append(f"mean acceptance length {_fmt(summary['mean_acceptance_length'], '.2f')}")
    parts.append(f"draft acceptance rate {_fmt(summary['draft_acceptance_rate'], '.3f')}")
    if summary["conditional_acceptance"]:
        parts.append("by position " + " ".join(f"{rate:.2f}" for rate in summary["conditional_acceptance"]))
    parts.append(f"{summary['penalized']} penalized ({summary['fragile_penalties']} fragile)")
    parts.append(f"rule fired {summary['fired']} ({summary['fragile']} fragile decisions)")
    if method.intervenes:
        parts.append(f"{method.intervention[1]} {summary['interventions']}")
    parts.append(f"stop: {summary['stop_reason']}")
    return " | ".join(parts)


def _fmt(value, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)
