"""The `compare` API endpoint, called with gradio_client as the README shows."""

import threading

import pytest
from gradio_client import Client

from easd.core import trace as trace_io


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
    import json

    result = Client(app_url, verbose=False).predict(
        prompt="def add(a, b):", max_new_tokens=12, temperature=0.8, seed=5, api_name="/compare"
    )
    (tmp_path / "r.json").write_text(json.dumps(result))
    traces = trace_io.load(tmp_path / "r.json")
    assert [t.settings.method for t in traces] == ["sd", "easd"] and all(len(t.records) == 12 for t in traces)


@pytest.mark.parametrize(
    "arguments, message", [({"prompt": "  "}, "--prompt: is empty"), ({"prompt": "x", "tau_o": 2.0}, "--tau-o")]
)
def test_bad_input_is_a_clear_error(app_url, arguments, message):
    with pytest.raises(Exception, match=message):
        Client(app_url, verbose=False).predict(**arguments, api_name="/compare")


def test_two_users_at_once_both_finish(app_url):
    results = {}

    def call(name):
        results[name] = Client(app_url, verbose=False).predict(prompt=f"user {name}", max_new_tokens=20, api_name="/compare")

    threads = [threading.Thread(target=call, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert set(results) == {"a", "b"}
    assert all(len(runs_of(r)["sd"]["rows"]) == 20 for r in results.values())
