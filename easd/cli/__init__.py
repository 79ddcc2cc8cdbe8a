"""`python -m easd`: the command line, one module per command (generate, bench, pairs, methods, eval, study,
acceptance, calibrate, sweep, table, export-html, site, lm-eval), each with its flags and its runner side by side;
the flags several share are in `flags`.

Errors a user can fix print one line naming the flag and exit with status 2, before any model loads
where possible, so a typo never costs a model load.
"""

from __future__ import annotations

import argparse
import sys

from ..errors import EasdError
from . import bench, calibrate, dynamics, evaluate, export_html, generate, lm_eval, methods, pairs, site, study, sweep, table
from .flags import add_weight_flags, check_model_flags, runtime_of

COMMANDS = (
    generate,
    bench,
    pairs,
    methods,
    evaluate,
    study,
    dynamics,
    table,
    calibrate,
    sweep,
    export_html,
    site,
    lm_eval,
)  # in --help's order
__all__ = ["add_weight_flags", "build_parser", "check_model_flags", "main", "runtime_of"]


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (plus a pointer to --help) and exit status 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="python -m easd", description="Entropy-aware speculative decoding (EASD) vs speculative decoding (SD)."
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for command in COMMANDS:
        name = getattr(command, "NAME", command.__name__.rsplit(".", 1)[-1])
        sub = commands.add_parser(
            name, help=command.HELP, formatter_class=argparse.ArgumentDefaultsHelpFormatter, add_help=command is not lm_eval
        )
        command.add(sub)
        sub.set_defaults(run=getattr(command, "run", None))
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv[:1] == ["lm-eval"]:  # every flag after it is lm-eval's, so our parser must not see them
            return lm_eval.run_harness(argv[1:])
        args = build_parser().parse_args(argv)
        return args.run(args)
    except EasdError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
