"""components.gradio_internals: an update that names a few outputs costs only those, and the page receives exactly
what Gradio itself would send (skip_untouched_outputs); a served app nobody uses leaves the cores alone
(queue_idles_quietly); the app starts though Gradio's check of its own page goes unanswered (serve)."""

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
