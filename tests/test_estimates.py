"""The wait's arithmetic (easd.core.estimates), checked on simulated lines, and the worker's estimates on real models."""

from dataclasses import replace

import pytest

from easd.core.compare import DEFAULT_METHODS
from easd.core.decoding import Generation
from easd.core.estimates import Job, Pace, schedule
from easd.core.settings import DecodeSettings
from easd.core.worker import Worker


def test_a_line_behind_a_full_batch_starts_as_rows_free_up_in_order():
    running = [Job(rows=2, seconds_left=10.0), Job(rows=2, seconds_left=4.0)]
    line = [Job(rows=2, seconds_left=6.0), Job(rows=2, seconds_left=6.0), Job(rows=4, seconds_left=1.0)]
    ends, waiting = schedule(running, line, max_rows=4)
    assert ends == [10.0, 4.0]
    # the first waits for the 4 s job's rows, the second for the 10 s job's, the third (4 rows) for both of theirs
    assert waiting == [(4.0, 10.0), (10.0, 16.0), (16.0, 17.0)]


def test_room_in_the_batch_means_no_wait():
    ends, waiting = schedule([Job(2, 5.0)], [Job(2, 3.0), Job(2, 8.0)], max_rows=8)
    assert ends == [5.0] and waiting == [(0.0, 3.0), (0.0, 8.0)]


def test_the_pace_learns_from_steps_and_finished_generations():
    pace = Pace()
    for _ in range(20):
        pace.step(seconds=0.2, generations=4, tokens=12)  # 3 tokens per generation per step
    assert pace.step_s == pytest.approx(0.2) and pace.tokens_per_step == pytest.approx(3.0)
    assert pace.seconds_for(30) == pytest.approx(2.0)
    for count in range(20):
        pace.finished(emitted=50, budget=100, count=count)
    assert pace.budget_used == pytest.approx(0.5)
    assert pace.tokens_left(emitted=0, budget=100) == pytest.approx(50)
    assert pace.tokens_left(emitted=80, budget=100) == pytest.approx(2.0)  # past the usual length: a little more
    assert pace.tokens_left(emitted=100, budget=100) == 0


def test_users_in_line_see_their_start_and_end_grow_with_their_place(hf_tiny_pair):
    settings = DecodeSettings(max_new_tokens=300)
    worker = Worker(hf_tiny_pair, max_rows=2, row_tokens=400)
    requests = [
        [Generation(hf_tiny_pair, f"question {i}", replace(settings, method=m)) for m in DEFAULT_METHODS.values()]
        for i in range(4)
    ]
    first = worker.submit(requests[0])
    while worker.pace.steps < 3:  # the pace is measured
        first.wait(-1, 0.05)
    waiting = [worker.submit(r) for r in requests[1:]]
    estimates = [stream.estimate() for stream in waiting]
    assert [s.position for s in waiting] == [1, 2, 3]
    starts, ends = zip(*estimates)
    assert 0 < starts[0] < starts[1] < starts[2] and all(end > start for start, end in estimates)
    assert first.estimate()[1] == pytest.approx(starts[0], abs=0.5)  # the next starts when the first ends
    for stream in [first, *waiting]:
        stream.cancel()
