"""EASD Lab web app: SD and EASD streamed side by side, with the reasons for every token.

    python app.py                          # the embedded default pair (qwen-coder when installed)
    python app.py --pair tiny-random       # seconds to start; gibberish text, every mechanism visible
    python app.py --pair none              # no model: view trace files only
    python app.py --draft ./small --target ./large --allow-pairs tiny-random

Every flag can also come from the environment, which is how a Hugging Face Space sets them: --max-batch is
EASD_MAX_BATCH, and so on (`from_environment`). The browser can only choose among the pairs allowed here.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from pathlib import Path

from components.page import SESSION_TTL_S
from components.server import ASSETS, serve
from components.wiring import build_app
from easd.cli import add_weight_flags, check_model_flags, runtime_of
from easd.errors import EasdError
from easd.pairs.loading import load_pair, loaded_with_prm
from easd.pairs.registry import PAIRS, default_pair_name, load_named_pair
from easd.serving.host import ModelHost
from easd.serving.metrics import ServingMetrics
from easd.serving.same_request import RESULTS_BYTES
from easd.serving.worker import ROW_ALLOWANCE, check_max_rows

# Every flag can come from the environment, which is how a Space sets them: --max-batch is EASD_MAX_BATCH, and so on.
ENVIRONMENT = "EASD_"
OTHER_NAMES = {"--eval-dir": ("EASD_EVAL_DIRS",), "--host": ("GRADIO_SERVER_NAME",), "--port": ("GRADIO_SERVER_PORT",)}
MAX_RESULT_CACHE_MB = 65536  # a typo's guard: results beyond this would take a machine's memory


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The flags, each from the command line or else the environment (see `from_environment`)."""
    parser = build_parser()
    return parser.parse_args(from_environment(parser) + list(sys.argv[1:] if argv is None else argv))


def from_environment(parser: argparse.ArgumentParser) -> list[str]:
    """The flags set in the environment, as arguments that go before the command line's (argparse keeps the last
    value, so the command line wins; a repeatable flag gets both). A flag's variable is its name in capitals after
    EASD_ (--max-batch: EASD_MAX_BATCH), or one of OTHER_NAMES; a repeatable flag's holds a list separated by
    os.pathsep. Values pass argparse's own checks, so a bad one is refused as the flag's would be."""
    arguments = []
    for action in parser._actions:  # argparse lists its flags nowhere public
        flag = next((name for name in action.option_strings if name.startswith("--")), None)
        if flag is None or flag == "--help":
            continue
        names = OTHER_NAMES.get(flag, (ENVIRONMENT + flag[2:].upper().replace("-", "_"),))
        value = next((os.environ[name] for name in names if os.environ.get(name)), "")
        values = value.split(os.pathsep) if isinstance(action.default, list) else [value]
        arguments += [part for one in values if one for part in (flag, one)]
    return arguments


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument(
        "--pair",
        help="pair loaded at start: a name from `python -m easd pairs`, or 'none' to only view traces (default: qwen-coder when installed, else tiny-random)",
    )
    parser.add_argument(
        "--allow-pairs",
        default="",
        help="more named pairs the browser may switch to, comma-separated; each loads on first use",
    )
    add_weight_flags(parser)  # the operator's own pair, backend, dtype and int8: the same flags as `python -m easd`
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (0.0.0.0 for every interface)",
    )
    parser.add_argument("--port", type=int, default=7860)
    parser.add_argument(
        "--max-new-tokens-cap",
        type=int,
        default=256,
        help="the most tokens a browser may ask for per run",
    )
    parser.add_argument(
        "--max-batch",
        type=int,
        default=None,
        help="rows every user shares in one batch (a comparison is 2 rows); more users wait in line "
        "(default: as many as fit in half the free memory with --max-new-tokens-cap tokens each, at most 32)",
    )
    parser.add_argument(
        "--row-allowance",
        type=int,
        default=ROW_ALLOWANCE,
        help="rows of the shared batch one lane may use a step, on average, while others decode: a lane holding more "
        "(SMC-SD's particles, SpecGuard's candidates, beams) steps less often, so that it slows itself and not the "
        "other users' lanes (2: an SD lane beside SMC-SD kept 0.73× its speed, against 0.51× with none, docs/benchmarks.md; 0: no limit)",
    )
    parser.add_argument(
        "--max-queued-per-client",
        type=int,
        default=2,
        help="generations one browser tab or API client may have running or waiting; more are refused as busy",
    )
    parser.add_argument(
        "--max-per-address",
        type=int,
        default=None,
        help="generations one network address may have running or waiting (default: half of what the batch and its line hold)",
    )
    parser.add_argument(
        "--result-cache-mb",
        type=float,
        default=RESULTS_BYTES / 2**20,
        help="megabytes of finished results kept per pair and replayed at once to the same request (0: none)",
    )
    parser.add_argument(
        "--forwarded-allow-ips",
        default="",
        help="proxies (addresses or networks, comma-separated) whose X-Forwarded-For header names the user's address; "
        "by default nobody's is trusted and the connection's own address counts",
    )
    parser.add_argument(
        "--session-ttl",
        type=float,
        default=SESSION_TTL_S,
        help="seconds after its last run or load that a session's traces and files are deleted (closing the tab deletes them at once)",
    )
    parser.add_argument(
        "--metrics",
        choices=("on", "off"),
        default="off",
        help="on: GET /metrics serves the shared batch's figures in Prometheus' text format (requests, the line, rows, "
        "tokens, drafts and acceptances, interventions, stops; never a prompt or a text)",
    )
    parser.add_argument(
        "--mcp",
        choices=("on", "off"),
        default="off",
        help="on: an MCP server at /gradio_api/mcp/ offers one tool, compare_briefly, that runs two methods on a prompt "
        "and returns both texts, the interventions and the acceptance figures (the API's limits apply)",
    )
    parser.add_argument(
        "--eval-dir",
        action="append",
        default=[],
        help="an output folder of `python -m easd eval` the Evaluation tab may open; repeat for more",
    )
    return parser


