"""Every failure a user meets, answered in one line in the words of the interface that asked.

`wire` binds a handler to its page (and host) and turns what it raises into a line for the page's
message area or a `gr.Error` for the API; `refuse_in_one_line` does the same for Gradio's own checks
of a component's value, which run before any handler. Tracebacks go to the server log only.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable

import gradio as gr

from easd.errors import EasdError

from . import views

log = logging.getLogger("easd.app")
UNEXPECTED = "⚠️ Something went wrong on the server (the details are in its log); try again, or reload the page."


class OneLine(gr.Error):
    """A refusal for an API caller: Gradio sends its message; printed, it is that message, where gr.Error's is quoted
    (an MCP client is sent the printed error)."""

    def __str__(self) -> str:
        return self.message


def wire(handler: Callable, *fixed, show: Callable[[str], dict] | None = None, words=views.in_page_words) -> Callable:
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
            raise OneLine(text, print_exception=False) from None
        return show(text)

    if inspect.isasyncgenfunction(handler):

        async def bound(*args, **kwargs):
            try:
                async for update in handler(*fixed, *args, **kwargs):
                    yield update
            except Exception as err:  # noqa: BLE001 (answered in one line; logged when unexpected)
                yield answer(err)

    elif inspect.iscoroutinefunction(handler):

        async def bound(*args, **kwargs):
            try:
                return await handler(*fixed, *args, **kwargs)
            except Exception as err:  # noqa: BLE001 (answered in one line; logged when unexpected)
                return answer(err)

    elif inspect.isgeneratorfunction(handler):

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
