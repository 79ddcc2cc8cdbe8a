"""How long a request will wait and run, from the shared batch's measured pace: the arithmetic, pure.

The worker (easd.core.worker) measures its `Pace` as it decodes: seconds per step, tokens a
generation emits per step, and how much of its token budget a finished generation used. From it,
`schedule` plays the line forward: each running request ends when its longest generation has
emitted what it is expected to; a waiting one starts when the requests ahead of it have freed
enough rows (the line is served in order), and ends its own expected steps later. Steps are
taken to cost what they cost now: a full batch's step time changes little as requests come and go.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

SMOOTHING = 0.3  # weight of the newest finished generation in the running mean of the budget used
RECENT = 16  # steps the pace is read from: enough to smooth a step's noise, few enough to follow a changing batch


@dataclass
class Pace:
    """The batch's measured speed over its last RECENT steps (first guesses until something is measured).

    Medians, not means: the step in which a request joins also computes its prompt (2 s or more for
    a long one on a CPU, against 0.3 s for a step), and a mean would carry that into every estimate.
    """

    budget_used: float = 1.0  # of a generation's max_new_tokens, the share it emits before it ends
    steps: int = 0  # steps measured so far: estimates are guesses until this is > 0
    recent: deque = field(default_factory=lambda: deque(maxlen=RECENT))  # (seconds, tokens per generation) per step

    @property
    def step_s(self) -> float:
        """Seconds one step of the batch takes (with chunks: one round of steps, one call)."""
        return statistics.median(s for s, _ in self.recent) if self.recent else 0.5

    @property
    def tokens_per_step(self) -> float:
        """Tokens one generation emits per step (more for SD and EASD; with chunks, per round)."""
        return statistics.median(t for _, t in self.recent) if self.recent else 1.0

    def step(self, seconds: float, generations: int, tokens: int) -> None:
        """One step of the batch took `seconds`, and its `generations` emitted `tokens` in all."""
        if generations:
            self.recent.append((seconds, tokens / generations))
            self.steps += 1

    def finished(self, emitted: int, budget: int, count: int) -> None:
        """A generation ended after `emitted` of its `budget` tokens; `count` is how many ended before it."""
        share = min(1.0, emitted / max(1, budget))
        self.budget_used = share if count == 0 else (1 - SMOOTHING) * self.budget_used + SMOOTHING * share

    def tokens_left(self, emitted: int, budget: int) -> float:
        """Tokens a generation that emitted `emitted` of `budget` is expected to emit still."""
        expected = self.budget_used * budget
        return max(expected - emitted, 0.1 * (budget - emitted))  # past the usual length, it may still go on a while

    def seconds_for(self, tokens: float) -> float:
        return tokens / max(self.tokens_per_step, 1e-6) * self.step_s


@dataclass(frozen=True)
class Job:
    """A request as the schedule sees it: the rows it holds, and the seconds of decoding it has left."""

    rows: int
    seconds_left: float


def schedule(running: list[Job], line: list[Job], max_rows: int) -> tuple[list[float], list[tuple[float, float]]]:
    """Seconds from now until each running job ends; and for each job in line, in order, until it starts and ends."""
    ends = [job.seconds_left for job in running]
    busy = sorted(zip(ends, (job.rows for job in running)))  # (when it frees its rows, how many)
    free, now, waiting = max_rows - sum(job.rows for job in running), 0.0, []
    for job in line:
        while free < job.rows and busy:  # wait for the next request ahead to end
            when, rows = busy.pop(0)
            now, free = max(now, when), free + rows
        start, end = now, now + job.seconds_left
        free -= job.rows
        busy = sorted([*busy, (end, job.rows)])
        waiting.append((start, end))
    return ends, waiting
