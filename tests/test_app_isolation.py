"""One user cannot break the class: the app attacked as a hostile user of a public Space would attack it.

Each test is one point of the attack on the real app (tiny random pair, loopback only): bad values
that reach the maths, short argument lists, streams nobody reads, spoofed addresses, huge texts in
a loaded trace, and what a stream sends. Sessions that end are tested in the browser too
(tests/test_app_browser.py).
"""

import concurrent.futures
import dataclasses
import gc
import json
import logging
import socket
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import httpx
import psutil
import pytest
from conftest import launch_app
from gradio_client import Client

from components.api import parameters
from easd.errors import EasdError
from easd.method.compare import Comparison
from easd.method.settings import DecodeSettings
from easd.method.step import Batch
from easd.method.trace import Trace
from easd.pairs.tiny import load_tiny_pair
from easd.serving.host import ModelHost
from easd.traces import files as trace_io

ARGUMENTS = dict(prompt="x", tau_h=1.0, tau_o=0.8, top_n=5, k=4, temperature=0.0, top_p=1.0, max_new_tokens=8)
ARGUMENTS |= dict(rule="full", seed=0, pair="", chat=True, left="sd", right="easd")  # /compare's parameters, in order,
ARGUMENTS |= {name: default for name, default, *_ in parameters()[len(ARGUMENTS) :]}  # then each method's own


def post_raw(url: str, data, route: str = "compare") -> str:
    """POST a raw body to /gradio_api/call/ROUTE; -> the event id, or raise HTTPError."""
    request = urllib.request.Request(
        f"{url}gradio_api/call/{route}", json.dumps(data).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())["event_id"]


def read_stream(url: str, event_id: str, route: str = "compare") -> bytes:
    with urllib.request.urlopen(f"{url}gradio_api/call/{route}/{event_id}", timeout=120) as response:
        return response.read()


def solo(pair, prompt: str, **settings) -> dict[str, list[int]]:
    traces = Comparison(pair, prompt, DecodeSettings(record_top=20, **settings)).run()
    return {trace.settings.method: trace.token_ids for trace in traces.values()}


def solos(pair, asked: dict[str, dict]) -> dict[str, dict[str, list[int]]]:
    """`solo` for each prompt in `asked` (its settings), all their lanes decoded as one batch, in which each row decodes
    as it would alone (docs/method.md, "Many rows at once"; tests/test_batch.py checks it): one pass serves them all."""
    comparisons = {
        prompt: Comparison(pair, prompt, DecodeSettings(record_top=20, **settings)) for prompt, settings in asked.items()
    }
    Batch(pair, [generation for c in comparisons.values() for generation in c.generations.values()]).run()
    return {prompt: {t.settings.method: t.token_ids for t in c.traces.values()} for prompt, c in comparisons.items()}


def tokens_by_lane(result: dict) -> dict[str, list[int]]:
    return {run["settings"]["method"]: [row["token_id"] for row in run["rows"]] for run in result["runs"]}


# --- 1. a value that would break the maths --------------------------------------------------------


def test_the_attack_gets_one_line_and_the_other_user_their_solo_result(app_url, hf_tiny_pair):
    honest = Client(app_url, verbose=False).submit(prompt="an honest question", max_new_tokens=256, api_name="/compare")
    time.sleep(0.3)  # the honest run is decoding when the attack arrives
    for tiny in (1e-38, 1e-40, 5e-324):
        with pytest.raises(Exception) as caught:
            Client(app_url, verbose=False).predict(prompt="attacker", temperature=tiny, max_new_tokens=8, api_name="/compare")
        line = str(caught.value)
        assert f"temperature: must be 0 (greedy) or a number ≥ 0.001 (got {tiny!r})" in line and "\n" not in line.strip()
    assert tokens_by_lane(honest.result(timeout=120)) == solo(hf_tiny_pair, "an honest question", max_new_tokens=256)


def test_a_loaded_trace_cannot_carry_the_attack_either(trace_sources, tmp_path):
    document = json.loads((trace_sources / "t.json").read_text())
    document["runs"][0]["settings"]["temperature"] = 1e-320
    (tmp_path / "bad.json").write_text(json.dumps(document))
    with pytest.raises(EasdError, match=r"settings.temperature: must be 0 \(greedy\) or a number ≥ 0.001"):
        trace_io.load(tmp_path / "bad.json")


