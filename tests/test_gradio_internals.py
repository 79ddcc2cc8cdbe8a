"""components.gradio_internals.skip_untouched_outputs: an update that names a few outputs costs only those, and the
page receives exactly what Gradio itself would send."""

from __future__ import annotations

import asyncio

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
