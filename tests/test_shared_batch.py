"""The shared batch (easd.serving.worker): many users' rows decode together, each as it would alone.

Real tiny models in float32, where a row's tokens do not depend on the batch it is in, so every
result can be compared token for token with the same request run alone.
"""

import threading
import time
from dataclasses import replace

import pytest

from easd.errors import SettingsError
from easd.method.compare import DEFAULT_METHODS
from easd.method.generation import Generation
from easd.method.settings import DecodeSettings
from easd.serving.worker import MAX_DEFAULT_ROWS, Worker, default_max_rows

SAMPLING = DecodeSettings(temperature=0.9, top_p=0.95, max_new_tokens=40)


def comparison_rows(pair, prompt: str, settings: DecodeSettings) -> list[Generation]:
    return [Generation(pair, prompt, replace(settings, method=method)) for method in DEFAULT_METHODS.values()]


def read_to_the_end(ticket, timeout: float = 120) -> None:
    """What a user's thread does: wait for news until the ticket is done."""
    seen, deadline = -1, time.monotonic() + timeout
    while not ticket.done:
        assert time.monotonic() < deadline, "the ticket never finished"
        seen = ticket.wait(seen, 0.2)


def solo(pair, prompt: str, settings: DecodeSettings) -> list[list[int]]:
    return [g.run().token_ids for g in comparison_rows(pair, prompt, settings)]


