"""ZeroGPU, the one kind of Space a free account can host: it lends a GPU only while a `@spaces.GPU` function runs.

The shared batch cannot live inside one such call (a call is capped at a minute and holds the
GPU from everyone else), so on ZeroGPU the worker stays a thread on the CPU that owns the line
of tickets, and decodes the batch in rounds: each round is one call of `decode_on_gpu`, which
resumes every row from its snapshot (re-prefilling it: no cache survives a call), decodes for
CHUNK_S seconds and returns the new blocks (easd.core.chunks, easd.core.worker). The worker makes
the call in the context of the ticket that has waited longest, so ZeroGPU charges that user.

ZeroGPU is detected as the `spaces` package detects it (SPACES_ZERO_GPU). Elsewhere `spaces.GPU`
returns the function as it is and `chunks_for` returns None: the app runs its one continuous
batch, exactly as without the package. The call runs in a process forked from this one, which
finds the loaded pair in `LOADED`; its arguments and results are pickled, so they hold no CUDA
tensors.
"""

from __future__ import annotations

import os

import torch

from easd.core.chunks import ChunkProgress, GenerationSnapshot, decode_chunk
from easd.core.pair import ModelPair
from easd.core.worker import Chunks
from easd.errors import EasdError

if os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true") and torch.version.cuda is None:
    # `spaces` would fail on import with an AttributeError deep in its CUDA patching: say what to change instead
    raise EasdError(
        "this is a ZeroGPU Space, but the installed torch is a CPU build: install PyPI's own torch wheel, "
        "which is a CUDA build on Linux (README, 'Deploy on a Space')"
    )
try:
    import spaces
except ImportError:  # a plain install: no Space, no ZeroGPU
    spaces = None

CHUNK_S = 20  # decoding per call: the re-prefill is then a small share of it, and a new user joins within about as long
OVERHEAD_S = 10  # asked beyond CHUNK_S: moving the weights to the GPU and re-prefilling the rows
MIN_S, MAX_S = 15, 60  # what a call may ask for: ZeroGPU favours short calls, and caps them
LOADED: dict[str, ModelPair] = {}  # the pairs a call decodes on, by name
MODE = f"ZeroGPU, chunks of {CHUNK_S} s"  # what the page says about how it decodes


def on_zerogpu() -> bool:
    """Whether this process runs on a ZeroGPU Space, as the `spaces` package tells."""
    return spaces is not None and spaces.config.Config.zero_gpu


def chunk_duration(name: str, rows: list[GenerationSnapshot], seconds: float) -> int:
    """The seconds a call asks ZeroGPU for (its `duration`, a function of the call's arguments): its decoding time
    and the overhead, within [MIN_S, MAX_S]."""
    return int(min(MAX_S, max(MIN_S, seconds + OVERHEAD_S)))


def _decode_on_gpu(name: str, rows: list[GenerationSnapshot], seconds: float) -> list[ChunkProgress]:
    return decode_chunk(LOADED[name], rows, max_seconds=seconds)


decode_on_gpu = spaces.GPU(duration=chunk_duration)(_decode_on_gpu) if spaces is not None else _decode_on_gpu


def chunks_for(name: str, pair: ModelPair) -> Chunks | None:
    """How the worker of pair `name` decodes: in calls of `decode_on_gpu` on ZeroGPU; None (one continuous batch) elsewhere."""
    if not on_zerogpu():
        return None
    LOADED[name] = pair
    return lambda rows: decode_on_gpu(name, rows, CHUNK_S)
