"""The app: the Compare and Evaluation tabs, every event wired to its named handler, and how it is served.

Handlers live in `components.handlers` and `components.evaluation`; here each is bound to its page (and host) with
`wire`, which also turns every failure into one line in the words of the interface that asked: a
page's message area for the browser, a `gr.Error` for the API. Tracebacks go to the server log only.
`serve` starts it as app.py, the load test and the tests do.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path

import gradio as gr
from starlette.middleware import Middleware

from easd.errors import EasdError

from . import evaluation, gradio_internals, handlers
from .backend import ModelHost
from .evaluation import EvaluationTab, build_evaluation_tab
from .gallery import Gallery
from .page import SESSION_TTL_S, Page, build_page

log = logging.getLogger("easd.app")
ASSETS = Path(__file__).resolve().parent.parent / "assets"
LIGHT_EVENTS = 4  # uploads and the Evaluation tab's events served at once (generation has its own limit: ModelHost.slots)
MAX_UPLOAD = "60mb"  # a little above easd.core.trace.MAX_TRACE_BYTES, so the app's own message explains the limit
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


def refuse_in_one_line(component: gr.components.Component) -> None:
    """Make `component`'s own refusals one line: Gradio checks a value before any handler sees it (a file's
    type, a choice that is not listed) and refuses it with an error that prints a traceback and quotes the
    value whole, however long. Here the log gets one line and the user the component's label and Gradio's
    reason, each with the value cut short."""
    preprocess = component.preprocess
    name = getattr(component, "label", None) or component.elem_id or type(component).__name__

    def checked(payload):
        try:
            return preprocess(payload)
        except gr.Error as err:
            reason = _cut(str(err.message))
            log.warning("refused a value for %s: %s", name, reason)
            raise gr.Error(f"{name}: {reason}", print_exception=False) from None

    component.preprocess = checked


def _cut(text: str, keep: int = 80) -> str:
    """`text` with its middle cut out if it is long: a quoted value may be megabytes; its ends say enough."""
    return text if len(text) <= 2 * keep else f"{text[:keep]}…{text[-keep:]}"


VIEW_EVENTS = 2  # what-if re-reads, token clicks and steps served at once: one user's heavy trace cannot stall the rest


def build_app(
    host: ModelHost,
    examples: list[str],
    gallery: Gallery | None = None,
    eval_dirs: list[str] | None = None,
    session_ttl_s: float = SESSION_TTL_S,
) -> gr.Blocks:
    """The whole app: `examples` run live, `gallery` holds recorded comparisons (default: assets/gallery),
    `eval_dirs` are the evaluation folders the operator allows the Evaluation tab to open; a session's
    traces and files go `session_ttl_s` after its last run or load, or when its tab closes."""
    gallery = gallery or Gallery()
    eval_dirs = list(eval_dirs or [])
    with gr.Blocks(title="EASD Lab", delete_cache=(3600, 7200)) as demo:
        outbox = gradio_internals.Outbox(demo)
        with gr.Tab("Compare"):
            page = build_page(host, examples, gallery, session_ttl_s)
        with gr.Tab("Evaluation"):
            tab = build_evaluation_tab(eval_dirs)
        _wire_compare(demo, page, host, gallery, outbox)
        _wire_evaluation(tab, eval_dirs)
        gr.api(
            wire(handlers.compare, host, outbox, words=handlers.in_api_words),
            api_name="compare",
            concurrency_id="generate",
            concurrency_limit=host.slots,
        )
    for block in demo.blocks.values():
        if isinstance(block, gr.components.Component):
            refuse_in_one_line(block)
    return demo


def _wire_compare(demo: gr.Blocks, page: Page, host: ModelHost, gallery: Gallery, outbox: gradio_internals.Outbox) -> None:
    c, s = page.controls, page.state
    say = functools.partial(_say, page)
    whatif_in = {*c.whatif().values(), s}
    private = dict(api_visibility="private")
    # every event is queued: the light ones share a small limit, so a flood of slider moves waits its turn
    instant = dict(private, concurrency_id="view", concurrency_limit=VIEW_EVENTS, show_progress="hidden")

    run = page.generate.click(
        wire(handlers.generate, page, host, outbox, show=say),
        {page.pair, page.prompt, c.chat, *c.settings().values(), s},
        page.everything(),
        concurrency_id="generate",
        concurrency_limit=host.slots,  # the shared batch and its line decide who runs; see ModelHost.ticket
        show_progress="hidden",
        **private,
    )
    page.stop.click(wire(handlers.stop, page, show=say), {s}, [page.message], show_progress="hidden", **private)
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
    demo.unload(wire(handlers.leave, host, page.sessions))  # a closed tab's rows leave the batch; its traces and files go
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


# --- serving ------------------------------------------------------------------------------------


def serve(demo: gr.Blocks, host: str = "127.0.0.1", port: int | None = None, forwarded_allow_ips: str = "", **options):
    """Queue and launch the app; -> what `demo.launch` returns. Only the proxies in `forwarded_allow_ips`
    (addresses or networks, comma-separated) may name a user's address in X-Forwarded-For: uvicorn,
    which serves Gradio, reads FORWARDED_ALLOW_IPS as it starts, and by default trusts any client on 127.0.0.1."""
    os.environ["FORWARDED_ALLOW_IPS"] = forwarded_allow_ips
    demo.queue(default_concurrency_limit=LIGHT_EVENTS, max_size=64)
    gradio_internals.say_results_once(demo, "compare", handlers.is_result)
    return demo.launch(
        server_name=host,
        server_port=port,
        css_paths=[str(ASSETS / "style.css")],
        max_file_size=MAX_UPLOAD,
        ssr_mode=False,
        show_error=False,  # handlers answer every failure in one line themselves (see `wire`); nothing raw leaks
        app_kwargs={
            "middleware": [
                Middleware(WholeArguments, parameters={"compare": api_parameters(handlers.compare)}),
                Middleware(gradio_internals.SmallStreamBuffers),
            ]
        },
        **options,
    )


def api_parameters(handler: Callable) -> list[str]:
    """The API's parameter names of a handler, in order (those its `wire` fixes and gr.Request left out)."""
    names = list(inspect.signature(handler).parameters)
    return names[names.index("prompt") : names.index("request")]


