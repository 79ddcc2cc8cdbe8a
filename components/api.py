"""The app's API: `compare`, as gradio_client and HTTP callers see it (docs/app-and-api.md, "The API")."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import gradio as gr

from easd.method import trace as trace_io
from easd.method.compare import DEFAULT_METHODS, LANES, brief
from easd.serving.host import Client, ModelHost

from .controls import DEFAULTS, read_settings
from .gradio_internals import Outbox
from .intake import CompareRequest, address_of, client_of
from .news import news_without_a_thread

API_EVERY_S = 0.5  # the API streams each run's new rows twice a second
MCP_TOOLS = ("compare_briefly",)  # the endpoints an MCP client sees (app.py --mcp on): compact answers, not whole traces


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
    asked = _asked(host, prompt, tau_h, tau_o, top_n, k, temperature, top_p, max_new_tokens, rule, seed, pair, chat, left, right)
    await _loaded(host, asked.pair)
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


async def compare_briefly(
    host: ModelHost,
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
) -> str:
    """Decode one prompt with two methods side by side on the served model pair (speculative decoding and entropy-aware speculative decoding unless asked otherwise), with the same seed and settings, and return both texts, where they first differ, each intervention (position, token chosen, drafted token refused) and the speculative-decoding figures under vLLM's names (mean acceptance length, draft acceptance rate, acceptance by draft position, acceptance-length histogram).

    Args:
        prompt: the user's message (with chat true, it is wrapped in the model's chat template)
        tau_h: entropy threshold in nats: EASD refuses a drafted token only where both models' entropies exceed it
        tau_o: overlap threshold from 0 to 1: the share of the two models' top-n candidates that must be shared
        top_n: how many top candidates of each model the overlap compares
        k: tokens the draft model proposes per block
        temperature: 0 is greedy; above 0 samples
        top_p: nucleus sampling mass (1 keeps the whole distribution)
        max_new_tokens: tokens to generate per method (at most the server's cap)
        rule: which EASD rule decides a refusal (full, no_overlap, no_draft_entropy, target_entropy_only)
        seed: random seed, the same for both methods
        pair: a model pair the server allows ("" for its default)
        chat: wrap the prompt in the chat template
        left: the first method (target, draft, sd, easd, mti, rsd)
        right: the second method

    Returns:
        JSON text of an object: lanes (left and right, each with method, text, new_tokens, stop_reason, interventions, num_drafts, num_draft_tokens, num_accepted_tokens, mean_acceptance_length, draft_acceptance_rate, conditional_acceptance, acceptance_length_histogram, penalties) and first_difference (the first token position where the two texts differ, or null)
    """
    asked = _asked(host, prompt, tau_h, tau_o, top_n, k, temperature, top_p, max_new_tokens, rule, seed, pair, chat, left, right)
    await _loaded(host, asked.pair)
    comparison = asked.comparison(host)
    # a tool call has no session of its own (MCP's HTTP transport here is stateless): its address is the client, so
    # an address holds the per-client share and never more than the per-address one
    address = address_of(request)
    client = Client(session=f"tool {address}", address=address)
    with host.stream(asked.pair, comparison.generations.values(), client, reader=_waiting) as stream:
        async for _ in news_without_a_thread(stream, API_EVERY_S):
            pass
    if stream.error is not None:
        raise stream.error
    # JSON, not a dict: Gradio's MCP server would send a dict as Python prints it; ASCII, so that no lone surrogate
    # of a token's bytes can break the answer's UTF-8
    return json.dumps(brief(dict(zip(LANES, stream.traces()))))


def _waiting() -> bool:
    """A tool call's reader: it takes nothing until the end, and is there while its request is open (its handler ends
    with the request, and leaving `host.stream` stops the run), so a long run is never stopped as unread."""
    return True


def _asked(
    host: ModelHost, prompt, tau_h, tau_o, top_n, k, temperature, top_p, max_new_tokens, rule, seed, pair, chat, left, right
):
    """The API's values as one checked request: settings read as the page reads its sliders, "" the app's pair."""
    values = dict(tau_h=tau_h, tau_o=tau_o, top_n=top_n, k=k, temperature=temperature, top_p=top_p, rule=rule, seed=seed)
    settings = read_settings(values | {"max_new_tokens": max_new_tokens}, host.max_new_tokens_cap)
    pair = host.default if pair == "" else pair
    return CompareRequest.check(host, pair, prompt, settings, chat, {"left": left, "right": right})


async def _loaded(host: ModelHost, pair: str) -> None:
    """A call that comes while its pair loads waits for it, as in line: nothing streams meanwhile."""
    if host.pair(pair) is None:
        waiting = host.waiting_for(pair)
        while await asyncio.to_thread(next, waiting, None) is not None:
            pass


def is_result(value) -> bool:
    """Whether a value `compare` yields is its whole result (the last one), not an update."""
    return isinstance(value, dict) and value.get("format") == trace_io.FORMAT