def test_eight_users_submitted_at_once_each_get_exactly_their_solo_result(tiny_pair):
    worker = Worker(tiny_pair, max_rows=16, row_tokens=400)
    requests = [(f"user {i} asks about apples", replace(SAMPLING, seed=100 + i)) for i in range(8)]
    tickets = [None] * 8

    def user(i):
        prompt, settings = requests[i]
        tickets[i] = worker.submit(comparison_rows(tiny_pair, prompt, settings), owner=f"s{i}")
        read_to_the_end(tickets[i])

    threads = [threading.Thread(target=user, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    assert all(t is not None and t.done and t.error is None for t in tickets)  # none lost
    for (prompt, settings), ticket in zip(requests, tickets):
        traces = ticket.traces()
        assert [t.settings.method for t in traces] == list(DEFAULT_METHODS.values())
        assert all(t.prompt == prompt and t.settings.seed == settings.seed for t in traces)  # no cross-talk
        assert all([r.position for r in t.records] == list(range(len(t.records))) for t in traces)  # none duplicated
        assert [t.token_ids for t in traces] == solo(tiny_pair, prompt, settings)
    assert worker.users == 0 and not worker.line


@pytest.mark.slow  # long runs on both backends, 9 s on transformers: the full suite's, not the quick tier's
def test_a_user_who_stops_leaves_and_the_others_are_unaffected(tiny_pair):
    worker = Worker(tiny_pair, max_rows=8, row_tokens=500)
    long = replace(SAMPLING, max_new_tokens=160)
    stays = [worker.submit(comparison_rows(tiny_pair, f"stay {i}", replace(long, seed=i))) for i in range(2)]
    leaves = worker.submit(comparison_rows(tiny_pair, "leave", replace(long, seed=9)))
    seen = -1
    while not any(t.records for t in leaves.traces()):
        seen = leaves.wait(seen, 0.2)
    leaves.cancel()
    assert leaves.join(30)
    left = leaves.traces()
    assert all(t.stats.stop_reason == "stopped" and 0 < len(t.records) < 160 for t in left)
    for ticket in stays:
        read_to_the_end(ticket)
    for i, ticket in enumerate(stays):
        assert [t.token_ids for t in ticket.traces()] == solo(tiny_pair, f"stay {i}", replace(long, seed=i))
    # what the leaver got is exactly the start of its solo run: leaving cut it short, nothing else
    for got, alone in zip(left, solo(tiny_pair, "leave", replace(long, seed=9))):
        assert got.token_ids == alone[: len(got.token_ids)]


def test_a_full_batch_puts_users_in_line_and_lets_the_next_in_when_a_slot_frees(tiny_pair):
    worker = Worker(tiny_pair, max_rows=2, row_tokens=500)  # room for one comparison
    first = worker.submit(comparison_rows(tiny_pair, "first", replace(SAMPLING, max_new_tokens=400)))
    seen = -1
    while first.position != 0:  # 1 on submitting, 0 once in the batch
        seen = first.wait(seen, 0.2)
    second = worker.submit(comparison_rows(tiny_pair, "second", SAMPLING))
    third = worker.submit(comparison_rows(tiny_pair, "third", SAMPLING))
    fourth = worker.submit(comparison_rows(tiny_pair, "fourth", SAMPLING))
    assert (second.position, third.position, fourth.position) == (1, 2, 3)
    assert third.estimate()[0] > second.estimate()[0] > 0 and third.estimate()[1] > third.estimate()[0]
    fourth.cancel()  # leaving the line frees the place at once, before anyone decodes a token for it
    assert fourth.join(30) and all(not t.records and t.stats.stop_reason == "stopped" for t in fourth.traces())
    assert first.position == 0 and third.position == 2
    read_to_the_end(first)
    seen = -1
    while second.position != 0:  # the first has finished: the second joins at the next block boundary
        seen = second.wait(seen, 0.2)
    assert third.position == 1
    read_to_the_end(second)
    read_to_the_end(third)
    assert [t.token_ids for t in third.traces()] == solo(tiny_pair, "third", SAMPLING)


def test_a_request_that_reaches_the_line_as_the_batch_runs_dry_gets_a_batch(tiny_pair):
    """The last rows leave (here, a user who stopped) and a request reaches the line after the batch's last boundary,
    before the batch ends: it was let into the running tickets with no batch left to decode it, so its user waited for
    ever and every request behind it too (a browser test of a closed tab saw it once in a suite run)."""
    worker = Worker(tiny_pair, max_rows=2, row_tokens=500)  # room for one comparison
    rows, late = comparison_rows(tiny_pair, "first", replace(SAMPLING, max_new_tokens=400)), []
    admit = worker._admit_into

    def arrive_just_after_the_boundary(batch):
        admit(batch)
        if all(g.stopped for g in rows) and not late:  # the boundary at which the stopped rows leave
            late.append(worker.submit(comparison_rows(tiny_pair, "late", SAMPLING)))

    worker._admit_into = arrive_just_after_the_boundary  # the batch made for the first request calls it
    first = worker.submit(rows)
    seen = -1
    while not any(t.records for t in first.traces()):
        seen = first.wait(seen, 0.2)
    first.cancel()
    assert first.join(30)
    while not late:
        time.sleep(0.01)
    read_to_the_end(late[0], timeout=30)
    assert [t.token_ids for t in late[0].traces()] == solo(tiny_pair, "late", SAMPLING)


def test_a_ticket_nobody_reads_is_stopped_when_abandonment_is_on(tiny_pair):
    worker = Worker(tiny_pair, max_rows=4, row_tokens=500, abandon_after_s=0.3)
    ticket = worker.submit(comparison_rows(tiny_pair, "gone", replace(SAMPLING, max_new_tokens=400)))
    assert ticket.join(60)
    assert all(t.stats.stop_reason == "unread" and len(t.records) < 400 for t in ticket.traces())


def test_a_failed_step_ends_its_tickets_with_an_error_and_the_worker_serves_the_next(tiny_pair):
    worker = Worker(tiny_pair, max_rows=4, row_tokens=500)
    broken = comparison_rows(tiny_pair, "broken", SAMPLING)
    for generation in broken:
        generation.tokens[-1] = 10**6  # no such token: the first forward pass fails
    failed = worker.submit(broken)
    read_to_the_end(failed)
    assert failed.error is not None and "decoding failed" in str(failed.error)
    fine = worker.submit(comparison_rows(tiny_pair, "fine", SAMPLING))
    read_to_the_end(fine)
    assert fine.error is None and [t.token_ids for t in fine.traces()] == solo(tiny_pair, "fine", SAMPLING)


def test_requests_that_cannot_fit_are_refused_with_the_setting_to_change(tiny_pair):
    with pytest.raises(SettingsError, match="--max-batch: must be at least 2"):
        Worker(tiny_pair, max_rows=1, row_tokens=100)
    worker = Worker(tiny_pair, max_rows=2, row_tokens=30)
    with pytest.raises(SettingsError, match="prompt: and the tokens asked for make .* at most 30"):
        worker.submit(comparison_rows(tiny_pair, "a prompt", SAMPLING))  # 40 new tokens alone exceed 30
    three = comparison_rows(tiny_pair, "x", replace(SAMPLING, max_new_tokens=5)) + comparison_rows(tiny_pair, "y", SAMPLING)[:1]
    with pytest.raises(SettingsError, match="--max-batch: is 2 rows; a request of 3 rows cannot fit"):
        worker.submit(three)


def test_the_default_batch_is_what_fits_in_memory_within_bounds(tiny_pair):
    rows = default_max_rows(tiny_pair, tokens_per_row=400)
    assert 2 <= rows <= MAX_DEFAULT_ROWS
    assert rows == MAX_DEFAULT_ROWS  # the tiny pair's cache is a few kB a token: memory never limits it
