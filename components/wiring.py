"""The app: the Compare and Evaluation tabs, every event wired to its named handler in one place.

Handlers live in `components.handlers` and `components.evaluation`; here each is bound to its page
(and host) with `components.failures.wire`. `components.server.serve` starts the app.
"""

from __future__ import annotations

import functools

import gradio as gr

from easd.serving.host import ModelHost

from . import api, evaluation, gradio_internals, handlers, views
from .evaluation import EvaluationTab, build_evaluation_tab
from .failures import refuse_in_one_line, wire
from .gallery import Gallery
from .page import SESSION_TTL_S, Page, build_page

VIEW_EVENTS = 2  # what-if re-reads, token clicks and steps served at once: one user's heavy trace cannot stall the rest


def build_app(
    host: ModelHost,
    examples: list[str],
    gallery: Gallery | None = None,
    eval_dirs: list[str] | None = None,
    session_ttl_s: float = SESSION_TTL_S,
    mcp: bool = False,
) -> gr.Blocks:
    """The whole app: `examples` run live, `gallery` holds recorded comparisons (default: assets/gallery),
    `eval_dirs` are the evaluation folders the operator allows the Evaluation tab to open; a session's
    traces and files go `session_ttl_s` after its last run or load, or when its tab closes."""
    gallery = gallery or Gallery()
    eval_dirs = list(eval_dirs or [])
    with gr.Blocks(title="EASD Lab", delete_cache=(3600, 7200)) as demo:
        outbox = gradio_internals.Outbox.of(demo)
        with gr.Tabs() as tabs:
            with gr.Tab("Compare", id="compare"):
                page = build_page(host, examples, gallery, session_ttl_s)
            with gr.Tab("Evaluation", id="evaluation"):
                tab = build_evaluation_tab(eval_dirs)
        _wire_compare(demo, page, host, gallery, outbox, eval_dirs)
        _wire_evaluation(tab, eval_dirs, page, host, tabs)
        gr.api(
            wire(api.endpoint(api.compare), host, outbox, words=views.in_api_words),
            api_name="compare",
            concurrency_id="compare",
            concurrency_limit=None,  # it holds no thread while it streams; the pair's line holds its own limit (host.max_line)
        )
        if mcp:
            # not queued: Gradio's MCP server then calls it in the MCP request itself, whose address is the caller's
            # (a queued tool would come through Gradio's own client, from this machine's address)
            briefly = wire(api.endpoint(api.compare_briefly), host, words=views.in_api_words)
            gr.api(briefly, api_name="compare_briefly", queue=False)
    for block in demo.blocks.values():
        if isinstance(block, gr.components.Component):
            refuse_in_one_line(block)
    return demo