# --- 7. short argument lists, and a pair that is not a name ----------------------------------------


@pytest.mark.parametrize("data", [[], ["Hi"], ["Hi", 1.0, 0.8]])
def test_too_few_values_get_one_line_naming_them(app_url, data):
    with pytest.raises(urllib.error.HTTPError) as caught:
        post_raw(app_url, {"data": data})
    assert caught.value.code == 422
    detail = json.loads(caught.value.read())["detail"]
    assert (
        detail.startswith(f"compare takes {len(ARGUMENTS)} values in this order: prompt, tau_h")
        and f"(got {len(data)})" in detail
    )
    assert [name for name, *_ in parameters()] == list(ARGUMENTS) and list(ARGUMENTS)[14:16] == ["mti_tau", "mti_omega"]


def test_named_values_fill_in_the_rest(app_url):
    event = post_raw(app_url, {"prompt": "Hi", "max_new_tokens": 5}, route="v2/compare")
    stream = read_stream(app_url, event, route="v2/compare").decode()
    final = json.loads(stream.split("event: complete\ndata:", 1)[1])[0]
    assert [len(run["rows"]) for run in final["runs"]] == [5, 5]


@pytest.mark.parametrize("pair", [None, [], 0, False, "tiny"])
def test_a_pair_that_is_not_an_allowed_name_is_refused(app_url, pair):
    event = post_raw(app_url, {"data": list((ARGUMENTS | {"pair": pair}).values())})
    stream = read_stream(app_url, event).decode()
    assert "event: error" in stream and "pair: must be one of tiny-random" in stream


# --- 6. streams send what is new ------------------------------------------------------------------


def queue_join(url: str, data: list) -> str:
    """Join compare's event on Gradio's queue protocol, as its JavaScript client does; -> the session to read."""
    config = httpx.get(f"{url}config").json()
    index = next(d["id"] for d in config["dependencies"] if d.get("api_name") == "compare")
    session = uuid.uuid4().hex
    httpx.post(f"{url}gradio_api/queue/join", json={"data": data, "fn_index": index, "session_hash": session}).raise_for_status()
    return session


def test_a_400_token_stream_sends_its_result_once_on_the_plain_route(app_url):
    event = post_raw(
        app_url, {"data": list((ARGUMENTS | {"prompt": "A long story about pears.", "max_new_tokens": 400}).values())}
    )
    stream = read_stream(app_url, event)
    events = [chunk for chunk in stream.split(b"\n\n") if chunk.startswith(b"event: generating")]
    final = stream.split(b"event: complete\ndata: ", 1)[1].strip()
    updates = [json.loads(chunk.split(b"data: ", 1)[1])[0] for chunk in events]
    print(f"\n400-token /call/compare stream: {len(stream):,} bytes in {len(events)} updates; result {len(final):,} bytes")
    assert len(stream) <= 1.2 * len(final)
    assert updates and all(u["format"] == "easd-trace-update" for u in updates)  # the last one too: the result comes once
    whole = json.loads(final)[0]
    for lane, run in enumerate(whole["runs"]):  # the updates' rows, appended, are the run's first rows (but candidates)
        rows = [row for update in updates for row in update["runs"][lane]["rows"]]
        assert rows == [{k: v for k, v in row.items() if "_top" not in k} for row in run["rows"][: len(rows)]]
        assert [u["runs"][lane]["first_row"] for u in updates] == sorted(u["runs"][lane]["first_row"] for u in updates)


@pytest.mark.slow  # the plain route's twin (above) stays in the quick tier: 8 s, the quick tier's own budget is 3 min
def test_a_400_token_stream_sends_its_result_once_on_the_queue_protocol(app_url):
    # not the plain route's prompt: the same request again would be replayed whole (easd.serving.same_request), not streamed
    session = queue_join(app_url, list((ARGUMENTS | {"prompt": "A long story about plums.", "max_new_tokens": 400}).values()))
    stream = httpx.get(f"{app_url}gradio_api/queue/data", params={"session_hash": session}, timeout=120).content
    messages = [json.loads(line[len(b"data: ") :]) for line in stream.split(b"\n\n") if line.startswith(b"data: ")]
    updates = [m for m in messages if m["msg"] == "process_generating"]
    [completed] = [m for m in messages if m["msg"] == "process_completed"]
    result = json.dumps(completed["output"]["data"]).encode()
    print(f"\n400-token queue-protocol stream: {len(stream):,} bytes in {len(updates)} updates; result {len(result):,} bytes")
    assert len(stream) <= 1.2 * len(result)
    assert len(updates) >= 2 and completed["output"]["data"][0]["format"] == "easd-trace"
    assert [len(run["rows"]) for run in completed["output"]["data"][0]["runs"]] == [400, 400]


