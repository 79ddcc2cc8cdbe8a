"""The MCP tool (app.py --mcp on), called with the MCP client library from PyPI against the running app."""

import asyncio
import dataclasses
import json
import time

import httpx
import pytest
from conftest import launch_app
from gradio_client import Client
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from test_app_isolation import ARGUMENTS

from components.api import parameters
from easd.method.compare import LANES, brief
from easd.method.methods import METHODS
from easd.method.settings import RULES
from easd.pairs.tiny import load_tiny_pair
from easd.serving.host import ModelHost
from easd.serving.metrics import ServingMetrics
from easd.traces import files as trace_io

TOOL = "compare_briefly"


@pytest.fixture(scope="module")
def served():
    """The app with its MCP server, on the tiny pair, counting for /metrics: (url, host). A run nobody reads is stopped
    after 0.05 s, where the app waits 10: a tool call reads only at its end, and must not be taken for gone."""
    pair = {"tiny-random": long_tiny_pair}
    host = ModelHost(pair, "tiny-random", max_new_tokens_cap=2000, metrics=ServingMetrics(), abandon_after_s=0.05)
    url, demo = launch_app(host, mcp=True)
    yield url, host
    demo.close()


def long_tiny_pair():
    """The tiny pair with room for 2,000-token runs and no end token, so a run lasts."""
    return dataclasses.replace(load_tiny_pair(), context_length=4096, eos_ids=frozenset())


def with_session(url: str, work):
    """`work(session)` in an MCP client session with the app, over MCP's streamable HTTP transport."""

    async def run():
        async with streamable_http_client(f"{url}gradio_api/mcp/") as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await work(session)

    return asyncio.run(run())


def call(url: str, **arguments):
    return with_session(url, lambda session: session.call_tool(TOOL, arguments))


def answer(result) -> dict:
    assert not result.isError, result.content[0].text
    return json.loads(result.content[0].text)


def test_the_one_tool_says_what_each_setting_does(served):
    url, _ = served
    tools = with_session(url, lambda session: session.list_tools()).tools
    assert [tool.name for tool in tools] == [TOOL]  # not `compare`: its whole traces are megabytes
    [tool] = tools
    assert "entropy-aware speculative decoding" in tool.description and "mean acceptance length" in tool.description
    properties = tool.inputSchema["properties"]
    assert list(properties) == [name for name, *_ in parameters()]
    assert all(properties[name].get("description") for name in properties), "every parameter is described"
    assert all(method in properties["left"]["description"] for method in METHODS)
    assert all(rule in properties["rule"]["description"] for rule in RULES)


def test_a_call_answers_briefly_what_the_whole_trace_says(served, tmp_path):
    url, host = served
    asked = dict(prompt="Tom has 3 apples and buys 2 more.", max_new_tokens=40, k=3)
    result = answer(call(url, **asked))
    sd, easd = (result["lanes"][lane] for lane in LANES)
    assert (sd["method"], easd["method"]) == ("sd", "easd") and sd["new_tokens"] == easd["new_tokens"] == 40
    assert sd["interventions"] == [] and easd["interventions"], "the tiny pair's EASD refuses some drafts"
    first = easd["interventions"][0]
    assert first["origin"] == "easd_penalty" and first["drafted"] is not None
    assert result["first_difference"] == first["position"]  # greedy SD and EASD agree up to EASD's first penalty
    assert easd["penalties"] == len(easd["interventions"]) and easd["mean_acceptance_length"] >= 1
    # the same request through the API: the same run, replayed from the results kept, as whole traces
    whole = Client(url, verbose=False).predict(**asked, api_name="/compare")
    (tmp_path / "whole.json").write_text(json.dumps(whole))
    traces = dict(zip(LANES, trace_io.load(tmp_path / "whole.json")))
    assert result == brief(traces)
    assert len(json.dumps(result)) * 10 < len(json.dumps(whole))  # brief: no candidates, no per-token rows
    samples = httpx.get(f"{url}metrics", timeout=30).text
    assert 'easd:requests_total{pair="tiny-random",served="computed"} 1.0' in samples
    assert 'easd:requests_total{pair="tiny-random",served="replayed"} 1.0' in samples


