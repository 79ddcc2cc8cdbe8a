"""The same request computed once (easd.serving.same_request): joined while it decodes, replayed once it finished.

Real tiny models on both backends, each in its exact mode (transformers in float32, llama.cpp with
its exact kernels), where a shared result can be held token for token against a solo run.
"""

import dataclasses
import threading
from dataclasses import replace

import pytest

from easd import _version
from easd.method.compare import DEFAULT_METHODS
from easd.method.generation import Generation
from easd.method.settings import DecodeSettings
from easd.serving.same_request import Results, request_key
from easd.serving.worker import Worker
from easd.traces.files import to_json_dict

SETTINGS = DecodeSettings(temperature=0.9, top_p=0.95, max_new_tokens=60, seed=7)
PROMPT = "Tom has 3 apples and buys 5 more."


def comparison(pair, prompt: str = PROMPT, settings: DecodeSettings = SETTINGS) -> list[Generation]:
    return [Generation(pair, prompt, replace(settings, method=method)) for method in DEFAULT_METHODS.values()]


def shape(traces) -> list:
    """What a user sees of a comparison: every token, its origin, and the blocks' drafts and ends."""
    return [([(r.token_id, r.origin) for r in t.records], [(b.drafted, b.end) for b in t.blocks]) for t in traces]


def test_a_joined_request_sees_the_original_run_which_equals_a_solo_run(tiny_pair):
    worker = Worker(tiny_pair, max_rows=8, row_tokens=400)
    first = worker.submit(comparison(tiny_pair), owner="a")
    assert first.how == "computed"
    while not any(t.records for t in first.traces()):  # the first one is decoding
        first.wait(-1, 0.05)
    second = worker.submit(comparison(tiny_pair), owner="b")
    assert second.how == "joined" and second.ticket is first.ticket  # one computation
    assert second.traces()[0].records  # everything decoded so far, at once
    assert first.join() and second.join()
    solo = [g.run() for g in comparison(tiny_pair)]
    assert shape(second.traces()) == shape(first.traces()) == shape(solo)
    assert worker.holding(owner="b") == 0 and not worker.computing


def test_stopping_one_of_two_joined_users_leaves_the_other_streaming(tiny_pair):
    worker = Worker(tiny_pair, max_rows=8, row_tokens=400)
    long = replace(SETTINGS, max_new_tokens=300)
    stays, leaves = (worker.submit(comparison(tiny_pair, settings=long), owner=o) for o in ("stays", "leaves"))
    while not any(t.records for t in leaves.traces()):
        leaves.wait(-1, 0.05)
    leaves.cancel()
    assert leaves.done and leaves.cancelled and not stays.done  # at once: the other stream goes on
    kept = [len(t.records) for t in leaves.traces()]
    assert stays.join()
    final = stays.traces()
    assert {t.stats.stop_reason for t in final} <= {"eos", "max_new_tokens"}
    assert [len(t.records) for t in leaves.traces()] == kept  # the one who left keeps what they saw, unchanged
    assert sum(len(t.records) for t in final) > sum(kept)


def test_when_every_user_stops_the_computation_stops(tiny_pair):
    worker = Worker(tiny_pair, max_rows=8, row_tokens=400)
    long = replace(SETTINGS, max_new_tokens=300)
    one, two = (worker.submit(comparison(tiny_pair, settings=long), owner=o) for o in ("one", "two"))
    one.cancel()
    two.cancel()
    assert two.join() and one.ticket.done
    assert {t.stats.stop_reason for t in two.traces()} == {"stopped"}
    assert worker.results.get(one.ticket.key) is None  # a stopped run is never replayed


def test_a_finished_result_is_replayed_only_to_the_same_request(tiny_pair, monkeypatch):
    worker = Worker(tiny_pair, max_rows=8, row_tokens=400)
    original = worker.submit(comparison(tiny_pair), owner="a")
    assert original.join()
    again = worker.submit(comparison(tiny_pair), owner="b")
    assert again.how == "replayed" and again.done and shape(again.traces()) == shape(original.traces())
    again.traces()[0].records.clear()  # one user's copy: nobody else's changes
    assert shape(worker.submit(comparison(tiny_pair), owner="c").traces()) == shape(original.traces())

    other_seed = worker.submit(comparison(tiny_pair, settings=replace(SETTINGS, seed=8)), owner="d")
    other_prompt = worker.submit(comparison(tiny_pair, prompt=PROMPT + " "), owner="e")
    assert other_seed.how == other_prompt.how == "computed"
    monkeypatch.setattr(_version, "__version__", _version.__version__ + ".next")  # an upgrade
    assert worker.submit(comparison(tiny_pair), owner="f").how == "computed"
    for stream in (other_seed, other_prompt):
        stream.join()


def test_the_key_names_the_pair_and_its_runtime(tiny_pair):
    same = request_key(tiny_pair, comparison(tiny_pair))
    assert same == request_key(tiny_pair, comparison(tiny_pair))
    renamed = dataclasses.replace(tiny_pair, target_name=tiny_pair.target_name + "-v2")
    other_kernels = dataclasses.replace(tiny_pair, info={**tiny_pair.info, "llama_kernels": "other"})
    assert request_key(renamed, comparison(tiny_pair)) != same
    assert request_key(other_kernels, comparison(tiny_pair)) != same


def test_results_are_bounded_in_bytes_least_recently_used_out_first(hf_tiny_pair):
    traces = {prompt: [g.run() for g in comparison(hf_tiny_pair, prompt)] for prompt in ("one", "two", "three")}

    def kept(results: Results, prompt: str) -> None:
        results.put(prompt, results.measure(traces[prompt], to_json_dict(traces[prompt])))

    probe = Results()
    kept(probe, "one")
    results = Results(max_bytes=int(probe.bytes * 2.5))  # room for two
    kept(results, "one")
    kept(results, "two")
    assert results.get("one").traces is traces["one"]  # "one" is now the most recently used
    kept(results, "three")
    assert results.get("two") is None and results.get("one") is not None and results.get("three") is not None
    assert results.bytes <= results.max_bytes
    nothing = Results(max_bytes=0)
    kept(nothing, "one")
    assert nothing.get("one") is None  # --result-cache-mb 0 keeps nothing


def test_sixteen_users_with_the_same_request_share_one_computation(hf_tiny_pair):
    worker = Worker(hf_tiny_pair, max_rows=32, row_tokens=400)
    streams = [None] * 16

    def user(i):
        streams[i] = worker.submit(comparison(hf_tiny_pair), owner=f"pupil {i}", address="one classroom")
        streams[i].join()

    threads = [threading.Thread(target=user, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(s.ticket) for s in streams if s.how != "replayed"}) == 1
    assert sum(s.how == "computed" for s in streams) == 1
    assert len({str(shape(s.traces())) for s in streams}) == 1


@pytest.mark.parametrize("how", ["joined", "replayed"])
def test_a_shared_request_does_not_count_against_the_address(hf_tiny_pair, how):
    worker = Worker(hf_tiny_pair, max_rows=8, row_tokens=400)
    first = worker.submit(comparison(hf_tiny_pair, settings=replace(SETTINGS, max_new_tokens=300)), owner="a", address="x")
    if how == "replayed":
        first.join()
    second = worker.submit(comparison(hf_tiny_pair, settings=replace(SETTINGS, max_new_tokens=300)), owner="b", address="x")
    assert second.how == how
    assert worker.holding(address="x") == (0 if how == "replayed" else 1)
    assert worker.holding(owner="b") == (0 if how == "replayed" else 1)
    first.cancel()
    second.cancel()
    second.join()
