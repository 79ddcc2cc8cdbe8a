"""The `compare` API endpoint, called with gradio_client as the README shows."""

import json
import threading
import time
import urllib.request
from itertools import accumulate

import pytest
from gradio_client import Client
from test_app_isolation import ARGUMENTS, solos

from easd.method.methods import METHODS
from easd.traces import files as trace_io


def runs_of(result: dict):
    return {run["settings"]["method"]: run for run in result["runs"]}


def test_compare_returns_both_traces_that_agree_until_the_first_penalty(app_url):
    result = Client(app_url, verbose=False).predict(prompt="Tom has 3 apples.", max_new_tokens=40, api_name="/compare")
    runs = runs_of(result)
    assert set(runs) == {"sd", "easd"} and result["format"] == "easd-trace"
    sd, easd = ([row["token_id"] for row in runs[m]["rows"]] for m in ("sd", "easd"))
    first = runs["easd"]["summary"]["first_penalty_position"]
    assert first is not None and sd[:first] == easd[:first] and sd[first] != easd[first]
    assert runs["easd"]["settings"]["record_top"] == 20


def test_compare_result_loads_as_traces(app_url, tmp_path):
    result = Client(app_url, verbose=False).predict(
        prompt="def add(a, b):", max_new_tokens=12, temperature=0.8, seed=5, api_name="/compare"
    )
    (tmp_path / "r.json").write_text(json.dumps(result))
    traces = trace_io.load(tmp_path / "r.json")
    assert [t.settings.method for t in traces] == ["sd", "easd"] and all(len(t.records) == 12 for t in traces)


def test_compare_puts_any_two_methods_side_by_side(app_url):
    result = Client(app_url, verbose=False).predict(
        prompt="Tom has 3 apples.", max_new_tokens=24, left="easd", right="mti", api_name="/compare"
    )
    easd, mti = (run for run in result["runs"])
    assert (easd["settings"]["method"], mti["settings"]["method"]) == ("easd", "mti")
    assert easd["settings"]["seed"] == mti["settings"]["seed"] and easd["prompt"] == mti["prompt"]
    assert {row["origin"] for row in mti["rows"]} <= {"target", "mti_guided"} and mti["summary"]["interventions"] > 0


BAD_INPUTS = [  # each wrong type or value, and the one line the API answers, in its parameter names
    ({"prompt": "  "}, "prompt: is empty"),
    ({"prompt": 12345}, "prompt: must be text"),
    ({"prompt": "x", "tau_o": 2.0}, "tau_o: must be a number from 0 to 1"),
    ({"prompt": "x", "tau_h": "NaN"}, "tau_h: must be a number from 0 to 4"),
    ({"prompt": "x", "k": "abc"}, "k: must be a whole number from 1 to 12"),
    ({"prompt": "x", "k": 13}, "k: must be a whole number from 1 to 12"),
    ({"prompt": "x", "k": 2.5}, "k: must be a whole number"),
    ({"prompt": "x", "k": True}, "k: must be a whole number"),
    ({"prompt": "x", "top_n": 21}, "top_n: must be a whole number from 1 to 20"),
    ({"prompt": "x", "max_new_tokens": "64"}, "max_new_tokens: must be a whole number from 1 to 400"),
    ({"prompt": "x", "max_new_tokens": 401}, "max_new_tokens: must be a whole number from 1 to 400"),
    ({"prompt": "x", "seed": 2**64}, "seed: must be a whole number from 0 to 2^63 − 1"),
    ({"prompt": "x", "seed": -1}, "seed: must be a whole number from 0"),
    ({"prompt": "x", "temperature": [1]}, "temperature: must be a number from 0 to 1.5"),
    ({"prompt": "x", "rule": "all"}, "rule: must be one of full, no_overlap"),
    ({"prompt": "x", "rule": None}, "rule: must be one of"),
    ({"prompt": "x", "chat": "yes"}, "chat: must be true or false"),
    ({"prompt": "x", "pair": "qwen-coder"}, "pair: must be one of tiny-random"),
    ({"prompt": "x", "pair": 7}, "pair: must be one of tiny-random"),
    ({"prompt": "x", "left": "nonesuch"}, f"left: must be one of {', '.join(METHODS)}"),
    ({"prompt": "x", "left": "rsd"}, "the left lane's RSD asks a process reward model"),
    ({"prompt": "x", "right": None}, f"right: must be one of {', '.join(METHODS)}"),
]


def call_raw(app_url: str, **arguments) -> str:
    """POST /compare's arguments as raw JSON (for what gradio_client cannot send: lone surrogates,
    NaN) and return the error line the server streams back."""
    body = json.dumps(
        {"data": list((ARGUMENTS | arguments).values())}
    ).encode()  # ensure_ascii: a lone surrogate travels as \\ud800, NaN as NaN
    post = urllib.request.Request(f"{app_url}gradio_api/call/compare", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(post, timeout=30) as response:
        event_id = json.loads(response.read())["event_id"]
    with urllib.request.urlopen(f"{app_url}gradio_api/call/compare/{event_id}", timeout=60) as response:
        stream = response.read().decode()
    assert "event: error" in stream, stream[:300]
    return stream.split("event: error", 1)[1].split("data:", 1)[1].strip()


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"prompt": "x\ud800y"}, "prompt: holds characters that are not valid text"),
        ({"mti_negative": "x\ud800y"}, "mti_negative: must be UTF-8 text"),
        ({"tau_h": float("nan")}, "tau_h: must be a number from 0 to 4 (got nan)"),
        ({"tau_o": float("inf")}, "tau_o: must be a number from 0 to 1 (got inf)"),
        ({"k": float("-inf")}, "k: must be a whole number from 1 to 12 (got -inf)"),
    ],
)
def test_what_gradio_client_cannot_send_is_refused_too(app_url, arguments, message):
    line = call_raw(app_url, **arguments)
    assert message in line and "Traceback" not in line


