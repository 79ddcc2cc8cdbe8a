"""Decoding in chunks: a batch that lives in calls of a few seconds each (a ZeroGPU Space lends its GPU per call).

Between two chunks a generation is a `GenerationSnapshot`: its prompt and settings, the tokens it
generated, its next block's number, its random generator's state and its counts so far; plain values
and a CPU tensor, so a call in another process can receive it. `decode_chunk` resumes every one (each
prefilled afresh: no cache survives a call), decodes them as one batch until a budget of steps
or seconds runs out, and returns each one's `ChunkProgress`: the blocks it emitted, its snapshot
after them, and why it ended if it did. `catch_up` applies that progress to the Generation that
keeps its trace, so a user reads the same trace as from one continuous run (easd.serving.worker).

A resumed generation draws the same random numbers and makes the same decisions as it would have
without the break; only its prefix is recomputed in one pass instead of block by block, which in
float32 can move a logit by a rounding step (never a token in the tests: tests/test_chunks.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from ..errors import EasdError
from ..method.generation import Generation, GenerationSnapshot
from ..method.judging import Block
from ..method.pair import ModelPair
from ..method.step import Batch


@dataclass
class ChunkProgress:
    """What one chunk did for a generation: its new blocks (without their Generation), its snapshot after them, its end."""

    blocks: list[Block] = field(default_factory=list)
    snapshot: GenerationSnapshot | None = None
    stop_reason: str | None = None  # eos | max_new_tokens | context | error once it has ended, else None
    error: str | None = None  # a failed generation's one line


def decode_chunk(
    pair: ModelPair, snapshots: list[GenerationSnapshot], max_steps: int | None = None, max_seconds: float | None = None
) -> list[ChunkProgress]:
    """Decode the generations as one batch, from where each left off, until every one ends or a budget runs out
    (checked between steps, so a chunk may overrun `max_seconds` by one step); progress in the snapshots' order."""
    generations = [snapshot.resume(pair) for snapshot in snapshots]
    progress = {id(g): ChunkProgress() for g in generations}
    started, steps = time.monotonic(), 0

    def at_boundary(batch: Batch) -> None:
        nonlocal steps
        if (max_steps is not None and steps >= max_steps) or (
            max_seconds is not None and time.monotonic() - started >= max_seconds
        ):
            batch.stop()  # the generations left over go on in the next chunk: they are not ended
        steps += 1

    batch = Batch(pair, generations, at_boundary=at_boundary)
    for block in batch:
        progress[id(block.generation)].blocks.append(replace(block, generation=None))
    for generation in generations:
        done = progress[id(generation)]
        done.snapshot = GenerationSnapshot.of(generation)
        if generation.trace.stats.stop_reason != "stopped":  # "stopped" is the chunk's budget, not its end
            done.stop_reason = generation.trace.stats.stop_reason
            done.error = None if generation.error is None else str(generation.error)
    return [progress[id(g)] for g in generations]


def catch_up(generation: Generation, progress: ChunkProgress) -> list[Block]:
    """Apply a chunk's progress to the Generation that keeps the trace; -> the blocks, now naming it."""
    blocks = [replace(block, generation=generation) for block in progress.blocks]
    for block in blocks:
        generation.take(block)
    snapshot = progress.snapshot  # the next round resumes from it; this Generation never decodes itself
    generation.tokens[generation.prompt_length :] = snapshot.generated
    generation.trace.stats = replace(snapshot.stats, stop_reason=generation.trace.stats.stop_reason)
    if progress.stop_reason is not None:
        generation.finish(progress.stop_reason, EasdError(progress.error) if progress.error else None)
    return blocks
