"""One check for a request to compare two methods, whether it comes from the page's Run or the API's compare: the
pair (one the operator allowed), the prompt, the settings, the chat flag and each lane's method, each refused in one
line in the caller's words; then the comparison on the loaded pair."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr
from starlette.requests import Request

from easd.errors import EasdError, SettingsError, shown
from easd.method.compare import Comparison
from easd.method.methods import METHODS
from easd.method.settings import DecodeSettings
from easd.serving.host import Client, ModelHost

from .controls import check_flag, check_method, check_prompt


@dataclass(frozen=True)
class CompareRequest:
    """A request to compare two methods on one prompt, every part checked."""

    pair: str  # the name of a pair the operator allowed
    prompt: str
    settings: DecodeSettings
    chat: bool
    methods: dict[str, str]  # by lane

    @staticmethod
    def check(host: ModelHost, pair, prompt, settings: DecodeSettings, chat, methods: dict) -> CompareRequest:
        """The request, or one line naming its first bad part (`settings` come checked, read in the caller's words)."""
        prompt, chat = check_prompt(prompt), check_flag("chat", chat)  # what the user typed first, the pair last
        methods = {lane: check_method(lane, method) for lane, method in methods.items()}
        return CompareRequest(allowed_pair(host, pair), prompt, settings, chat, methods)

    def comparison(self, host: ModelHost) -> Comparison:
        """The comparison on the pair, once it is loaded; one line if a lane asks what the pair lacks (RSD's PRM)."""
        pair = host.pair(self.pair)
        check_prm(pair, self.methods)
        return Comparison(pair, self.prompt, self.settings, chat=self.chat, methods=self.methods)


def allowed_pair(host: ModelHost, name) -> str:
    """`name` if it names a pair the operator allowed, else one line saying which may be asked for."""
    if not host.allowed:
        raise EasdError("no model pair is served here; this app can only view trace files")
    if not (isinstance(name, str) and name in host.allowed):
        raise SettingsError("pair", f"must be one of {', '.join(host.allowed)} (got {shown(name)})")
    return name


def check_prm(pair, methods: dict[str, str]) -> None:
    """An RSD lane needs the process reward model the operator may load with the pair; one line saying so if not."""
    lanes = [lane for lane, method in methods.items() if method in METHODS and METHODS[method].needs_prm]
    if lanes and pair.prm is None:
        raise EasdError(
            f"the {lanes[0]} lane's RSD asks a process reward model to score each step, and this app was started "
            "without one; its operator can add one with python app.py --prm FOLDER"
        )


def client_of(request: gr.Request | None) -> Client:
    """The session and address a request comes from (empty when called without a request, as in tests)."""
    if request is None:
        return Client()
    return Client(session=request.session_hash or "", address=address_of(request))


def address_of(request: gr.Request | Request | None) -> str:
    """The network address a request comes from: Gradio's request, or Starlette's where Gradio hands a handler that
    (its MCP server calls an unqueued tool with the MCP request itself)."""
    client = request.client if request is not None else None
    return (client.host if client is not None else "") or ""
