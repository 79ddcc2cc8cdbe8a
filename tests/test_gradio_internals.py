"""components.gradio_internals: an update that names a few outputs costs only those, and the page receives exactly
what Gradio itself would send (skip_untouched_outputs); a served app nobody uses leaves the cores alone
(queue_idles_quietly); a page is not told the place in line of events it does not show (queue_places_only_where_shown);
the app starts though Gradio's check of its own page goes unanswered (serve)."""

from __future__ import annotations

import asyncio
import time

import gradio as gr
from gradio.state_holder import SessionState

from components.gradio_internals import skip_untouched_outputs


def build():
    with gr.Blocks() as demo:
        text, number, state = gr.Textbox(), gr.Number(), gr.State()
        plot, download, button = gr.Plot(), gr.DownloadButton(), gr.Button()
        outputs = [text, number, state, plot, download, button]
        button.click(lambda: None, None, outputs)
    return demo, outputs


def postprocess(demo, predictions):
    state = SessionState(demo)
    sent = asyncio.run(demo.postprocess_data(demo.fns[0], predictions, state))
    return sent, state


def test_outputs_an_update_leaves_alone_are_sent_as_gradio_sends_them_and_nothing_is_built_for_them():
    plain, patched = build(), build()
    skip_untouched_outputs(patched[0])
    updates = [
        lambda o: {o[0]: "hello"},
        lambda o: {o[0]: "hello", o[2]: {"kept": 1}},
        lambda o: {o[1]: 3, o[5]: gr.Button(interactive=False)},
        lambda o: {o[0]: gr.skip()},
        lambda o: dict(zip(o, ["a", 1, None, None, None, gr.Button()])),  # every output named: Gradio's own way
    ]
    for update in updates:
        expected, before = postprocess(plain[0], update(plain[1]))
        sent, after = postprocess(patched[0], update(patched[1]))
        assert sent == expected
        named = {patched[1].index(block) for block in update(patched[1])}
        rebuilt = {i for i, block in enumerate(patched[1]) if after.blocks_config.blocks[block._id] is not block}
        assert rebuilt <= named  # an output the update leaves alone is not built anew (its config neither)
        untouched = {i for i, block in enumerate(plain[1]) if i not in named and not block.stateful}
        assert all(before.blocks_config.blocks[plain[1][i]._id] is not plain[1][i] for i in untouched)  # as Gradio does


def idle_cpu_s(demo: gr.Blocks, seconds: float) -> float:
    """The CPU-seconds the thread serving `demo` (uvicorn's, which runs Gradio's queue) uses in `seconds` of nobody
    asking anything."""
    import psutil

    thread = demo.server.thread.native_id
    now = lambda: next(t.user_time + t.system_time for t in psutil.Process().threads() if t.id == thread)  # noqa: E731
    start = now()
    time.sleep(seconds)
    return now() - start


def test_a_served_app_that_nobody_uses_leaves_the_cores_alone():
    """Gradio's queue looks for work every millisecond on Linux (7.5% of a core for an idle app, measured); served as
    the app is served (components.server.serve) it looks at Gradio's Windows pace. Both measured side by side."""
    from components.server import serve

    plain, served = build()[0], build()[0]
    plain.queue().launch(prevent_thread_lock=True, quiet=True)
    serve(served, prevent_thread_lock=True, quiet=True)
    try:
        time.sleep(0.5)  # past their start
        cpu = {"plain": idle_cpu_s(plain, 3.0), "served": idle_cpu_s(served, 3.0)}
    finally:
        plain.close(verbose=False)
        served.close(verbose=False)
    assert cpu["served"] < cpu["plain"] / 3, cpu


def test_the_app_starts_when_its_page_answers_late(monkeypatch):
    """On a busy machine Gradio's check of its own page (one request, 3 s) can go unanswered; Gradio then refuses to
    start ("When localhost is not accessible, a shareable link must be created"). Served as the app is, it starts."""
    import httpx
    from gradio import networking

    from components.server import serve

    monkeypatch.setattr(networking, "url_ok", lambda url: False)  # as the check sees a page that answers late
    demo = build()[0]
    _, url, _ = serve(demo, prevent_thread_lock=True, quiet=True)
    try:
        assert httpx.get(url, timeout=30).status_code == 200
    finally:
        demo.close(verbose=False)


def places_in_line_sent(url: str, fns: list[int], clicks: int) -> dict[int, int]:
    """`clicks` clicks on each of the events `fns`, sent as a page sends them (Gradio's queue protocol, one session):
    how many `estimation` messages (a place in line) each event's clicks received before all were done."""
    import json
    import uuid

    import httpx

    session = uuid.uuid4().hex
    events = {}
    with httpx.Client(base_url=url, timeout=30) as client:
        for _ in range(clicks):
            for fn in fns:
                body = {"data": [], "fn_index": fn, "session_hash": session, "event_data": None, "trigger_id": None}
                events[client.post("gradio_api/queue/join", json=body).json()["event_id"]] = fn
        places, done = dict.fromkeys(fns, 0), 0
        with client.stream("GET", "gradio_api/queue/data", params={"session_hash": session}) as stream:
            for line in stream.iter_lines():
                message = json.loads(line.removeprefix("data: ")) if line.startswith("data: ") else {}
                if message.get("msg") == "estimation":
                    places[events[message["event_id"]]] += 1
                done += message.get("msg") == "process_completed"
                if done == len(events):
                    return places
    raise AssertionError("the event stream ended before every click was answered")


def test_a_page_event_whose_progress_is_hidden_is_not_told_its_place_in_line():
    """Gradio tells each queued event its place whenever the line changes: n clicks, some n²/2 messages, each handled
    by the page. A private event with hidden progress (Stop, a token's click) gets none; one that shows it, its place."""
    from components.server import serve

    with gr.Blocks() as demo:
        button = gr.Button()
        hidden = button.click(lambda: time.sleep(0.05), None, None, show_progress="hidden", api_visibility="private")
        shown = button.click(lambda: time.sleep(0.05), None, None, api_visibility="private")
    _, url, _ = serve(demo, prevent_thread_lock=True, quiet=True)
    try:
        places = places_in_line_sent(url, [hidden["id"], shown["id"]], clicks=6)
    finally:
        demo.close(verbose=False)
    assert places[shown["id"]] >= 6 and places[hidden["id"]] == 0, places