# --- 2. calls while the pair loads ----------------------------------------------------------------


def test_a_call_while_the_pair_loads_waits_for_it_in_line(hf_tiny_pair):
    """A script that starts the app and calls it at once: the call waits for the pair, then runs."""
    loaded = threading.Event()
    host = ModelHost({"tiny-random": lambda: loaded.wait(60) and hf_tiny_pair}, "tiny-random", max_new_tokens_cap=50)
    url, demo = launch_app(host, loaded=False)
    try:
        early = [Client(url, verbose=False).submit(prompt=f"early {i}", max_new_tokens=12, api_name="/compare") for i in (0, 1)]
        deadline = time.monotonic() + 30
        while len(host.states["tiny-random"].waiters) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(host.states["tiny-random"].waiters) == 2 and not any(job.done() for job in early)
        loaded.set()
        for i, job in enumerate(early):
            assert tokens_by_lane(job.result(timeout=60)) == solo(hf_tiny_pair, f"early {i}", max_new_tokens=12)
        assert host.states["tiny-random"].waiters == []
    finally:
        loaded.set()
        demo.close()


def test_only_a_pair_that_failed_to_load_is_refused():
    def broken():
        time.sleep(1)
        raise OSError("target.gguf: no such file\n(the rest of a long trace)")

    host = ModelHost({"tiny-random": broken}, "tiny-random", max_new_tokens_cap=50)
    url, demo = launch_app(host, loaded=False)
    try:
        with pytest.raises(Exception) as caught:  # came while it loaded
            Client(url, verbose=False).predict(prompt="x", max_new_tokens=4, api_name="/compare")
        assert str(caught.value).strip() == "the pair tiny-random failed to load: target.gguf: no such file"
        with pytest.raises(Exception) as caught:  # came after
            Client(url, verbose=False).predict(prompt="x", max_new_tokens=4, api_name="/compare")
        assert str(caught.value).strip() == "the pair tiny-random failed to load: target.gguf: no such file"
    finally:
        demo.close()


# --- 3. a stream nobody reads, and one read slowly ------------------------------------------------


def long_tiny_pair():
    """The tiny pair with room for 2,000-token runs and no end token (RoPE has no hard limit), so a run lasts."""
    return dataclasses.replace(load_tiny_pair(), context_length=4096, eos_ids=frozenset())


@pytest.fixture(scope="module")
def short_patience():
    """An app that stops a run whose client has taken nothing for 2 s; one comparison at a time."""
    host = ModelHost({"tiny-random": long_tiny_pair}, "tiny-random", max_new_tokens_cap=2000, max_batch=2, abandon_after_s=2)
    url, demo = launch_app(host)
    yield url, host
    demo.close()


def running_ticket(host: ModelHost, prompt: str, timeout: float = 30):
    worker, deadline = host.states["tiny-random"].worker, time.monotonic() + timeout
    while time.monotonic() < deadline:
        for ticket in [*worker.running, *worker.line]:
            if ticket.generations[0].prompt == prompt:
                return ticket
        time.sleep(0.01)
    raise AssertionError(f"no ticket for {prompt!r}")