BAD = [  # each wrong value, and the one line the tool answers, in its parameter names
    ({"prompt": "  "}, "prompt: is empty"),
    ({"prompt": "x", "max_new_tokens": 2001}, "max_new_tokens: must be a whole number from 1 to 2000"),
    ({"prompt": "x", "tau_o": 2.0}, "tau_o: must be a number from 0 to 1"),
    ({"prompt": "x", "left": "nonesuch"}, f"left: must be one of {', '.join(METHODS)}"),
    ({"prompt": "x", "pair": "../../etc/passwd"}, "pair: must be one of tiny-random"),
    # the tool's input schema refuses these before the tool runs, in the MCP library's words: "None is not of type
    # 'number'", naming no argument; a float setting past a float's range was an OverflowError and its traceback
    ({"prompt": "x", "tau_h": None}, "tau_h: must be a number from 0 to 4 (got None)"),
    ({"prompt": "x", "tau_h": "0.5"}, "tau_h: must be a number from 0 to 4 (got '0.5')"),
    ({"prompt": "x", "k": 2.5}, "k: must be a whole number from 1 to 12 (got 2.5)"),
    ({"prompt": None}, "prompt: must be text (got None)"),
    ({"prompt": "x", "smc_ess": 10**400}, "smc_ess: must be a number from 0 to 1 (got 100000000000000000"),
    ({"prompt": "x", "tau_hh": 1.0}, "'tau_hh' is not a parameter of this tool: it takes prompt, tau_h"),
]


def test_bad_values_are_one_line_each(served, capfd):
    url, _ = served

    async def calls(session):
        return [await session.call_tool(TOOL, arguments) for arguments, _ in BAD]

    for result, (arguments, line) in zip(with_session(url, calls), BAD):
        text = result.content[0].text
        assert result.isError and line in text, (arguments, text)
        assert "Traceback" not in text and "\n" not in text.strip()
    assert "Traceback" not in capfd.readouterr().err


def test_a_flood_from_one_address_keeps_the_apis_share(served):
    """Ten calls at once from one address: a tool call has no session, so its address is its client and keeps the
    API's share (two running or waiting); the rest are refused at once as busy."""
    url, _ = served

    async def flood(session):
        calls = [session.call_tool(TOOL, {"prompt": f"flood {i}", "max_new_tokens": 64}) for i in range(10)]
        return await asyncio.gather(*calls)

    results = with_session(url, flood)
    refused = [r.content[0].text for r in results if r.isError]
    assert refused and all("busy: you already have" in text for text in refused)
    assert len(refused) <= 10 - 2 and all(answer(r)["lanes"]["left"]["new_tokens"] == 64 for r in results if not r.isError)


def test_a_caller_that_goes_away_stops_its_run(served):
    url, host = served
    stops = host.metrics.registry

    async def leave(session):
        call = session.call_tool(TOOL, {"prompt": "a long story, never read", "max_new_tokens": 2000})
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(call, 1.0)

    with_session(url, leave)
    deadline = time.monotonic() + 30
    while stops.get_sample_value("easd:run_stops_total", {"pair": "tiny-random", "reason": "left"}) != 2:
        assert time.monotonic() < deadline, "the run went on without its caller"
        time.sleep(0.05)
    emitted = stops.get_sample_value("easd:generation_tokens_total", {"pair": "tiny-random", "method": "easd"})
    assert emitted < 2000


def test_without_the_flag_there_is_no_mcp_server_whatever_gradio_mcp_server_says(monkeypatch):
    monkeypatch.setenv("GRADIO_MCP_SERVER", "true")  # Gradio's own switch: the app's flag decides, not it
    host = ModelHost({"tiny-random": load_tiny_pair}, "tiny-random", max_new_tokens_cap=64)
    url, demo = launch_app(host)
    try:
        assert httpx.get(f"{url}gradio_api/mcp/", timeout=30).status_code == 404
        assert f"/{TOOL}" not in Client(url, verbose=False).view_api(print_info=False, return_format="dict")["named_endpoints"]
    finally:
        demo.close()


# --- every route the app serves answers a bad call in one line (components.routes) -------------------------------


def post(url: str, route: str, body) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    return httpx.post(f"{url}gradio_api/{route}", content=content, headers=headers, timeout=30)


@pytest.mark.parametrize("route", ["run/compare", "api/compare", "run/compare_briefly", "api/compare_briefly", "call/compare"])
def test_too_few_values_on_any_route_get_one_line(served, route, capfd):
    url, _ = served
    answered = post(url, route, {"data": ["Hi"]})
    name = route.split("/")[1]
    assert answered.status_code == 422
    assert answered.json()["detail"].startswith(f"{name} takes {len(parameters())} values in this order: prompt, tau_h")
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize("route", ["run/nosuch", "api/nosuch", "call/nosuch", "call/v2/nosuch", "run/generate", "run/stop"])
def test_a_name_that_is_no_api_endpoint_gets_one_line_not_a_traceback(served, route, capfd):
    """Unknown names, and the page's own events, which Gradio would run by their names on the plain routes."""
    url, _ = served
    answered = post(url, route, {"data": ["Hi"]})
    assert answered.status_code == 404
    assert (
        answered.json()["detail"] == f"this app has no API endpoint {route.rsplit('/', 1)[1]!r}: it has compare, compare_briefly"
    )
    assert "Traceback" not in capfd.readouterr().err


