"""The app's API: `compare`, as gradio_client and HTTP callers see it (docs/app-and-api.md, "The API")."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import gradio as gr

from easd.method import trace as trace_io
from easd.method.compare import DEFAULT_METHODS
from easd.serving.host import ModelHost

from .controls import DEFAULTS, read_settings
from .gradio_internals import Outbox
from .intake import CompareRequest, client_of
from .news import news_without_a_thread

API_EVERY_S = 0.5  # the API streams each run's new rows twice a second


async def compare(
    host: ModelHost,
    outbox: Outbox,
    prompt: str | None = None,
    tau_h: float = DEFAULTS.tau_h,
    tau_o: float = DEFAULTS.tau_o,
    top_n: int = DEFAULTS.top_n,
    k: int = DEFAULTS.k,
    temperature: float = DEFAULTS.temperature,
    top_p: float = DEFAULTS.top_p,
    max_new_tokens: int = DEFAULTS.max_new_tokens,
    rule: str = DEFAULTS.rule,
    seed: int = DEFAULTS.seed,
    pair: str = "",
    chat: bool = True,
    left: str = DEFAULT_METHODS["left"],
    right: str = DEFAULT_METHODS["right"],
    request: gr.Request = None,
) -> AsyncIterator[dict]:
    """Run two methods (`left`, `right`: SD and EASD unless asked otherwise) with the same prompt, seed and settings in
    the shared batch; streams them (at most every API_EVERY_S) and ends with both whole traces (easd-trace JSON), sent
    once (`gradio_internals.say_results_once`).

    Updates are easd-trace-update JSON: the rows new since the last update, without their
    candidates, which are most of a trace's bytes. Each update costs the server what is new, not
    the run so far, and users who asked for the same run share it (Ticket.update). A call holds no
    thread while it streams, so a hundred users watching one run cost what a few do.
    """
    values = dict(tau_h=tau_h, tau_o=tau_o, top_n=top_n, k=k, temperature=temperature, top_p=top_p, rule=rule, seed=seed)
    settings = read_settings(values | {"max_new_tokens": max_new_tokens}, host.max_new_tokens_cap)
    pair = host.default if pair == "" else pair  # "" (the default) is the app's pair
    asked = CompareRequest.check(host, pair, prompt, settings, chat, {"left": left, "right": right})
    if host.pair(asked.pair) is None:  # a call that comes while the pair loads waits for it, as in line: nothing streams
        waiting = host.waiting_for(asked.pair)
        while await asyncio.to_thread(next, waiting, None) is not None:
            pass
    comparison = asked.comparison(host)
    client = client_of(request)
    uptake = outbox.uptake(client.session)
    with host.stream(asked.pair, comparison.generations.values(), client, uptake.took_any) as stream:
        sent = [(0, 0)] * len(comparison.generations)
        async for _ in news_without_a_thread(stream, API_EVERY_S, uptake):
            if not stream.position:  # nothing to show while in line
                update, sent = stream.update(sent)
                yield update
    if stream.error is not None:
        raise stream.error
    yield await asyncio.to_thread(stream.document)  # the first of a run's streams to ask makes it, outside the event loop


def is_result(value) -> bool:
    """Whether a value `compare` yields is its whole result (the last one), not an update."""
    return isinstance(value, dict) and value.get("format") == trace_io.FORMAT
