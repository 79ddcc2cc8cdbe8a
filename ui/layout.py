"""The app: the Compare and Evaluation tabs, and every event wired to its named handler.

Handlers live in `ui.handlers` and `ui.evaluation`; here each is bound to its page (and host) with
`wire`, which also turns every failure into one line in the words of the interface that asked: a
page's message area for the browser, a `gr.Error` for the API. Tracebacks go to the server log only.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable

import gradio as gr

from easd.errors import EasdError

from . import evaluation, handlers
from .backend import ModelHost
from .evaluation import EvaluationTab, build_evaluation_tab
from .gallery import Gallery
from .page import Page, build_page

log = logging.getLogger("easd.app")
UNEXPECTED = "⚠️ Something went wrong on the server (the details are in its log); try again, or reload the page."


def wire(handler: Callable, *fixed, show: Callable[[str], dict] | None = None, words=handlers.in_page_words) -> Callable:
    """`handler` with its first arguments fixed, as a plain function whose failures are one line each.

    Gradio reads a handler's signature and type hints to pass gr.Request and gr.EventData, which
    functools.partial hides, so the bound function carries the handler's own signature minus the
    fixed arguments. An EasdError becomes `show(words(err))` (the page's message area), or, with no
    `show`, a gr.Error (the API); anything else is logged with its traceback and answered with a
    generic line, so no raw Python message reaches a client.
    """

    def answer(err: Exception):
        if isinstance(err, gr.Error):
            raise err
        if isinstance(err, EasdError):
            text = words(err)
        else:
            log.exception("%s failed", handler.__name__)
            text = UNEXPECTED
        if show is None:
            raise gr.Error(text, print_exception=False) from None
        return show(text)

    if inspect.isgeneratorfunction(handler):

        def bound(*args, **kwargs):
            try:
                yield from handler(*fixed, *args, **kwargs)
            except Exception as err:  # noqa: BLE001 (answered in one line; logged when unexpected)
                yield answer(err)

    else:

        def bound(*args, **kwargs):
            try:
                return handler(*fixed, *args, **kwargs)
            except Exception as err:  # noqa: BLE001 (answered in one line; logged when unexpected)
                return answer(err)

    functools.update_wrapper(bound, handler)
    signature = inspect.signature(handler)
    bound.__signature__ = signature.replace(parameters=list(signature.parameters.values())[len(fixed) :])
    return bound


def build_app(
    host: ModelHost, examples: list[str], gallery: Gallery | None = None, eval_dirs: list[str] | None = None
) -> gr.Blocks:
    """The whole app: `examples` run live, `gallery` holds recorded comparisons (default: assets/gallery),
    `eval_dirs` are the evaluation folders the operator allows the Evaluation tab to open."""
    gallery = gallery or Gallery()
    eval_dirs = list(eval_dirs or [])
    with gr.Blocks(title="EASD Lab", delete_cache=(3600, 7200)) as demo:
        with gr.Tab("Compare"):
            page = build_page(host, examples, gallery)
        with gr.Tab("Evaluation"):
            tab = build_evaluation_tab(eval_dirs)
        _wire_compare(demo, page, host, gallery)
        _wire_evaluation(tab, eval_dirs)
        gr.api(
            wire(handlers.compare, host, words=handlers.in_api_words),
            api_name="compare",
            concurrency_id="generate",
            concurrency_limit=host.slots,
        )
    return demo


def _wire_compare(demo: gr.Blocks, page: Page, host: ModelHost, gallery: Gallery) -> None:
    c, s = page.controls, page.state
    say = functools.partial(_say, page)
    whatif_in = {*c.whatif().values(), s}
    private = dict(api_visibility="private")
    instant = dict(private, concurrency_limit=None, show_progress="hidden", queue=False)

    run = page.generate.click(
        wire(handlers.generate, page, host, show=say),
        {page.pair, page.prompt, c.chat, *c.settings().values(), s},
        page.everything(),
        concurrency_id="generate",
        concurrency_limit=host.slots,  # the shared batch and its line decide who runs; see ModelHost.ticket
        show_progress="hidden",
        **private,
    )
    page.stop.click(None, None, None, cancels=[run], **private).then(
        wire(handlers.stop, page, show=say), whatif_in, page.everything(), **private
    )
    page.clear.click(wire(handlers.clear, page, show=say), whatif_in, [*page.everything(), page.prompt], cancels=[run], **private)
    rerendered = [*page.lane_outputs(), *page.panel_outputs(), c.tau_o_meaning, page.message]
    for control in c.whatif().values():
        control.change(wire(handlers.rerender, page, show=say), whatif_in, rerendered, trigger_mode="always_last", **instant)
    selected = [*rerendered, page.step_lane]
    for source in (*page.lanes.values(), page.inspector):  # the inspector's close button deselects
        source.token_click(wire(handlers.select_token, page, show=say), whatif_in, selected, **instant)
    for button, delta in ((page.step_prev, -1), (page.step_next, +1), (page.step_lane, 0)):
        trigger = button.change if button is page.step_lane else button.click
        trigger(wire(handlers.step, page, delta, show=say), {page.step_lane, s}, [page.stepper, page.message], **instant)
    # a loaded run brings its prompt and settings: the controls move to them
    loaded = [*page.everything(), page.prompt, *c.settings().values(), c.tau_o_meaning]
    page.upload.upload(wire(handlers.load_file, page, host, show=say), {page.upload, s}, loaded, **private)
    page.recorded.change(wire(handlers.open_recorded, page, host, gallery, show=say), {page.recorded, s}, loaded, **private)
    page.example.change(wire(handlers.pick_example, page, show=say), {page.example}, [page.prompt, page.message], **instant)
    demo.unload(wire(handlers.leave, host))  # a closed tab's rows leave the shared batch at once
    polled = [page.status, page.generate, page.timer, page.message]
    for trigger in (demo.load, page.timer.tick, page.pair.change):
        trigger(wire(handlers.poll, page, host, show=say), {page.pair}, polled, **instant)


def _say(page: Page, text: str) -> dict:
    return {page.message: handlers.say(text)}


def _wire_evaluation(tab: EvaluationTab, eval_dirs: list[str]) -> None:
    private = dict(api_visibility="private")
    say = functools.partial(_eval_say, tab)
    tab.folder.change(wire(evaluation.load_folder, tab, eval_dirs, show=say), {tab.folder}, tab.outputs(), **private)
    tab.uploads.upload(wire(evaluation.load_uploads, tab, show=say), {tab.uploads}, tab.outputs(), **private)
    tab.problems.select(
        wire(evaluation.show_answers, tab, show=say),
        {tab.results, tab.left_method, tab.right_method},
        [tab.left_answer, tab.right_answer, tab.message],
        **private,
    )


def _eval_say(tab: EvaluationTab, text: str) -> dict:
    return {tab.message: handlers.say(text)}