def make_host(args: argparse.Namespace) -> ModelHost:
    """The pairs the operator allows, by name; nothing the browser sends can add to them."""
    if min(args.max_new_tokens_cap, args.max_queued_per_client, args.max_per_address or 1) < 1:
        sys.exit("error: --max-new-tokens-cap, --max-queued-per-client and --max-per-address must be at least 1")
    if not args.session_ttl > 0:
        sys.exit(f"error: --session-ttl must be a number of seconds > 0 (got {args.session_ttl})")
    if args.row_allowance < 0:
        sys.exit(f"error: --row-allowance must be a whole number of rows ≥ 0, 0 for no limit (got {args.row_allowance})")
    if not 0 <= args.result_cache_mb <= MAX_RESULT_CACHE_MB:
        sys.exit(f"error: --result-cache-mb must be from 0 to {MAX_RESULT_CACHE_MB} (got {args.result_cache_mb})")
    allowed = {}
    try:
        if args.max_batch is not None:
            check_max_rows(args.max_batch)
        check_model_flags(None, args.draft, args.target)
        runtime = runtime_of(args).checked()
    except EasdError as err:
        sys.exit(f"error: {err}")
    if args.draft:
        allowed["custom"] = functools.partial(load_pair, args.draft, args.target, runtime)
    elif (name := args.pair or default_pair_name()) != "none":
        allowed[name] = None
    for name in [n.strip() for n in args.allow_pairs.split(",") if n.strip()]:
        allowed.setdefault(name, None)
    unknown = [name for name in allowed if name != "custom" and name not in PAIRS]
    if unknown:
        sys.exit(f"error: unknown pair(s) {', '.join(unknown)}; choose from {', '.join(PAIRS)} or 'none'")
    loaders = {name: loader or functools.partial(load_named_pair, name, runtime) for name, loader in allowed.items()}
    if args.prm is not None:  # RSD's process reward model, loaded with every pair the app serves
        loaders = {name: functools.partial(loaded_with_prm, load, args.prm, runtime) for name, load in loaders.items()}
    default = next(iter(loaders), None)
    return ModelHost(
        loaders,
        default,
        max_new_tokens_cap=args.max_new_tokens_cap,
        max_batch=args.max_batch,
        row_allowance=args.row_allowance or None,
        max_queued_per_client=args.max_queued_per_client,
        max_per_address=args.max_per_address,
        result_bytes=int(args.result_cache_mb * 2**20),
        metrics=ServingMetrics() if args.metrics == "on" else None,
    )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    missing = [folder for folder in args.eval_dir if not (Path(folder) / "results.csv").is_file()]
    if missing:
        sys.exit(f"error: --eval-dir {missing[0]} holds no results.csv (the output folder of `python -m easd eval`)")
    host = make_host(args)
    if host.default is not None:
        host.ensure_loading(host.default)  # start now, so the first visitor finds it loading or ready
    examples = json.loads((ASSETS / "examples.json").read_text(encoding="utf-8"))
    mcp = args.mcp == "on"
    demo = build_app(host, examples, eval_dirs=args.eval_dir, session_ttl_s=args.session_ttl, mcp=mcp)
    serve(demo, args.host, args.port, forwarded_allow_ips=args.forwarded_allow_ips, metrics=host.metrics, mcp=mcp)


if __name__ == "__main__":
    main()
