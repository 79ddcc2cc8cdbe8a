"""Decoding in chunks (easd.serving.chunks), as a ZeroGPU Space runs the shared batch: each chunk a separate call that
re-prefills every row, the worker between calls. Forced into chunks of 1 to 3 steps on the CPU, every row must
equal its continuous run."""

import contextvars
import threading
from dataclasses import replace

import pytest
from bounds import pair_rounding, same_entropies
from conftest import PROMPTS

from easd.errors import QuotaSpent
from easd.method.compare import DEFAULT_METHODS
from easd.method.generation import Generation, GenerationSnapshot
from easd.method.settings import DecodeSettings
from easd.serving.chunks import decode_chunk
from easd.serving.worker import Worker

USERS = {
    "user a": DecodeSettings(max_new_tokens=40, seed=3),
    "user b": DecodeSettings(max_new_tokens=36, temperature=0.9, top_p=0.95, seed=11, k=3),
}


def continuous(pair, prompt: str, settings: DecodeSettings):
    return Generation(pair, prompt, settings).run()


def assert_same_run(chunked, alone, exact: bool, pair):
    assert chunked.token_ids == alone.token_ids
    assert [(r.origin, r.block) for r in chunked.records] == [(r.origin, r.block) for r in alone.records]
    assert [(b.index, b.drafted, b.end) for b in chunked.blocks] == [(b.index, b.drafted, b.end) for b in alone.blocks]
    assert (chunked.stats.target_calls, chunked.stats.draft_calls, chunked.stats.stop_reason) == (
        alone.stats.target_calls,
        alone.stats.draft_calls,
        alone.stats.stop_reason,
    )
    h_chunked, h_alone = [r.h_target for r in chunked.records], [r.h_target for r in alone.records]
    # llama.cpp's exact mode computes a prefix the same in one pass as block by block; float32 transformers to a rounding step
    assert h_chunked == h_alone if exact else same_entropies(h_chunked, h_alone, pair_rounding(pair))


@pytest.mark.parametrize("steps", [1, 2, 3])
def test_rows_decoded_in_chunks_through_the_worker_equal_their_continuous_runs(tiny_pair, steps):
    worker = Worker(tiny_pair, max_rows=8, row_tokens=400, chunks=lambda rows: decode_chunk(tiny_pair, rows, max_steps=steps))
    tickets = {
        prompt: worker.submit(
            [Generation(tiny_pair, prompt, replace(s, method=m)) for m in DEFAULT_METHODS.values()], owner=prompt
        )
        for prompt, s in USERS.items()
    }
    for ticket in tickets.values():  # no deadline of its own: a busy machine takes longer; pytest-timeout catches a hang
        assert ticket.join() and ticket.error is None
    # the rows' random numbers live in the chunks: on ZeroGPU the worker's process may not touch the device
    assert not any("generator" in vars(g) for t in tickets.values() for g in t.generations)
    exact = tiny_pair.backend == "llama.cpp"
    for prompt, ticket in tickets.items():
        for method, trace in zip(DEFAULT_METHODS.values(), ticket.traces()):
            assert_same_run(trace, continuous(tiny_pair, prompt, replace(USERS[prompt], method=method)), exact, tiny_pair)


def test_a_chunk_stops_at_its_budget_and_leaves_the_rows_unended(tiny_pair):
    row = Generation(tiny_pair, "user a", replace(USERS["user a"], method="easd"))
    [progress] = decode_chunk(tiny_pair, [GenerationSnapshot.of(row)], max_steps=2)
    assert len(progress.blocks) == 2 and progress.stop_reason is None
    assert progress.snapshot.next_block == 2 and len(progress.snapshot.generated) == sum(len(b.records) for b in progress.blocks)
    [rest] = decode_chunk(tiny_pair, [progress.snapshot])  # no budget: to the end
    assert rest.stop_reason == "max_new_tokens" and rest.blocks[0].index == 2


def test_a_round_runs_in_the_context_of_the_ticket_that_waited_longest(tiny_pair):
    """A ZeroGPU call charges the user whose request context it runs in: the worker thread must use the ticket's."""
    user = contextvars.ContextVar("user", default="nobody")
    seen = []

    def chunks(rows):
        seen.append(user.get())
        return decode_chunk(tiny_pair, rows, max_steps=4)

    worker = Worker(tiny_pair, max_rows=4, row_tokens=400, chunks=chunks)

    def submit(name):
        user.set(name)  # as Gradio sets its request's context in the handler's thread
        ticket = worker.submit(
            [Generation(tiny_pair, name, DecodeSettings(method=m, max_new_tokens=12)) for m in DEFAULT_METHODS.values()]
        )
        assert ticket.join(60)

    thread = threading.Thread(target=submit, args=("ada",))
    thread.start()
    thread.join(90)
    assert seen and set(seen) == {"ada"}  # never the worker thread's own empty context


def test_a_user_out_of_gpu_time_loses_their_run_alone_and_the_others_go_on_unchanged(tiny_pair):
    """ZeroGPU refuses a call charged to a user whose quota is spent: that user's run ends with the line, and the next
    round is charged to the next user, whose run (sampled: its random state crosses the refused call) is as alone."""
    user = contextvars.ContextVar("user", default="nobody")

    together = []  # calls with both users' rows

    def chunks(rows):
        together.extend([len(rows)] if len(rows) > 2 else [])
        if user.get() == "spent" and len(together) == 2:  # the other user's rows have decoded one round already
            raise QuotaSpent("ZeroGPU's quota: you have exceeded it. Log in to Hugging Face for more GPU time.")
        return decode_chunk(tiny_pair, rows, max_steps=2)

    worker = Worker(tiny_pair, max_rows=4, row_tokens=400, chunks=chunks)
    tickets = {}

    def submit(name, settings):
        user.set(name)
        tickets[name] = worker.submit(
            [Generation(tiny_pair, name, replace(settings, method=m)) for m in DEFAULT_METHODS.values()]
        )

    for name, settings in (("spent", USERS["user a"]), ("paid", USERS["user b"])):
        thread = threading.Thread(target=submit, args=(name, settings))
        thread.start()
        thread.join(30)
    assert tickets["spent"].join() and tickets["paid"].join()
    assert isinstance(tickets["spent"].error, QuotaSpent) and tickets["paid"].error is None
    exact = tiny_pair.backend == "llama.cpp"
    for method, trace in zip(DEFAULT_METHODS.values(), tickets["paid"].traces()):
        assert_same_run(trace, continuous(tiny_pair, "paid", replace(USERS["user b"], method=method)), exact, tiny_pair)


def test_a_snapshot_keeps_what_the_prompt_was_asked_under(tiny_pair):
    """The one resume type carries the system prompt and RSD's question, so a resumed row reads the same prompt."""
    row = Generation(tiny_pair, PROMPTS[0], DecodeSettings(max_new_tokens=4), system="Reason step by step.", question="Q?")
    again = GenerationSnapshot.of(row).resume(tiny_pair)
    assert (again.prompt_ids, again.system, again.question) == (row.prompt_ids, "Reason step by step.", "Q?")