def wait_until(condition, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"not within {seconds} s"
        time.sleep(0.01)


LONG = ARGUMENTS | {"max_new_tokens": 2000, "k": 12}  # about 15 s of decoding alone, about 1.5 MB of updates


def assert_stopped_unread(ticket, started: float, what: str) -> None:
    assert ticket.join(timeout=60), f"{what}: still running after a minute"
    stops = {t.stats.stop_reason for t in ticket.traces()}
    tokens = [len(t.records) for t in ticket.traces()]
    print(f"\n{what}: stopped as {stops} after {tokens} tokens, {time.monotonic() - started:.1f} s after it began")
    assert stops == {"unread"} and max(tokens) < 1500


def test_a_stream_nobody_reads_is_stopped_and_the_next_user_gets_the_room(short_patience):
    url, host = short_patience
    post_raw(url, {"data": list((LONG | {"prompt": "nobody reads this"}).values())})  # and never read
    unread = running_ticket(host, "nobody reads this")
    started = time.monotonic()
    reader = Client(url, verbose=False).predict(prompt="I read mine", max_new_tokens=40, api_name="/compare")
    assert_stopped_unread(unread, started, "a stream never read")
    assert unread.last_read == unread.started  # Gradio pulling the generator never counted as a read
    assert [len(run["rows"]) for run in reader["runs"]] == [40, 40]


def read_one_event_then_hold(url: str, path: str) -> socket.socket:
    """GET `path` with a raw HTTP/1.1 call, read until the first event, then stop reading (the socket stays
    open, as a script that stalled would leave it)."""
    host, port = url.split("//")[1].strip("/").split(":")
    conn = socket.create_connection((host, int(port)), timeout=30)
    conn.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    received = b""
    while b"\n\n" not in received.split(b"\r\n\r\n", 1)[-1]:
        received += conn.recv(1)  # byte by byte: nothing beyond the first event is taken from the kernel
    return conn


# the queue's case in the full suite only: the plain route's stays in the quick tier (3 min)
@pytest.mark.parametrize("route", ["plain", pytest.param("queue", marks=pytest.mark.slow)])
def test_a_stream_read_once_then_held_open_is_stopped(short_patience, route):
    """A script that read one event and stalled with its connection open, on each of the API's two routes."""
    url, host = short_patience
    data = list((LONG | {"prompt": f"one event on the {route} route"}).values())
    if route == "plain":
        stream = f"/gradio_api/call/compare/{post_raw(url, {'data': data})}"
    else:
        stream = f"/gradio_api/queue/data?session_hash={queue_join(url, data)}"
    ticket = running_ticket(host, f"one event on the {route} route")
    started = time.monotonic()
    with read_one_event_then_hold(url, stream):
        assert_stopped_unread(ticket, started, f"a stream on the {route} route, read once")


@pytest.mark.slow  # a reader kept at the edge of its patience for 12 s: the full suite's, not the quick tier's
def test_a_stream_that_is_read_is_not_stopped(short_patience):
    url, host = short_patience
    event = post_raw(url, {"data": list((LONG | {"prompt": "I read every update", "max_new_tokens": 500}).values())})
    ticket = running_ticket(host, "I read every update")
    stream = read_stream(url, event)  # read as it comes
    final = json.loads(stream.split(b"event: complete\ndata: ", 1)[1])[0]
    assert {run["summary"]["stop_reason"] for run in final["runs"]} <= {"eos", "max_new_tokens"}
    assert ticket.last_read > ticket.started


@pytest.mark.slow  # a dropped heartbeat is not taken for a user who left
def test_a_client_whose_heartbeat_drops_while_it_reads_keeps_its_whole_run(short_patience, caplog):
    """Gradio calls the page's unload event when a session's heartbeat connection ends, and on a busy machine that
    happens to clients that are still there: gradio_client gives up on a heartbeat more than 20 s late. A client
    still reading its run's stream has not left, and its run goes on to its end. 800 tokens a lane (1,500 until stop
    84, twice the CPU): the unload is checked to come while the run is under way."""
    url, host = short_patience
    caplog.set_level(logging.INFO, logger="easd.app")  # where the app says it kept a connected client's runs
    prompt = "my heartbeat drops, I read on"
    session = queue_join(url, list((LONG | {"prompt": prompt, "max_new_tokens": 800}).values()))
    heartbeat = httpx.Client(timeout=30)
    with heartbeat.stream("GET", f"{url}gradio_api/heartbeat/{session}") as beating:
        next(beating.iter_lines())  # the heartbeat is connected
        reading = concurrent.futures.ThreadPoolExecutor(1).submit(
            lambda: httpx.get(f"{url}gradio_api/queue/data", params={"session_hash": session}, timeout=120).content
        )
        ticket = running_ticket(host, prompt)
        time.sleep(1)
    heartbeat.close()  # Gradio now runs the unload event for this session, while its client reads on
    wait_until(lambda: any("heartbeat ended while it is still connected" in r.getMessage() for r in caplog.records))
    assert not ticket.done  # the unload came mid-run
    stream = reading.result(timeout=120)
    [completed] = [json.loads(line[6:]) for line in stream.split(b"\n\n") if b'"process_completed"' in line]
    runs = completed["output"]["data"][0]["runs"]
    print(f"\nheartbeat dropped mid-run: lanes ended {[(len(r['rows']), r['summary']['stop_reason']) for r in runs]}")
    assert [(len(r["rows"]), r["summary"]["stop_reason"]) for r in runs] == [(800, "max_new_tokens")] * 2
    assert ticket.done


@pytest.mark.slow  # no honest API client loses a lane's end to a patience of 1 s, sixteen reading at once
def test_sixteen_honest_clients_with_a_second_of_patience_get_every_lane_whole(hf_tiny_pair):
    """Sixteen gradio_client users at once, the app's patience 1 s: the app had read a backlog as absence (15 of 16
    such users lost their runs), then a dropped heartbeat as a goodbye (5 of 16 lost the end of a lane, "stopped").
    Every lane of every result is whole. No spinning processes keep the cores busy here: with them, neither failure
    came back when its fix was undone (the heartbeat test above fails then; a backlog cannot build while a stream
    skips the ticks of a client that is behind, components/news.py), and they cost about 80 CPU-seconds."""
    host = ModelHost(
        {"tiny-random": load_tiny_pair},
        "tiny-random",
        max_new_tokens_cap=400,
        max_batch=32,
        max_per_address=16,
        abandon_after_s=1,
    )
    url, demo = launch_app(host)
    prompts, length = [f"busy pupil {i}" for i in range(16)], 300
    try:
        with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
            jobs = [
                pool.submit(Client(url, verbose=False).predict, prompt=p, max_new_tokens=length, api_name="/compare")
                for p in prompts
            ]
            results = [job.result(timeout=300) for job in jobs]
    finally:
        demo.close()
    lanes = [(len(run["rows"]), run["summary"]["stop_reason"]) for result in results for run in result["runs"]]
    print(f"\n16 readers at once, patience 1 s: lanes ended {sorted(set(lanes))}")
    assert all(stop in ("eos", "max_new_tokens") and (rows == length or stop == "eos") for rows, stop in lanes)
    for prompt, result in list(zip(prompts, results))[::8]:  # two of them; tests/test_app_api.py checks every one
        assert tokens_by_lane(result) == solo(hf_tiny_pair, prompt, max_new_tokens=length)


# --- 4. limits that count what is really waiting, and addresses nobody can spoof -------------------


def test_twelve_users_behind_one_address_are_all_served(app_url):
    results, errors = {}, []

    def user(i):
        try:
            results[i] = Client(app_url, verbose=False).predict(prompt=f"pupil {i}", max_new_tokens=24, api_name="/compare")
        except Exception as err:  # noqa: BLE001 (what is checked is that none fails)
            errors.append(str(err))

    threads = [threading.Thread(target=user, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    assert not errors and len(results) == 12


def test_a_spoofed_forwarded_for_header_does_not_make_a_new_address(hf_tiny_pair):
    host = ModelHost({"tiny-random": lambda: hf_tiny_pair}, "tiny-random", max_new_tokens_cap=500, max_batch=2, max_per_address=3)
    url, demo = launch_app(host)
    worker = host.states["tiny-random"].worker
    try:
        jobs = [
            Client(url, verbose=False, headers={"X-Forwarded-For": f"203.0.113.{i}"}).submit(
                prompt=f"flood {i}", max_new_tokens=500, k=12, api_name="/compare"
            )
            for i in range(4)
        ]
        # the fourth is refused at once, while the other three hold their places (one decoding, two in line)
        done, _ = concurrent.futures.wait(jobs, timeout=120, return_when=concurrent.futures.FIRST_COMPLETED)
        refused = [str(job.exception()) for job in done]
        assert refused and all(
            "your network address already has 3 runs going or waiting (at most 3 per address)" in o for o in refused
        )
        assert {t.address for t in worker.running + list(worker.line)} == {"127.0.0.1"}
    finally:
        for ticket in [*worker.running, *worker.line]:
            ticket.cancel()
        demo.close()


# --- 5. one large text in a loaded trace ------------------------------------------------------------


@pytest.mark.parametrize(
    "field, size, message",
    [
        ("token_text", 2_000_000, "rows[0].token_text: 'x"),
        ("prompt", 200_000, "prompt: 'x"),
        ("draft_model", 5_000, "draft_model: 'x"),
    ],
)
def test_every_text_of_a_loaded_trace_has_a_length_limit(trace_sources, tmp_path, field, size, message):
    document = json.loads((trace_sources / "t.json").read_text())
    run = document["runs"][0]
    if field == "token_text":
        run["rows"][0][field] = "x" * size
    else:
        run[field] = "x" * size
    path = tmp_path / "long.json"
    path.write_text(json.dumps(document))
    started = time.monotonic()
    with pytest.raises(EasdError) as caught:
        trace_io.load(path)
    assert message in str(caught.value) and "characters" in str(caught.value) and len(str(caught.value)) < 300
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    "content, suffix, message",
    [
        (b'{"format": "easd-trace", "version": 1, "runs": [' + b"9" * 5000 + b"]}", ".json", "a number has more digits"),
        (b"\xff\xfe not text", ".json", "it is not UTF-8 text"),
        (b"position,token_text\n\xff\n", ".csv", "it is not UTF-8 text"),
        (b'"' + b"x" * 140_000 + b'"\n', ".csv", "a cell is longer than the 131,072 characters"),
    ],
)
def test_unreadable_files_are_explained_in_our_words(tmp_path, trace_sources, content, suffix, message):
    path = tmp_path / f"f{suffix}"
    header = (trace_sources / "t.csv").read_bytes().split(b"\n", 1)[0] + b"\n" if content.startswith(b'"') else b""
    path.write_bytes(header + content)
    with pytest.raises(EasdError) as caught:
        trace_io.load(path)
    text = str(caught.value)
    assert message in text and "sys.set_int_max_str_digits" not in text and "field limit" not in text and "codec" not in text


def test_a_file_over_the_limit_is_told_its_size_unrounded(tmp_path):
    path = tmp_path / "big.json"
    with open(path, "wb") as f:
        f.truncate(int(52.5 * 2**20))  # 52.5 MiB: "50 MB is larger than the 50 MB" said nothing
    with pytest.raises(EasdError, match=r"big.json: 55,050,240 bytes is larger than the 52,428,800 bytes \(50 MiB\)"):
        trace_io.load(path)


def test_refused_inputs_are_one_short_line_to_the_user_and_in_the_log(app_url, capfd, caplog):
    """Gradio's own checks (a file's type, a listed choice) run before any handler; their refusals printed a
    traceback and echoed the value whole, so anyone could fill the log."""
    upload = httpx.post(f"{app_url}gradio_api/upload", files={"files": ("notes.txt", b"hello")}).json()[0]
    refusals = {
        "a .txt upload": page_event(
            app_url, uuid.uuid4().hex, "upload", {"upload": {"path": upload, "meta": {"_type": "gradio.FileData"}}}
        ),
        "a 100 kB gallery key": page_event(app_url, uuid.uuid4().hex, "recorded", {"recorded": "k" * 100_000}),
    }
    printed = capfd.readouterr().err  # where Gradio prints a traceback
    for what, output in refusals.items():
        print(f"\n{what}: {output['error']}")
        assert len(output["error"]) < 300
    assert "Load a trace file (.csv / .json): Invalid file type" in refusals["a .txt upload"]["error"]
    assert "Traceback" not in printed and "k" * 200 not in printed
    lines = [r.getMessage() for r in caplog.records if r.name == "easd.app"]
    assert len(lines) == 2 and all(line.startswith("refused a value for") and len(line) < 400 for line in lines)


def test_every_event_is_queued_and_the_light_ones_share_a_small_limit():
    from components.wiring import VIEW_EVENTS, build_app

    demo = build_app(ModelHost({}, None), [])
    functions = [fn for fn in demo.fns.values() if fn.fn is not None]  # Stop's first step only cancels, and runs no code
    assert functions and all(fn.queue for fn in functions)
    views = [fn for fn in functions if fn.concurrency_id == "view"]
    names = {fn.name for fn in views}
    assert {"rerender", "select_token", "step", "poll"} <= names and {fn.concurrency_limit for fn in views} == {VIEW_EVENTS}


# --- 2. sessions that end, over the page's own protocol ---------------------------------------------


def page_event(url: str, session_hash: str, trigger: str, values: dict) -> list:
    """Run the event of the page's component `trigger` as the browser does (queue/join, then its event
    stream), with `values` by elem_id (the session state: None, as a new tab sends); -> its output."""
    config = httpx.get(f"{url}config", timeout=30).json()
    ids = {c["id"]: c.get("props", {}).get("elem_id") for c in config["components"]}
    dependency = next(d for d in config["dependencies"] if [ids.get(t[0]) for t in d["targets"]] == [trigger])
    data = [values.get(ids.get(i)) for i in dependency["inputs"]]
    body = {"data": data, "fn_index": dependency["id"], "session_hash": session_hash, "trigger_id": None}
    httpx.post(f"{url}gradio_api/queue/join", json=body, timeout=30).raise_for_status()
    with httpx.stream("GET", f"{url}gradio_api/queue/data", params={"session_hash": session_hash}, timeout=60) as stream:
        for line in stream.iter_lines():
            if line.startswith("data:") and '"process_completed"' in line:
                return json.loads(line[5:])["output"]
    raise AssertionError("the event never completed")


def live_traces() -> int:
    gc.collect()
    return sum(type(o) is Trace for o in gc.get_objects())


@pytest.mark.slow  # a session's traces and files are freed at its time limit, on a quiet and a busy machine
@pytest.mark.parametrize("load", ["quiet", "busy"])
def test_a_session_past_its_time_limit_frees_its_traces_and_files(load, request):
    from gradio.utils import get_upload_folder

    if load == "busy":
        request.getfixturevalue("busy_cores")
    host = ModelHost({}, None)  # a viewer: the gallery needs no model
    url, demo = launch_app(host, session_ttl_s=6)
    try:
        folders = Path(get_upload_folder()) / "easd-sessions"
        before_folders = set(folders.glob("*")) if folders.exists() else set()
        before_traces, rss, held = live_traces(), psutil.Process().memory_info().rss, set()
        for _ in range(5):  # five sessions, each holding a recorded comparison and its exported files
            output = page_event(url, uuid.uuid4().hex, "recorded", {"recorded": "shirt"})
            assert output.get("data") and not output.get("error")
            # each is looked at as it opens: on a busy machine the first may reach its limit before the fifth opens
            opened = set(folders.glob("*")) - before_folders - held
            assert len(opened) == 1 and live_traces() >= before_traces + 2
            held |= opened
        deadline = time.monotonic() + 30
        while (set(folders.glob("*")) - before_folders) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not set(folders.glob("*")) - before_folders  # every session's folder went with it
        assert live_traces() <= before_traces  # and its traces
        print(
            f"\nfive sessions ({load} machine): RSS {rss / 2**20:.0f} MB before, "
            f"{psutil.Process().memory_info().rss / 2**20:.0f} MB after their time limit"
        )
    finally:
        demo.close()


def test_closing_the_app_waits_for_no_clients_heartbeat(hf_tiny_pair):
    """Closing the app ends every session's heartbeat, and a heartbeat that ends waits RECONNECT_S for its client to
    come back (`leave`): not while the app closes. Gradio's close waited that out for any client still connected (5 s,
    then it gave up with the server still running), in every test that starts an app of its own."""
    host = ModelHost({"tiny-random": lambda: hf_tiny_pair}, "tiny-random", max_new_tokens_cap=400, max_batch=4)
    url, demo = launch_app(host)
    client = Client(url, verbose=False)  # its heartbeat stays connected until the app closes
    assert len(client.predict(prompt="hi", max_new_tokens=8, api_name="/compare")["runs"][0]["rows"]) == 8
    started = time.monotonic()
    demo.close()
    closed = time.monotonic() - started
    print(f"\nthe app closed {closed:.2f} s after it was asked, a client connected")
    assert closed < 4  # 5.0 s before
