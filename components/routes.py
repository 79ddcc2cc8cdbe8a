"""What the app's HTTP routes refuse before Gradio or its MCP server see a request, each in one line: Gradio and the MCP
library answer these themselves with a traceback in the log and a 500, or with words that name the wrong thing.

- `ApiCalls`, for POST /gradio_api/{run,api,call,call/v2}/NAME:
  - NAME must be one of the app's API endpoints (`compare`, and `compare_briefly` with --mcp on): Gradio answers any
    other name with a traceback per request, and would run the page's own private events by their names;
  - run, api and call take every parameter's value in order: given fewer, Gradio fails inside the server
    (`{"error": null}`, a traceback); here the caller is told which values to send;
  - call/v2 takes them by name: a name the endpoint lacks is named (Gradio answers 500, a traceback in its log);
  - a body nested deeper than JSON readers go is refused, not a RecursionError;
  - a caller of run or api that goes away ends its call, and with it its run ("left"): Gradio would run a direct
    call to its end for nobody. (A call on the queue, call/NAME, already ends when its event stream goes unread.)
- `McpRequests`, for POST /gradio_api/mcp: JSON-RPC bodies read as strict JSON. JSON has no NaN or Infinity; Python's
  reader takes them, and the MCP library then passes NaN on as null ("None is not of type 'number'"): here a
  tool's argument that holds one is answered as the tool answers a bad value, naming it; anywhere else it is a parse
  error, and so is a body nested too deeply (a RecursionError and its traceback in the MCP library). A tool's
  argument its input schema refuses (null or "0.5" for a number, 1e400, a name it lacks) is answered naming it too:
  the MCP library's own words name no argument.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable

log = logging.getLogger("easd.app")
API = "/gradio_api/"
CALLS = ("run/", "api/", "call/v2/", "call/")  # the routes that call an endpoint by its name; call/v2/ before call/
DIRECT = ("run/", "api/")  # those that run the call in the request itself, not on the queue
MCP = ("/gradio_api/mcp", "/gradio_api/mcp/")


class ApiCalls:
    """The API's routes (see the module's docstring); `parameters` are each endpoint's parameter names, in order."""

    def __init__(self, app, parameters: dict[str, list[str]]):
        self.app, self.parameters = app, parameters

    async def __call__(self, scope, receive, send):
        route, name = _call_of(scope)
        if route is None:
            return await self.app(scope, receive, send)
        if name not in self.parameters:
            endpoints = ", ".join(self.parameters)
            return await _answer(send, 404, {"detail": f"this app has no API endpoint {name[:40]!r}: it has {endpoints}"})
        body = await _body(receive)
        try:
            document = json.loads(body)
            problem = self._unknown(name, document) if route == "call/v2/" else self._problem(name, document)
        except RecursionError:
            problem = "the body is nested too deeply to be read: send a JSON object with a list of values as data"
        except ValueError:
            problem = None  # not JSON: Gradio answers that itself, in one line
        if problem:
            return await _answer(send, 422, {"detail": problem})
        if route in DIRECT:
            return await _until_the_caller_leaves(self.app, scope, body, receive, send, name)
        await self.app(scope, _replay(body, receive), send)

    def _unknown(self, name: str, document) -> str | None:
        """call/v2 takes values by name: one the endpoint lacks (a typo, `request`, values in order under `data`) is
        named, where Gradio answers 500 and logs a traceback. (Gradio itself drops an `oauth_token` it has no use for.)"""
        wanted = self.parameters[name]
        names = document if isinstance(document, dict) else {}  # not an object: Gradio says so itself, in one line
        unknown = next((key for key in names if key not in wanted and key != "oauth_token"), None)
        if unknown is None:
            return None
        return (
            f"{name} has no parameter {unknown[:40]!r}: call/v2/{name} takes values by name, any of {', '.join(wanted)}; "
            f'to send them all in order, POST /gradio_api/call/{name} with {{"data": [...]}}'
        )

    def _problem(self, name: str, document) -> str | None:
        data = document.get("data") if isinstance(document, dict) else None
        wanted = self.parameters[name]
        if not isinstance(data, list) or len(data) >= len(wanted):
            return None
        return (
            f"{name} takes {len(wanted)} values in this order: {', '.join(wanted)} (got {len(data)}); send them all, or "
            f"POST /gradio_api/call/v2/{name} with named values, where missing ones take their defaults"
        )