@pytest.fixture(scope="module")
def client(app_url):
    """One API client for the refusals: a client's start (the app's config and API, a heartbeat) costs more CPU than
    a refused call, and a refusal leaves the client as it was."""
    return Client(app_url, verbose=False)


@pytest.mark.parametrize("arguments, message", BAD_INPUTS)
def test_bad_input_is_one_clear_line(client, arguments, message):
    with pytest.raises(Exception) as caught:
        client.predict(**arguments, api_name="/compare")
    text = str(caught.value)
    assert message in text and "Traceback" not in text and "\n" not in text.strip()


def test_one_client_flooding_does_not_lock_out_another(app_url):
    """30 requests from one client in a burst: it keeps its share (2 in line) and the rest are refused
    at once as busy, so a second client is served within a bounded time."""
    flooder = Client(app_url, verbose=False)
    jobs = [flooder.submit(prompt=f"flood {i}", max_new_tokens=16, api_name="/compare") for i in range(30)]
    started = time.monotonic()
    other = Client(app_url, verbose=False).predict(prompt="me too", max_new_tokens=8, api_name="/compare")
    waited = time.monotonic() - started
    assert len(runs_of(other)["sd"]["rows"]) == 8 and waited < 60
    refusals = []
    for job in jobs:
        try:
            job.result(timeout=120)
        except Exception as err:  # noqa: BLE001 (the refusal is what is checked)
            refusals.append(str(err))
    assert refusals and all("busy: you already have" in r and "try again when one has finished" in r for r in refusals)
    assert len(refusals) <= 30 - 2


def test_eight_users_at_once_each_get_what_they_get_alone(app_url, hf_tiny_pair):
    """Eight API users with their own prompts and seeds share the batch; each result equals the same request run alone."""
    requests = {f"u{i}": dict(prompt=f"user {i} counts apples", seed=40 + i, max_new_tokens=48) for i in range(8)}
    results = {}

    def call(name):
        results[name] = Client(app_url, verbose=False).predict(**requests[name], api_name="/compare")

    threads = [threading.Thread(target=call, args=(name,)) for name in requests]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    assert set(results) == set(requests)  # none lost
    # greedy (docs/app-and-api.md, "A class at once"): each request's lanes as they run alone
    alone = solos(hf_tiny_pair, {r["prompt"]: dict(seed=r["seed"], max_new_tokens=48) for r in requests.values()})
    for name, result in results.items():
        asked = requests[name]
        runs = runs_of(result)
        assert all(run["prompt"] == asked["prompt"] and run["settings"]["seed"] == asked["seed"] for run in runs.values())
        for method, token_ids in alone[asked["prompt"]].items():
            rows = runs[method]["rows"]
            assert [r["position"] for r in rows] == list(range(len(rows)))  # none duplicated
            assert [r["token_id"] for r in rows] == token_ids, (name, method)


def test_the_api_streams_both_traces_before_the_final_result(app_url):
    """Through gradio_client each update holds the rows new since the last one, without candidates; the result, whole,
    comes once."""
    job = Client(app_url, verbose=False).submit(prompt="A long story about figs.", max_new_tokens=400, api_name="/compare")
    final = job.result(timeout=240)
    updates = job.outputs()
    assert len(updates) >= 2 and all(u["format"] == "easd-trace-update" for u in updates)
    assert final not in updates  # the result is not streamed before it is sent
    for lane, run in enumerate(final["runs"]):  # each update's rows start where the last one's ended, none twice
        rows = [row for u in updates for row in u["runs"][lane]["rows"]]
        assert [u["runs"][lane]["first_row"] for u in updates] == [0, *accumulate(len(u["runs"][lane]["rows"]) for u in updates)][
            :-1
        ]
        assert rows == [{k: v for k, v in row.items() if "_top" not in k} for row in run["rows"][: len(rows)]]
        assert (
            0 < len(updates[0]["runs"][lane]["rows"]) + len(updates[1]["runs"][lane]["rows"]) < len(run["rows"])
        )  # caught mid-run
    assert all(run["summary"]["stop_reason"] == "max_new_tokens" for run in final["runs"])
    assert all(run["stats"]["stop_reason"] == "stopped" for run in updates[0]["runs"])  # what a run says while it goes on


def test_the_same_request_twice_is_computed_once_and_replayed_whole(app_server):
    url, host = app_server
    worker = host.states["tiny-random"].worker
    asked = dict(prompt="Computed once for the whole class.", max_new_tokens=30, temperature=0.7, seed=11)
    first = Client(url, verbose=False).predict(**asked, api_name="/compare")
    computed = sum(len(t.token_ids) for t in worker.results.get(next(reversed(worker.results.kept))).traces)
    again = Client(url, verbose=False).predict(**asked, api_name="/compare")
    assert again == first and computed == sum(len(r["rows"]) for r in first["runs"])
    other = Client(url, verbose=False).predict(**(asked | {"seed": 12}), api_name="/compare")
    assert other != first  # another seed is another request
