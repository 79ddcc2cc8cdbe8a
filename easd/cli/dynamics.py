"""`python -m easd acceptance`: where SD accepts, by Spec-Bench category and task domain: acceptance in vLLM's terms,
by draft position, against both models' entropy, and how often EASD's penalty would fire (easd.lab.acceptance.dynamics)."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

from ..errors import SettingsError
from ..method.methods import settings_values
from ..method.references import REFERENCE
from .flags import (
    add_decode_flags,
    add_model_flags,
    add_tau_h_flags,
    folder,
    load_models,
    model_args,
    settings_from_args,
    tau_h_of,
)

NAME = "acceptance"
HELP = "where SD accepts, by Spec-Bench category and task domain: by draft position, against entropy, where EASD would fire"


def add(parser: argparse.ArgumentParser) -> None:
    add_model_flags(parser)
    data = parser.add_argument_group("data")
    data.add_argument("--data", type=Path, help="Spec-Bench's question file (data/spec_bench/question.jsonl), or one like it")
    data.add_argument("--per-category", type=int, default=10, help="questions per category, the first in file order (≥ 1)")
    data.add_argument("--skip-long", action="store_true", help="leave out questions that may not fit the pair's context")
    add_decode_flags(
        parser,
        include=("k", "tau_o", "top_n", "rule", "temperature", "top_p", "max_new_tokens", "seed", "signals", "entropy"),
    )
    add_tau_h_flags(parser)
    parser.add_argument("--out", type=folder, required=True, help="the folder: questions/, figures.json, report.md, report.html")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out: decode only the questions it lacks")
    parser.add_argument("--report-only", action="store_true", help="decode nothing: write the report from --out as it is")


def run(args: argparse.Namespace) -> int:
    from ..lab.acceptance import dynamics
    from ..lab.speed import specbench
    from ..pairs.registry import default_pair_name

    if args.report_only:
        return _report(args.out)
    if args.data is None:
        raise SettingsError("--data", "is needed to decode: Spec-Bench's question.jsonl (or --report-only to redraw the report)")
    if args.per_category < 1:
        raise SettingsError("--per-category", f"must be ≥ 1 (got {args.per_category})")
    questions = specbench.load_questions(args.data, args.per_category, "--data")
    twice = _repeated_id(questions)
    if twice is not None:
        raise SettingsError("--data", f"question id {twice!r} appears twice in {args.data}; each question needs its own id")
    args.tau_h, source = tau_h_of(args)
    settings = replace(settings_from_args(args), method=REFERENCE).validate()
    models = vars(model_args(args))
    if models["draft"] is None and models["pair"] is None:
        models["pair"] = default_pair_name()  # a folder records the pair it ran on, not "the default"
    config = {
        "models": models,
        "data": str(args.data.resolve()),
        "settings": {k: v for k, v in settings_values(settings).items() if k != "method"},
        "per_category": args.per_category,
        "tau_h_source": source,
        "command": dynamics.command_line(),
    }
    dynamics.check_folder(args.out, config, args.resume)
    started = time.perf_counter()
    pair = load_models(args)
    questions, skipped = specbench.fitting(pair, questions, settings.max_new_tokens, args.skip_long, "--data")
    config |= {"pair": pair.describe(), "skipped": [q.question_id for q in skipped]}
    try:
        dynamics.run_questions(pair, questions, settings, args.out, config)
    except KeyboardInterrupt:
        print(f"\ninterrupted: every finished question is in {args.out}; rerun with --resume", file=sys.stderr)
        return 130
    code = _report(args.out)
    print(f"wall time {time.perf_counter() - started:.0f} s, model loading and the report included", file=sys.stderr)
    return code


def _repeated_id(questions) -> int | str | None:
    """The first question id given twice (as its file names it: 7 and "7" are one), or None."""
    seen = set()
    for question in questions:
        key = str(question.question_id)
        if key in seen:
            return question.question_id
        seen.add(key)
    return None


def _report(out: Path) -> int:
    from ..lab.acceptance.dynamics import analyse, write_report

    found = analyse(out)  # refused in one line where --out holds no acceptance run, or one cut short
    write_report(out, found)
    print((out / "report.md").read_text(encoding="utf-8"))
    print(f"report: {out / 'report.html'}")
    return 0