class McpRequests:
    """MCP's JSON-RPC requests read as strict JSON first, and a tool's arguments checked against its parameters (see the
    module's docstring); `misfits[tool](arguments)` is the line for arguments the tool's input schema refuses, else None."""

    def __init__(self, app, misfits: dict[str, Callable[[dict], str | None]]):
        self.app, self.misfits = app, misfits

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "POST" or scope.get("path") not in MCP:
            return await self.app(scope, receive, send)
        body = await _body(receive)
        try:
            message = json.loads(body, parse_constant=_not_a_json_number)
        except NotAJsonNumber as err:
            message = _document(body)
            where = _argument_holding(message, err.constant)
            if where is None:
                return await _answer(send, 400, _rpc_error(f"Parse error: {err.constant} is not a JSON number"))
            line = f"{where}: must be a finite number (got {err.constant}, which JSON cannot carry)"
            return await _answer(send, 200, _tool_error(message.get("id"), line))
        except RecursionError:
            return await _answer(send, 400, _rpc_error("Parse error: the request is nested too deeply to be read"))
        except ValueError:
            message = None  # not JSON at all: the MCP library says so itself, in one line
        arguments, misfit = _arguments(message), self.misfits.get(_tool(message))
        problem = misfit(arguments) if arguments is not None and misfit is not None else None
        if problem:
            return await _answer(send, 200, _tool_error(message.get("id"), problem))
        await self.app(scope, _replay(body, receive), send)


class NotAJsonNumber(ValueError):
    def __init__(self, constant: str):
        super().__init__(constant)
        self.constant = constant


def _not_a_json_number(constant: str):
    raise NotAJsonNumber(constant)


_MARK = object()  # stands for a NaN or an Infinity while the argument that holds one is looked for


def _document(body: bytes):
    """The body as Python reads it, with NaN and Infinity as _MARK (it was readable JSON but for them)."""
    try:
        return json.loads(body, parse_constant=lambda _: _MARK)
    except (ValueError, RecursionError):
        return None


def _argument_holding(message, constant: str) -> str | None:
    """The name of the tool argument of a tools/call request that holds a NaN or an Infinity; None if it is not one."""
    arguments = _arguments(message)
    if arguments is None:
        return None
    return next((name for name, value in arguments.items() if _holds_mark(value)), None)


def _arguments(message) -> dict | None:
    """The arguments of a tools/call request, or None for any other message."""
    arguments = _params(message).get("arguments")
    return arguments if isinstance(arguments, dict) else None


def _tool(message) -> str | None:
    """The tool a tools/call request names."""
    name = _params(message).get("name")
    return name if isinstance(name, str) else None


def _params(message) -> dict:
    """The params of a tools/call request; {} for any other message."""
    if not (isinstance(message, dict) and message.get("method") == "tools/call"):
        return {}
    params = message.get("params")
    return params if isinstance(params, dict) else {}


def _holds_mark(value) -> bool:
    if value is _MARK:
        return True
    if isinstance(value, dict):
        value = list(value.values())
    return isinstance(value, list) and any(_holds_mark(item) for item in value)


def _rpc_error(message: str) -> dict:
    """A JSON-RPC error as the MCP library writes its own (code -32700: parse error; no request id is known)."""
    return {"jsonrpc": "2.0", "id": "server-error", "error": {"code": -32700, "message": message}}


def _tool_error(request_id, line: str) -> dict:
    """A tool's answer to a bad argument, as Gradio's MCP server writes one: the line, marked as an error."""
    return {"jsonrpc": "2.0", "id": request_id, "result": {"content": [{"type": "text", "text": line}], "isError": True}}


def _call_of(scope) -> tuple[str | None, str]:
    """(route, endpoint name) of a POST that calls an API endpoint by name; (None, "") for any other request."""
    path = scope.get("path", "") if scope["type"] == "http" and scope.get("method") == "POST" else ""
    rest = path.split(API, 1)[1] if API in path else ""
    for route in CALLS:
        if rest.startswith(route):
            name = rest[len(route) :].strip("/")
            return (route, name) if name and "/" not in name else (None, "")
    return None, ""


async def _body(receive) -> bytes:
    body, more = b"", True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        body, more = body + message.get("body", b""), message.get("more_body", False)
    return body


def _replay(body: bytes, receive):
    """A `receive` that hands the app the body read already, then whatever comes next (a disconnect)."""
    replayed = False

    async def replay():
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


async def _until_the_caller_leaves(app, scope, body: bytes, receive, send, name: str) -> None:
    """Run the call, and cancel it if its caller disconnects first: the handler ends where it waits, and leaving its
    run's stream stops the run (easd.serving.host.stream: "left")."""
    gone = asyncio.Event()
    replayed = False

    async def replay():
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def watch():
        while (await receive())["type"] != "http.disconnect":
            pass
        gone.set()

    call, watcher = asyncio.ensure_future(app(scope, replay, send)), asyncio.ensure_future(watch())
    try:
        await asyncio.wait({call, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if not call.done():
            log.info("the caller of %s went away; its call ends", name)
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await call
            return
        await call  # its own outcome, an error included
    finally:
        watcher.cancel()


async def _answer(send, status: int, document: dict) -> None:
    body = json.dumps(document).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
