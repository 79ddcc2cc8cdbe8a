"""Time llama.cpp builds and kernel switches against each other: what `bench` cannot, because a process holds one
build of llama.cpp and reads EASD_LLAMA_KERNELS once. Each variant is an environment a fresh process runs in; every
repetition runs each variant once, in rotating order (A B C, B C A, …), and each process warms up before it times.

    python -m tools.builds --variant portable= --variant fast=EASD_LLAMA_KERNELS=fast --repeats 3
    python -m tools.builds --variant portable= --variant all-cpus=PYTHONPATH=/path/to/other/site-packages

A process times our target-only and SD (greedy, k 4) on the embedded pair over `bench`'s first prompts, and reports
the CPU kernels llama.cpp runs with (its system info). The parent prints each figure's median and spread over the
repetitions (easd.lab.reports.stats.spread), each variant's ratio to the first, paired by repetition, and whether greedy SD
equalled target-only token for token in every process. Figures and ratios: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys


def child(pair_name: str, prompts: int, max_new_tokens: int) -> None:
    """One process's figures, as one JSON line on stdout."""
    import time

    from easd.lab.speed.timing import PROMPTS
    from easd.method.generation import Generation
    from easd.method.references import REFERENCE, SPEED_REFERENCE
    from easd.method.settings import DecodeSettings
    from easd.pairs.loading import Runtime
    from easd.pairs.registry import load_named_pair

    pair = load_named_pair(pair_name, Runtime(backend="llama.cpp"))
    figures, tokens = {}, {}
    for method in (SPEED_REFERENCE, REFERENCE):
        settings = DecodeSettings(method=method, k=4, max_new_tokens=max_new_tokens)
        Generation(pair, PROMPTS[0][:40], settings).run()  # warm-up
        started, count = time.perf_counter(), 0
        tokens[method] = []
        for prompt in PROMPTS[:prompts]:
            trace = Generation(pair, prompt, settings).run()
            count += len(trace.token_ids)
            tokens[method].append(trace.token_ids)
        figures[method] = count / (time.perf_counter() - started)
    figures["sd_equals_target"] = tokens[REFERENCE] == tokens[SPEED_REFERENCE]
    figures["system"], figures["kernels"] = pair.info["llama_cpu"], pair.info["llama_kernels"]
    print(json.dumps(figures), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--variant", action="append", default=[], help="NAME=ENV: a name, then VAR=VALUE settings joined by commas"
    )
    parser.add_argument("--pair", default="qwen-coder", help="a named pair (python -m easd pairs), on llama.cpp")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.pair, args.prompts, args.max_new_tokens)
        return 0
    if not args.variant:
        parser.error("give at least one --variant NAME=ENV (NAME= for this environment as it is)")
    variants = dict(_variant(text) for text in args.variant)
    names = list(variants)
    runs: dict[str, list[dict]] = {name: [] for name in names}
    for repetition in range(args.repeats):
        for i in range(len(names)):
            name = names[(repetition + i) % len(names)]
            command = [sys.executable, "-m", "tools.builds", "--child", "--pair", args.pair, "--prompts", str(args.prompts)]
            command += ["--max-new-tokens", str(args.max_new_tokens)]
            done = subprocess.run(command, env=os.environ | variants[name], capture_output=True, text=True)
            if done.returncode != 0:
                ended = signal.Signals(-done.returncode).name if done.returncode < 0 else f"exit status {done.returncode}"
                print(f"{name}: its process ended with {ended}\n{done.stderr[-2000:]}", file=sys.stderr)
                return 1
            runs[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"repetition {repetition + 1}/{args.repeats}: {name} done", flush=True)
    report(runs)
    return 0


def report(runs: dict[str, list[dict]]) -> None:
    from easd.lab.reports.stats import spread
    from easd.method.references import REFERENCE, SPEED_REFERENCE

    methods = (SPEED_REFERENCE, REFERENCE)

    first = next(iter(runs))
    for name, figures in runs.items():
        print(f"{name}: {figures[0]['system']} (kernels: {figures[0]['kernels']})")
        for method in methods:
            print(f"  {method:<7} tokens/s  {spread([f[method] for f in figures]).line()}")
        if name != first:
            for method in methods:
                ratios = [f[method] / b[method] for f, b in zip(figures, runs[first], strict=True)]
                print(f"  {method:<7} ÷ {first}  {spread(ratios).line('{:.3f}')}")
        print(f"  SD ÷ target-only  {spread([f[REFERENCE] / f[SPEED_REFERENCE] for f in figures]).line('{:.3f}')}")
        print(f"  greedy SD equalled target-only in {sum(f['sd_equals_target'] for f in figures)} of {len(figures)} processes")


def _variant(text: str) -> tuple[str, dict[str, str]]:
    name, _, settings = text.partition("=")
    env = dict(setting.split("=", 1) for setting in settings.split(",") if setting)
    return name, env


if __name__ == "__main__":
    sys.exit(main())
