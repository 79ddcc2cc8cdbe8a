"""`python -m easd lm-eval …`: EleutherAI's lm-evaluation-harness with EASD registered as its model `easd`.

Every flag after `lm-eval` is lm-eval's own, so `main` hands them over before our parser sees them."""

from __future__ import annotations

import argparse
import sys

from ..errors import EasdError

HELP = "lm-evaluation-harness with EASD as its model 'easd' (requirements-research.txt); every later flag is lm-eval's"
NAME = "lm-eval"


def add(parser: argparse.ArgumentParser) -> None:
    """lm-eval's flags are its own: this entry only lists the command in --help."""


def run_harness(argv: list[str]) -> int:
    """lm-eval's own CLI with the easd model registered; `--model easd` unless another --model is given."""
    try:
        from lm_eval._cli import HarnessCLI
        from lm_eval.utils import setup_logging

        from ..lab.runs import harness
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
