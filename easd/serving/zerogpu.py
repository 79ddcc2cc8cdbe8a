"""ZeroGPU, the one kind of Space a free account can host: it lends a GPU only while a `@spaces.GPU` function runs.

The shared batch cannot live inside one such call (a call is capped at a minute and holds the
GPU from everyone else), so on ZeroGPU the worker stays a thread on the CPU that owns the line
of tickets, and decodes the batch in rounds: each round is one call of `decode_on_gpu`, which
resumes every row from its snapshot (re-prefilling it: no cache survives a call), decodes for
the seconds the call was sized for and returns the new blocks (easd.serving.chunks, easd.serving.worker).
The worker makes the call in the context of the ticket that has waited longest, so ZeroGPU
charges that user.

Words used below:
- a call's *duration* is what it asks ZeroGPU for, and what ZeroGPU charges against the visitor's
  daily quota; a call that runs past it is aborted;
- its *budget* is the decoding inside it: the duration less SPARE_S (moving the weights in and
  returning the progress).
`GpuCalls` sizes every call from the speed measured inside the calls before it, so a run asks for
about what it needs rather than a fixed minute.

ZeroGPU's process boundary: each call runs in another process, its arguments and results are
pickled, and only what it returns survives it. On a Space that process is forked from this one and
finds the loaded pair in `LOADED`. With EASD_SIMULATE_ZEROGPU=1 (tests, the device check) the app
runs the same way on any machine, and each call runs in a freshly *spawned* process, which shares
nothing with this one: it loads the pair with the picklable loader it is handed, so no model state
and no CUDA is ever set up in the app's own process by a call. Elsewhere `decode_on_gpu` is the
plain function and `chunks_for` returns None: the app runs its one continuous batch.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..errors import EasdError, QuotaSpent
from ..method.generation import GenerationSnapshot
from ..method.pair import ModelPair, PairLoader
from .chunks import ChunkProgress, decode_chunk

ON_A_SPACE = os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true")  # as a ZeroGPU Space sets it
if ON_A_SPACE and torch.version.cuda is None:
    # `spaces` would fail on import with an AttributeError deep in its CUDA patching: say what to change instead
    raise EasdError(
        "this is a ZeroGPU Space, but the installed torch is a CPU build: install PyPI's own torch wheel, "
        "which is a CUDA build on Linux (README, 'Deploy on a Space')"
    )
spaces = None
if ON_A_SPACE:  # only there: elsewhere an installed `spaces` would patch torch's CUDA calls for nothing
    import spaces

SIMULATED = os.environ.get("EASD_SIMULATE_ZEROGPU", "") == "1"  # ZeroGPU's rules on any machine: module docstring
FIRST_S = 15  # a call before any was measured: on a GPU it carries the first example (2 lanes × 128 tokens) whole
SPARE_S = 3  # asked beyond a call's budget: the weights moved in, the progress pickled back
MARGIN = 1.25  # a budget is the measured need × MARGIN: the speed varies with the batch and the text
MIN_S, MAX_S = 5, 60  # what a call may ask for: a lower floor wastes nothing; ZeroGPU caps calls at a minute
LOADED: dict[str, ModelPair] = {}  # the pairs a call decodes on, by name (a spawned call starts with none)
RECENT_CALLS = 100  # calls a pair remembers: a Space runs for days
MODE = "ZeroGPU, in calls sized from the measured speed"  # what the page says about how it decodes


def on_zerogpu() -> bool:
    """Whether this process runs on a ZeroGPU Space (as the `spaces` package tells), or simulates one."""
    return SIMULATED or (spaces is not None and spaces.config.Config.zero_gpu)


def chunk_duration(name: str, load: PairLoader, rows: list[GenerationSnapshot], budget: float) -> int:
    """The seconds a call asks ZeroGPU for (its `duration`, a function of the call's arguments)."""
    return math.ceil(round(budget, 6)) + SPARE_S  # rounded first: 14.000000000000002 s asks for 14


def _decode_on_gpu(
    name: str, load: PairLoader, rows: list[GenerationSnapshot], budget: float
) -> tuple[list[ChunkProgress], float]:
    """One call: decode the rows for `budget` seconds; -> their progress and the seconds the decoding took."""
    if name not in LOADED:  # a spawned call starts empty; on a Space the forked call inherits the app's pair
        LOADED[name] = load()
    started = time.monotonic()
    progress = decode_chunk(LOADED[name], rows, max_seconds=budget)
    return progress, time.monotonic() - started


def in_a_fresh_process(*args) -> tuple[list[ChunkProgress], float]:
    """ZeroGPU's boundary, simulated: the call runs in a process spawned for it, its arguments and results pickled."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_decode_on_gpu, args)


if SIMULATED:
    decode_on_gpu = in_a_fresh_process
elif spaces is not None:
    decode_on_gpu = spaces.GPU(duration=chunk_duration)(_decode_on_gpu)
else:
    decode_on_gpu = _decode_on_gpu


@dataclass
class Call:
    """One call, as the app saw it: what it asked for and what it did."""

    asked_s: int  # its duration, charged against the visitor's quota
    decoding_s: float  # measured inside the call
    tokens: int  # tokens its longest-running row gained


@dataclass
class GpuCalls:
    """The rounds of pair `name` on ZeroGPU: each call sized from the speed the calls before it measured.

    A round's rows decode as one batch, so a call needs as long as its row with the most tokens
    left; the speed is tokens per second of one row, as measured inside the latest call."""

    name: str
    load: PairLoader  # how a spawned call gets the pair; it must pickle (app.py's loaders do)
    decode: Callable | None = None  # how a call is made: `decode_on_gpu` unless told (tools.zerogpu: in_a_fresh_process)
    tokens_per_s: float | None = None  # None until a call has decoded something
    calls: list[Call] = field(default_factory=list)  # the latest RECENT_CALLS, for the simulation's printout

    def budget(self, tokens: float) -> float:
        """The decoding a call needs for `tokens` more tokens of its longest row, within what a call may ask."""
        if self.tokens_per_s is None:
            return FIRST_S - SPARE_S
        return min(MAX_S, max(MIN_S, tokens / self.tokens_per_s * MARGIN + SPARE_S)) - SPARE_S

    def cost_s(self, tokens: int) -> int | None:
        """The GPU seconds a run of `tokens` new tokens per row asks for in all, alone in the batch; None until a
        call has measured the speed."""
        if self.tokens_per_s is None:
            return None
        total, left = 0, float(tokens)
        while left > 0:  # the calls it would make, each sized as `__call__` sizes it
            budget = self.budget(left)
            total += chunk_duration(self.name, self.load, [], budget)
            left -= round(budget * self.tokens_per_s / MARGIN, 6)  # the tokens that budget is for
        return total

    def describe_cost(self, tokens: int) -> str:
        """What the page says before a run starts."""
        cost = self.cost_s(tokens)
        if cost is None:
            return (
                f"On ZeroGPU your first run asks for about **{FIRST_S} GPU seconds** of your daily quota; "
                "later runs are sized from the speed it measures."
            )
        return (
            f"On ZeroGPU a run of {tokens} new tokens per lane asks for about **{cost} GPU seconds** of your daily "
            "quota (from the speed measured so far; less when others share its calls)."
        )

    def __call__(self, rows: list[GenerationSnapshot]) -> list[ChunkProgress]:
        before = [len(row.generated) for row in rows]
        budget = self.budget(max(row.settings.max_new_tokens - done for row, done in zip(rows, before)))
        try:
            progress, decoding_s = (self.decode or decode_on_gpu)(self.name, self.load, rows, budget)
        except Exception as err:
            raise _in_words(err) from err
        tokens = max(len(p.snapshot.generated) - done for p, done in zip(progress, before))
        if tokens and decoding_s > 0:
            self.tokens_per_s = tokens / decoding_s
        self.calls = [
            *self.calls[-RECENT_CALLS + 1 :],
            Call(chunk_duration(self.name, self.load, rows, budget), decoding_s, tokens),
        ]
        return progress


def _in_words(err: Exception) -> Exception:
    """ZeroGPU's refusal (the visitor's quota is spent; spaces raises a gr.Error titled so) as one line that says
    what to do, which ends that visitor's run alone (easd.serving.worker); any other failure as it is."""
    title = str(getattr(err, "title", "") or "")
    if "quota" not in title.lower() and "quota" not in str(err).lower():
        return err
    said = " ".join(str(err).split())
    return QuotaSpent(
        f"ZeroGPU's quota: {said} Log in to Hugging Face for more GPU time, wait until your quota refills, "
        "or open a recorded comparison from the gallery, which needs no GPU."
    )


def chunks_for(name: str, pair: ModelPair, load: PairLoader) -> GpuCalls | None:
    """How the worker of pair `name` decodes: in sized calls on ZeroGPU; None (one continuous batch) elsewhere."""
    if not on_zerogpu():
        return None
    if not SIMULATED:  # a forked call finds it; a spawned one loads its own
        LOADED[name] = pair
    return GpuCalls(name, load)