def _wire_compare(
    demo: gr.Blocks, page: Page, host: ModelHost, gallery: Gallery, outbox: gradio_internals.Outbox, eval_dirs: list[str]
) -> None:
    c, s = page.controls, page.state
    say = functools.partial(_say, page)
    whatif_in = {*c.whatif().values(), s}
    private = dict(api_visibility="private")
    # the page says itself what these events are doing (components.views.say), so Gradio shows none of their progress
    # (and sends them no place in line: gradio_internals.queue_places_only_where_shown)
    unshown = dict(private, show_progress="hidden")
    # every event is queued: the light ones share a small limit, so a flood of slider moves waits its turn
    instant = dict(unshown, concurrency_id="view", concurrency_limit=VIEW_EVENTS)

    running = dict(
        fn=wire(handlers.generate, page, host, outbox, show=say),
        inputs={page.pair, page.prompt, c.chat, *c.settings().values(), *page.methods.values(), s},
        outputs=page.everything(),
        concurrency_id="generate",
        concurrency_limit=host.slots,  # a page's stream holds a thread: the batch and its line, and no more (ModelHost.slots)
        **unshown,
    )
    # a run starts from Generate, from an example picked (it fills the prompt), or from a refusal's remedy (it sets the
    # setting the refusal names); the last two run once their change is on the page, so the run reads it
    runs = [
        page.generate.click(**running),
        page.example.select(
            wire(handlers.pick_example, page, show=say), {page.example}, [page.prompt, page.message], **instant
        ).success(**running),
        page.fix.click(
            wire(handlers.apply_fix, page, show=say), {s}, [page.fix, *c.settings().values(), page.message], **instant
        ).success(**running),
    ]
    page.stop.click(wire(handlers.stop, page, show=say), {s}, [page.message], **unshown)
    # drawing every token's inspector takes a moment: one file at a time, off the view events' limit
    make = dict(private, concurrency_id="make_html", concurrency_limit=1)
    page.make_html.click(wire(handlers.make_html, page, show=say), {s}, [page.html_file, page.message], **make)
    page.make_site.click(wire(handlers.make_site, page, show=say), {s}, [page.site_file, page.message], **make)
    page.present.click(wire(handlers.present, page, show=say), {s}, [page.message, s], **instant)
    page.clear.click(wire(handlers.clear, page, show=say), whatif_in, [*page.everything(), page.prompt], cancels=runs, **private)
    rerendered = [*page.lane_outputs(), *page.panel_outputs(), c.tau_o_meaning, page.message]
    for control in c.whatif().values():
        control.change(wire(handlers.rerender, page, show=say), whatif_in, rerendered, trigger_mode="always_last", **instant)
    for picker in page.methods.values():
        picker.change(
            wire(handlers.choose_method, page, show=say),
            {*whatif_in, *page.methods.values()},
            [*page.lane_outputs(), *c.own_outputs(), page.message],
            **instant,
        )
    selected = [*rerendered, page.step_lane]
    for source in (*page.lanes.values(), page.inspector):  # the inspector's close button deselects
        source.token_click(wire(handlers.select_token, page, show=say), whatif_in, selected, **instant)
    for trigger, delta in ((page.search.submit, +1), (page.search_next.click, +1), (page.search_prev.click, -1)):
        trigger(wire(handlers.find, page, delta, show=say), {*whatif_in, page.search}, selected, **instant)
    for button, delta in ((page.step_prev, -1), (page.step_next, +1), (page.step_lane, 0)):
        trigger = button.change if button is page.step_lane else button.click
        trigger(wire(handlers.step, page, delta, show=say), {page.step_lane, s}, [page.stepper, page.message], **instant)
    loaded = page.loaded()  # a loaded run brings its prompt and settings: the controls move to them
    page.upload.upload(wire(handlers.load_file, page, host, show=say), {page.upload, s}, loaded, **private)
    page.recorded.change(wire(handlers.open_recorded, page, host, gallery, show=say), {page.recorded, s}, loaded, **private)
    demo.unload(wire(handlers.leave, host, page.sessions, outbox))  # a closed tab's rows leave the batch; its traces and files go
    # a page opened with ?room=CODE follows the presenter's runs; it waits without a thread, so a room's many
    # viewers take no slot of any limit. Unshown above all: the event lasts as long as the room, and Gradio pulses a
    # border on each of its 21 outputs while an event streams, which kept half a core busy on a viewer's idle page
    follow = dict(unshown, concurrency_id="room", concurrency_limit=None)
    demo.load(wire(handlers.follow_room, page, host, show=say), {s}, loaded, **follow)
    # a page opened with a link to a recorded run's token (components.links) opens it
    demo.load(wire(handlers.open_link, page, host, gallery, eval_dirs, show=say), {s}, loaded, **instant)
    polled = [page.status, page.generate, page.timer, page.message]
    tokens = page.controls["max_new_tokens"]
    for trigger in (demo.load, page.timer.tick, page.pair.change, tokens.release):  # on ZeroGPU the status says the cost
        trigger(wire(handlers.poll, page, host, show=say), {page.pair, tokens}, polled, **instant)


def _say(page: Page, text: str) -> dict:
    return {page.message: views.say(text)}


def _wire_evaluation(tab: EvaluationTab, eval_dirs: list[str], page: Page, host: ModelHost, tabs: gr.Tabs) -> None:
    private = dict(api_visibility="private")
    say = functools.partial(_eval_say, tab)
    tab.folder.change(wire(evaluation.load_folder, tab, eval_dirs, show=say), {tab.folder}, tab.outputs(), **private)
    tab.uploads.upload(wire(evaluation.load_uploads, tab, show=say), {tab.uploads}, tab.outputs(), **private)
    tab.make_site.click(
        wire(evaluation.make_site, tab, eval_dirs, page.downloads, show=say),
        {tab.folder},
        [tab.site_file, tab.message],
        **private,
        concurrency_id="make_html",  # one file at a time, made in the one process the page's files are made in
        concurrency_limit=1,
    )
    chosen = {tab.results, tab.left_method, tab.right_method}
    tab.problems.select(
        wire(evaluation.show_answers, tab, show=say), chosen, [tab.left_answer, tab.right_answer, tab.message], **private
    )
    for method in (tab.left_method, tab.right_method):
        method.input(wire(evaluation.show_differences, tab, show=say), chosen, [tab.differences, tab.message], **private)
    # a difference opens both runs in the Compare tab's lanes, which come to the front
    tab.differences.select(
        wire(handlers.open_difference, page, host, tab, tabs, show=say),
        {*chosen, tab.traces, page.state},
        [*page.loaded(), tabs, tab.message],
        **private,
    )


def _eval_say(tab: EvaluationTab, text: str) -> dict:
    return {tab.message: views.say(text)}