class WholeArguments:
    """Answers a plain-HTTP API call with too few values in one line, before Gradio sees it.

    POST /gradio_api/call/NAME takes every parameter's value, in order. Given fewer, Gradio fails
    inside the server (`{"error": null}` for the caller, a traceback in the log); here the caller is
    told which values to send. Any other request passes through untouched.
    """

    def __init__(self, app, parameters: dict[str, list[str]]):
        self.app, self.parameters = app, parameters

    async def __call__(self, scope, receive, send):
        name = scope.get("path", "").rsplit("/gradio_api/call/", 1)[-1].strip("/") if scope["type"] == "http" else ""
        if scope.get("method") != "POST" or "/gradio_api/call/" not in scope.get("path", "") or name not in self.parameters:
            return await self.app(scope, receive, send)
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        problem = self._problem(name, body)
        if problem:
            response = json.dumps({"detail": problem}).encode()
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(response)).encode())]
            await send({"type": "http.response.start", "status": 422, "headers": headers})
            return await send({"type": "http.response.body", "body": response})
        replayed = False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    def _problem(self, name: str, body: bytes) -> str | None:
        try:
            data = json.loads(body).get("data")
        except (ValueError, AttributeError):
            return None  # not a JSON object: Gradio answers that itself
        wanted = self.parameters[name]
        if not isinstance(data, list) or len(data) >= len(wanted):
            return None
        return (
            f"{name} takes {len(wanted)} values in this order: {', '.join(wanted)} (got {len(data)}); send them all, or "
            f"POST /gradio_api/call/v2/{name} with named values, where missing ones take their defaults"
        )
