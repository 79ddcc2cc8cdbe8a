"""`bench --beside`: what one user's choice costs another's lane in a class (easd.method.step.Batch's row allowance)."""

from __future__ import annotations

import time
from dataclasses import replace

import torch

from ...method.generation import Generation
from ...method.methods import lookup, with_values
from ...method.pair import ModelPair
from ...method.references import REFERENCE
from ...method.settings import DecodeSettings
from ...method.step import Batch
from ...method.trace import Trace
from ..reports.stats import spread
from .timing import BenchPlan, Row, rotated

NEIGHBOUR_TOKENS = 4  # × the lane's new tokens: the neighbour still decodes when the lane ends (an early EOS is said)


def run_beside_benchmark(pair: ModelPair, plan: BenchPlan, neighbours: list[str], allowances: list[int]) -> int:
    """What one user's choice costs another's lane in a class: an SD lane's tokens/s in a batch beside one generation
    of each neighbour method (SMC-SD's particles, SpecGuard's candidates, beams: a group of rows), at each row
    allowance (easd.method.step.Batch; 0: none), against beside another SD generation, with the passes each step took.

    The lane decodes a prompt greedily at SD's settings; the neighbour decodes the next prompt at its own method's,
    for up to NEIGHBOUR_TOKENS × as many tokens, and the lane's speed is counted only while the neighbour decodes.
    The rows take turns in an order that rotates from prompt to prompt, as the timed comparison's rows do.
    """
    base = with_values(DecodeSettings(method=REFERENCE, k=plan.ks[0], max_new_tokens=plan.max_new_tokens), **plan.own)
    settings = {}
    for name in dict.fromkeys([REFERENCE, *neighbours]):
        chosen = with_values(base, method=name, max_new_tokens=NEIGHBOUR_TOKENS * plan.max_new_tokens)
        lookup(name).check(pair, chosen)  # a method this backend cannot run is refused before anything is timed
        settings[name] = chosen
    reference = (REFERENCE, 0)  # beside another SD lane: no allowance changes it
    keys = [reference, *((name, allowance) for name in settings if name != REFERENCE for allowance in allowances)]
    print(f"bench: {pair.describe()}")
    print(
        f"an SD lane (k={plan.ks[0]}, greedy, {plan.max_new_tokens} new tokens) in a batch beside one generation of each "
        f"method, {len(plan.prompts)} prompts × {plan.repeats}, {torch.get_num_threads()} threads"
    )
    rows = {key: Row(f"SD beside {lookup(key[0]).title}" + (f", allowance {key[1]}" if key[1] else "")) for key in keys}
    lanes: dict[tuple, list[tuple[Trace, Trace]]] = {key: [] for key in keys}  # (the lane's trace, the neighbour's)
    for name, allowance in keys:  # untimed warm-up on short prompts
        short = replace(base, max_new_tokens=8)
        _beside(pair, plan.prompts[0][:40], plan.prompts[-1][:40], short, settings[name], allowance or None)
    for repetition in range(plan.repeats):
        for i, prompt in enumerate(plan.prompts):
            other = plan.prompts[(i + 1) % len(plan.prompts)]
            for j in rotated(len(keys), repetition * len(plan.prompts) + i):
                name, allowance = keys[j]
                tokens, seconds, lane, neighbour = _beside(pair, prompt, other, base, settings[name], allowance or None)
                lap = rows[keys[j]].laps.setdefault(repetition, [0, 0.0])
                lap[0], lap[1] = lap[0] + tokens, lap[1] + seconds
                lanes[keys[j]].append((lane, neighbour))
    print(
        f"  {'the lane':<44} {'tokens/s':>9}  {'÷ beside SD':>11}  {'rows a target pass':>18}  {'passes a step: draft, target':>29}"
    )
    for key in keys:
        row = rows[key]
        draft, target, served = _passes_a_step([lane for lane, _ in lanes[key]])
        ratio = row.tokens_per_s / rows[reference].tokens_per_s
        print(f"  {row.name:<44} {row.tokens_per_s:>9.2f}  {ratio:>10.2f}×  {served:>18.2f}  {draft:>15.2f}, {target:.2f}")
        if plan.repeats > 1:
            print(f"  {'':<44} {spread(row.speeds()).line()}")
            if key != reference:
                ratios = [a / b for a, b in zip(row.speeds(), rows[reference].speeds())]
                print(f"  {'':<44} ÷ beside SD: {spread(ratios).line('{:.3f}×')}")
        going = (None, "stopped")
        short = sum(1 for lane, other in lanes[key] if other.stats.stop_reason not in going and lane.stats.stop_reason in going)
        if short:
            print(f"  {'':<44} ({short} of {len(lanes[key])} neighbours ended before the lane: counted until they did)")
    return 0


def _beside(
    pair: ModelPair, prompt: str, other: str, lane_settings: DecodeSettings, neighbour: DecodeSettings, allowance: int | None
) -> tuple:
    """The lane's tokens and seconds while a neighbour shares its batch, and both generations' traces."""
    lane, other_generation = Generation(pair, prompt, lane_settings), Generation(pair, other, neighbour)
    started, tokens, seconds = time.perf_counter(), 0, 0.0
    steps = iter(Batch(pair, [lane, other_generation], allowance=allowance))
    try:
        for block in steps:
            if block.generation is lane:
                tokens, seconds = len(lane.tokens) - lane.prompt_length, time.perf_counter() - started
            if lane.done or other_generation.done:
                break
    finally:
        steps.close()
    return tokens, seconds, lane.trace, other_generation.trace


def _passes_a_step(traces: list[Trace]) -> tuple[float, float, float]:
    """The lane's draft and target passes a step, and the rows a target pass served, over its runs."""
    steps = sum(len(t.blocks) for t in traces) or 1
    target = sum(t.stats.target_calls for t in traces) or 1
    return (
        sum(t.stats.draft_calls for t in traces) / steps,
        sum(t.stats.target_calls for t in traces) / steps,
        sum(t.stats.target_rows for t in traces) / target,
    )
