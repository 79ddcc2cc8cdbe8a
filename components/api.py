"""The app's API: `compare`, and `compare_briefly` for MCP, as gradio_client, HTTP callers and agents see them
(docs/app-and-api.md, "The API").

Their parameters are the page's: the prompt, every setting the page has a control for (made from its declaration,
easd.method.knobs, so a method added to the table brings its own), the pair, the chat flag and each lane's method.
Gradio, gradio_client and Gradio's MCP server read an endpoint's parameters from its function's signature and its
docstring's Args, so `endpoint` builds both from the declarations, when the app is built (components.wiring).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
from collections.abc import AsyncIterator
from inspect import Parameter

import gradio as gr

from easd.errors import shown
from easd.method.compare import DEFAULT_METHODS, LANES, brief
from easd.method.knobs import finite
from easd.method.methods import METHODS, knobs, owner, settings_values
from easd.serving.host import Client, ModelHost
from easd.traces import files as trace_io

from .controls import DEFAULTS, describe, read_settings
from .gradio_internals import Outbox
from .intake import CompareRequest, address_of, client_of
from .news import news_without_a_thread

API_EVERY_S = 0.5  # the API streams each run's new rows twice a second
MCP_TOOLS = ("compare_briefly",)  # the endpoints an MCP client sees (app.py --mcp on): compact answers, not whole traces
KINDS = {"int": int, "float": float, "text": str}


def parameters() -> list[tuple[str, object, type, str]]:
    """The API's parameters in order, each (name, default, type, description): the prompt, the settings every method
    reads, the pair, the chat flag and the lanes' methods, then each method's own settings (appended, so that a
    caller passing values in order keeps their places)."""
    defaults, methods = settings_values(DEFAULTS), ", ".join(METHODS)
    settings = {name: (defaults[name], KINDS[knob.kind], _described(knob)) for name, knob in knobs().items() if knob.control}
    shared = [(name, *rest) for name, rest in settings.items() if owner(name)[0] is None]
    own = [(name, *rest) for name, rest in settings.items() if owner(name)[0] is not None]
    return [
        ("prompt", None, str, "the user's message (with chat true, it is wrapped in the model's chat template)"),
        *shared,
        ("pair", "", str, 'a model pair the server allows ("" for its default)'),
        ("chat", True, bool, "wrap the prompt in the chat template"),
        ("left", DEFAULT_METHODS["left"], str, f"the first method ({methods})"),
        ("right", DEFAULT_METHODS["right"], str, "the second method"),
        *own,
    ]


def _described(knob) -> str:
    """A setting's description for a caller: what it does, and what the API takes (the page's range)."""
    return f"{knob.help} ({_takes(knob)})"


def _takes(knob) -> str:
    """What the API takes for a setting: the page's range ("a number from 0 to 4"), or its choices."""
    return describe(knob.control, knob) if knob.control.kind in ("slider", "number") else knob.describe()


def misfit(arguments: dict) -> str | None:
    """The one line for a tool call whose `arguments` MCP's server would refuse before the tool runs, in words naming
    no parameter ("None is not of type 'number'"): a name the tool lacks, or a value not of its parameter's JSON type
    (null or "0.5" for a number, 2.5 for a whole number, 1e400, which Python reads as inf and MCP passes on as null).
    Named as the API names a bad value; None where each is of its type (the tool checks their ranges itself)."""
    kinds = {name: kind for name, _, kind, _ in parameters()}
    for name, value in arguments.items():
        if name not in kinds:
            return f"{shown(name)} is not a parameter of this tool: it takes {', '.join(kinds)}"
        if not _of_kind(value, kinds[name]):
            return f"{name}: must be {_taken(name)} (got {shown(value)})"
    return None


def _of_kind(value, kind: type) -> bool:
    """Whether JSON's `value` is of a parameter's type as its JSON schema says it (an integer may be written 2.0)."""
    if kind in (int, float):
        number = isinstance(value, (int, float)) and not isinstance(value, bool) and finite(value)
        return number and (kind is float or isinstance(value, int) or value.is_integer())
    return isinstance(value, kind)


def _taken(name: str) -> str:
    """What the API takes for parameter `name`, in the words its refusals use."""
    known = knobs()
    if name in known:
        return _takes(known[name])
    if name in LANES:
        return f"one of {', '.join(METHODS)}"
    return {"prompt": "text", "chat": "true or false"}.get(
        name, 'the name of a model pair this server allows ("" for its default)'
    )


