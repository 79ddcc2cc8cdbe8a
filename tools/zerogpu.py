"""`python -m tools.zerogpu`: the app's first two examples through the shared batch as on ZeroGPU, each call in a
freshly spawned process (EASD_SIMULATE_ZEROGPU's rules, easd.serving.zerogpu): prints what every call asked for and
did. The device check (scripts/device-check.sh) runs it on a GPU."""

from __future__ import annotations

import argparse
import functools
import json

from components.server import ASSETS
from easd.method.compare import Comparison
from easd.method.settings import DecodeSettings
from easd.pairs.loading import Runtime
from easd.pairs.registry import load_named_pair
from easd.serving.worker import Worker
from easd.serving.zerogpu import GpuCalls, in_a_fresh_process


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.zerogpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pair", default="qwen-coder", help="a pair of `python -m easd pairs` (default: qwen-coder)")
    parser.add_argument("--backend", default="transformers", help="transformers (ZeroGPU's) or llama.cpp")
    parser.add_argument("--dtype", default="auto", help="transformers' dtype: auto, float32 or bfloat16")
    parser.add_argument("--max-new-tokens", type=int, default=128, help="per lane, as the page's default")
    args = parser.parse_args(argv)
    load = functools.partial(load_named_pair, args.pair, Runtime(backend=args.backend, dtype=args.dtype))
    pair = load()
    examples = json.loads((ASSETS / "examples.json").read_text("utf-8"))  # the page's own examples, as app.py reads them
    calls = GpuCalls(args.pair, load, decode=in_a_fresh_process)  # whatever this machine is, every call crosses the boundary
    worker = Worker(pair, 4, 2048 + args.max_new_tokens, chunks=calls)
    print(f"ZeroGPU simulated (a spawned process per call): {pair.describe()}, {args.max_new_tokens} tokens per lane")
    for number, prompt in enumerate(examples[:2], 1):
        said = calls.describe_cost(args.max_new_tokens).replace("**", "")
        first = len(calls.calls)
        comparison = Comparison(pair, prompt, DecodeSettings(max_new_tokens=args.max_new_tokens))
        stream = worker.submit(comparison.generations.values())
        stream.join()
        if stream.error is not None:
            print(f"example {number}: failed: {stream.error}")
            return 1
        made = calls.calls[first:]
        print(f"example {number}: the page said: {said}")
        for call in made:
            print(f"  call: asked {call.asked_s} s, decoded {call.decoding_s:.1f} s, {call.tokens} tokens per row")
        print(f"  in all: {len(made)} call(s), {sum(c.asked_s for c in made)} GPU seconds asked")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
