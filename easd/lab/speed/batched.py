"""`bench --batch-sizes`: total tokens/s with B rows a pass, beside transformers' own batched `generate`."""

from __future__ import annotations

import time
from dataclasses import replace

import torch

from ...method.generation import Generation
from ...method.pair import ModelPair
from ...method.prompts import encode_prompt
from ...method.references import PROPOSED, REFERENCE, SPEED_REFERENCE
from ...method.settings import DecodeSettings
from ...method.step import Batch
from .timing import PROMPTS, rotated


def run_batched_benchmark(pair: ModelPair, batch_sizes: list[int], max_new_tokens: int, k: int, tau_h: float) -> int:
    """Total tokens/s of target-only, SD and EASD with B rows per pass, next to transformers' batched
    `generate` (target-only, left padding) at the same B: the throughput a user would otherwise get.

    The B rows are the built-in prompts in turn. At each B the four methods run back to back in an
    order that rotates with B, so drifts of a shared machine's speed spread over them.
    """
    sd = DecodeSettings(method=REFERENCE, k=k, tau_h=tau_h, max_new_tokens=max_new_tokens)
    methods = {
        "target-only": lambda prompts: _batch(pair, prompts, replace(sd, method=SPEED_REFERENCE)),
        f"SD (k={k})": lambda prompts: _batch(pair, prompts, sd),
        f"EASD (k={k}, τ_H={tau_h:g})": lambda prompts: _batch(pair, prompts, replace(sd, method=PROPOSED)),
    }
    if pair.backend == "transformers":  # its own batched generate is the reference (llama-cpp-python has none)
        methods = {"transformers generate": lambda prompts: _generate_batched(pair, prompts, max_new_tokens)} | methods
    names = list(methods)
    print(
        f"bench: {pair.describe()}, batch sizes {batch_sizes}, {max_new_tokens} new tokens per row, greedy, {torch.get_num_threads()} threads"
    )
    for decode in methods.values():
        decode([PROMPTS[0][:40]] * 2)  # untimed warm-up
    reference = "transformers generate" if "transformers generate" in methods else "target-only"
    print(f"  {'B':>3} " + " ".join(f"{name:>24}" for name in names) + f" {'SD ÷ ' + reference:>28}")
    speeds = {}  # B -> method -> total tokens/s
    for turn, size in enumerate(batch_sizes):
        prompts = [PROMPTS[i % len(PROMPTS)] for i in range(size)]
        speed = speeds[size] = {}
        for i in rotated(len(names), turn):
            started = time.perf_counter()
            outputs = methods[names[i]](prompts)
            speed[names[i]] = sum(len(ids) for ids in outputs) / (time.perf_counter() - started)
        cells = " ".join(f"{speed[name]:>15.2f} tokens/s" for name in names)
        print(f"  {size:>3} {cells} {speed[f'SD (k={k})'] / speed[reference]:>27.2f}×", flush=True)
    if 1 in speeds and len(speeds) > 1:
        largest = max(speeds)
        scaling = ", ".join(f"{name} {speeds[largest][name] / speeds[1][name]:.2f}×" for name in names)
        print(f"total tokens/s at B = {largest} ÷ at B = 1: {scaling}")
    return 0


def _batch(pair: ModelPair, prompts: list[str], settings: DecodeSettings) -> list[list[int]]:
    return [trace.token_ids for trace in Batch(pair, [Generation(pair, p, settings) for p in prompts]).run()]


@torch.inference_mode()
def _generate_batched(pair: ModelPair, prompts: list[str], max_new_tokens: int) -> list[list[int]]:
    """transformers' own batched greedy decoding of the target, prompts left-padded; each row's tokens up to its EOS."""
    encoded = [encode_prompt(pair, p, chat=True) for p in prompts]
    width, pad = max(len(ids) for ids in encoded), pair.tokenizer.pad_id
    ids = torch.tensor([[pad] * (width - len(e)) + e for e in encoded], device=pair.device)
    mask = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in encoded], device=pair.device)
    out = pair.target.module.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=max_new_tokens, pad_token_id=pad)
    rows = []
    for row in out[:, width:].tolist():
        end = next((i for i, token in enumerate(row) if token in pair.eos_ids), len(row) - 1)
        rows.append(row[: end + 1])
    return rows