def test_a_body_nested_too_deeply_is_one_line(served, capfd):
    url, _ = served
    deep = b"[" * 100_000 + b"]" * 100_000
    answered = post(url, "run/compare", b'{"data": ' + deep + b"}")
    assert answered.status_code == 422 and "nested too deeply" in answered.json()["detail"]
    rpc = b'{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "compare_briefly", "arguments": {"prompt": '
    answered = post(url, "mcp/", rpc + deep + b"}}}")
    assert answered.status_code == 400 and "nested too deeply" in answered.json()["error"]["message"]
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_a_number_json_cannot_carry_is_named_by_its_argument(served, constant):
    url, _ = served
    rpc = '{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "compare_briefly", '
    answered = post(url, "mcp/", (rpc + f'"arguments": {{"prompt": "x", "tau_h": {constant}}}}}}}').encode())
    result = answered.json()["result"]
    assert answered.json()["id"] == 7 and result["isError"]
    assert result["content"][0]["text"] == f"tau_h: must be a finite number (got {constant}, which JSON cannot carry)"


def test_a_number_past_a_floats_range_is_named_by_its_argument(served, capfd):
    """1e400 is JSON, read as inf, and passed on by the MCP library as null ("None is not of type 'number'")."""
    url, _ = served
    rpc = '{"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "compare_briefly", '
    answered = post(url, "mcp/", (rpc + '"arguments": {"prompt": "x", "tau_h": 1e400}}}').encode())
    result = answered.json()["result"]
    assert answered.json()["id"] == 8 and result["isError"]
    assert result["content"][0]["text"] == "tau_h: must be a number from 0 to 4 (got inf)"
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize(
    "body, name",
    [({"prompt": "x", "tau_hh": 1.0}, "tau_hh"), ({"prompt": "x", "request": 1}, "request"), ({"data": ["x"]}, "data")],
)
def test_a_name_compare_lacks_on_the_named_route_gets_one_line_not_a_traceback(served, capfd, body, name):
    """call/v2 takes values by name: Gradio answered a name the endpoint lacks with HTTP 500 and a TypeError traceback."""
    url, _ = served
    answered = post(url, "call/v2/compare", body)
    assert answered.status_code == 422, answered.text
    detail = answered.json()["detail"]
    assert detail.startswith(f"compare has no parameter {name!r}: call/v2/compare takes values by name, any of prompt, tau_h")
    assert "POST /gradio_api/call/compare" in detail and "Traceback" not in capfd.readouterr().err


def test_a_float_setting_past_a_floats_range_is_named_on_every_route(served, capfd):
    """10**400 for smc_ess or tau_h: an OverflowError and its traceback in the log, "Something went wrong" for the caller."""
    url, _ = served
    with pytest.raises(Exception) as caught:
        Client(url, verbose=False).predict(prompt="x", smc_ess=10**400, api_name="/compare")
    assert "smc_ess: must be a number from 0 to 1 (got 1000" in str(caught.value)
    event = post(url, "call/v2/compare", {"prompt": "x", "tau_h": 10**400}).json()["event_id"]
    stream = httpx.get(f"{url}gradio_api/call/v2/compare/{event}", timeout=60).text
    assert "event: error" in stream and "tau_h: must be a number from 0 to 4 (got 1000" in stream
    assert "Traceback" not in capfd.readouterr().err


def test_a_caller_that_leaves_the_plain_route_stops_its_run(served):
    """POST /gradio_api/run/compare_briefly runs in the request itself: a caller that goes away ends it, as over MCP."""
    url, host = served
    stops = host.metrics.registry
    before = stops.get_sample_value("easd:run_stops_total", {"pair": "tiny-random", "reason": "left"}) or 0
    values = {"prompt": "a long story, never read", "max_new_tokens": 2000}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{url}gradio_api/run/compare_briefly", json={"data": list((ARGUMENTS | values).values())}, timeout=1.0)
    deadline = time.monotonic() + 30
    while stops.get_sample_value("easd:run_stops_total", {"pair": "tiny-random", "reason": "left"}) != before + 2:
        assert time.monotonic() < deadline, "the run went on without its caller"
        time.sleep(0.05)