def endpoint(handler):
    """`handler(*fixed, values, request)` (`values`: the API's parameters by name) as the function Gradio serves: its
    signature lists `fixed`, every parameter of `parameters()` with its default and type, and `request`; its docstring
    describes each (Gradio's MCP server reads them from its Args)."""
    own = inspect.signature(handler)
    fixed = list(own.parameters.values())[:-2]
    listed = parameters()
    signature = inspect.Signature(
        [
            *fixed,
            *(
                Parameter(name, Parameter.POSITIONAL_OR_KEYWORD, default=default, annotation=kind)
                for name, default, kind, _ in listed
            ),
            Parameter("request", Parameter.POSITIONAL_OR_KEYWORD, default=None, annotation=gr.Request),
        ],
        return_annotation=own.return_annotation,  # Gradio reads its outputs from it: one value
    )

    def split(args, kwargs) -> tuple[list, dict, object]:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        given = bound.arguments
        return [given[p.name] for p in fixed], {name: given[name] for name, *_ in listed}, given["request"]

    if inspect.isasyncgenfunction(handler):

        async def served(*args, **kwargs):
            front, values, request = split(args, kwargs)
            async for update in handler(*front, values, request):
                yield update

    else:

        async def served(*args, **kwargs):
            front, values, request = split(args, kwargs)
            return await handler(*front, values, request)

    functools.update_wrapper(served, handler)
    served.__signature__ = signature
    served.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()} | {"return": own.return_annotation}
    summary, _, returns = (handler.__doc__ or "").partition("Returns:")
    args = "\n".join(f"        {name}: {description}" for name, _, _, description in listed)
    served.__doc__ = f"{summary.rstrip()}\n\n    Args:\n{args}\n" + (f"\n    Returns:{returns}" if returns else "")
    return served


async def compare(host: ModelHost, outbox: Outbox, values: dict, request: gr.Request) -> AsyncIterator[dict]:
    """Run two methods (`left`, `right`: SD and EASD unless asked otherwise) with the same prompt, seed and settings in
    the shared batch; streams them (at most every API_EVERY_S) and ends with both whole traces (easd-trace JSON), sent
    once (`gradio_internals.say_results_once`).

    Updates are easd-trace-update JSON: the rows new since the last update, without their
    candidates, which are most of a trace's bytes. Each update costs the server what is new, not
    the run so far, and users who asked for the same run share it (Ticket.update). A call holds no
    thread while it streams, so a hundred users watching one run cost what a few do.
    """
    asked = _asked(host, values)
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


async def compare_briefly(host: ModelHost, values: dict, request: gr.Request) -> str:
    """Decode one prompt with two methods side by side on the served model pair (speculative decoding and entropy-aware speculative decoding unless asked otherwise), with the same seed and settings, and return both texts, where they first differ, each intervention (position, token chosen, drafted token refused) and the speculative-decoding figures under vLLM's names (mean acceptance length, draft acceptance rate, acceptance by draft position, acceptance-length histogram).

    Returns:
        JSON text of an object: lanes (left and right, each with method, text, new_tokens, stop_reason, interventions, num_drafts, num_draft_tokens, num_accepted_tokens, mean_acceptance_length, draft_acceptance_rate, conditional_acceptance, acceptance_length_histogram, penalties) and first_difference (the first token position where the two texts differ, or null)
    """
    asked = _asked(host, values)
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


def _asked(host: ModelHost, values: dict) -> CompareRequest:
    """The API's values as one checked request: settings read as the page reads its controls, "" the app's pair."""
    settings = read_settings(values, host.max_new_tokens_cap)
    pair = host.default if values["pair"] == "" else values["pair"]
    methods = {lane: values[lane] for lane in LANES}
    return CompareRequest.check(host, pair, values["prompt"], settings, values["chat"], methods)


async def _loaded(host: ModelHost, pair: str) -> None:
    """A call that comes while its pair loads waits for it, as in line: nothing streams meanwhile."""
    if host.pair(pair) is None:
        waiting = host.waiting_for(pair)
        while await asyncio.to_thread(next, waiting, None) is not None:
            pass


def is_result(value) -> bool:
    """Whether a value `compare` yields is its whole result (the last one), not an update."""
    return isinstance(value, dict) and value.get("format") == trace_io.FORMAT
