"""How the app is served: Gradio's queue and launch, and the middleware in front of it (as app.py, the load test
and the tests start it)."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import parse_qs

import gradio as gr
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.middleware import Middleware

from easd.render.lanes import origin_css
from easd.serving.metrics import ServingMetrics

from . import api, gradio_internals
from .routes import ApiCalls, McpRequests

ASSETS = Path(__file__).resolve().parent.parent / "assets"
LIGHT_EVENTS = 4  # uploads and the Evaluation tab's events served at once (generation has its own limit: ModelHost.slots)
MAX_UPLOAD = "60mb"  # a little above easd.method.trace.MAX_TRACE_BYTES, so the app's own message explains the limit


def serve(
    demo: gr.Blocks,
    host: str = "127.0.0.1",
    port: int | None = None,
    forwarded_allow_ips: str = "",
    metrics: ServingMetrics | None = None,
    mcp: bool = False,
    **options,
):
    """Queue and launch the app; -> what `demo.launch` returns. Only the proxies in `forwarded_allow_ips`
    (addresses or networks, comma-separated) may name a user's address in X-Forwarded-For: uvicorn,
    which serves Gradio, reads FORWARDED_ALLOW_IPS as it starts, and by default trusts any client on 127.0.0.1.
    With `metrics`, GET /metrics serves them (`MetricsRoute`); without, there is no such page. With `mcp`, Gradio's
    MCP server answers at /gradio_api/mcp with the tools in api.MCP_TOOLS only, and without it there is none (whatever
    GRADIO_MCP_SERVER says)."""
    os.environ["FORWARDED_ALLOW_IPS"] = forwarded_allow_ips
    demo.queue(default_concurrency_limit=LIGHT_EVENTS, max_size=64)
    gradio_internals.queue_idles_quietly(demo)
    gradio_internals.queue_places_only_where_shown(demo)
    gradio_internals.say_results_once(demo, "compare", api.is_result)
    gradio_internals.pass_values_as_they_are(demo, "compare", api.is_result)
    gradio_internals.skip_untouched_outputs(demo)
    gradio_internals.sessions_without_configs()
    gradio_internals.absent_matplotlib_fails_at_once()
    names = [name for name, *_ in api.parameters()]  # the API's parameters, in order
    endpoints = {"compare": names, **({"compare_briefly": names} if mcp else {})}
    return demo.launch(
        server_name=host,
        server_port=port,
        css_paths=[str(ASSETS / "style.css")],
        css=origin_css(),  # the lanes' colours, from each method's origins
        js=gradio_internals.END_THE_LOADERS_LOOP,
        max_file_size=MAX_UPLOAD,
        ssr_mode=False,
        show_error=False,  # handlers answer every failure in one line themselves (see `wire`); nothing raw leaks
        mcp_server=mcp,
        # Gradio's launch asks its own page once, with a 3 s timeout, and when no answer comes refuses to start,
        # saying a share link is needed (a check for Colab, where localhost is out of reach). On a busy machine the
        # first answer can come later (a suite run on 2 cores saw it), and this app is never served by a share link.
        _frontend=False,
        app_kwargs={
            "lifespan": gradio_internals.mcp_tools_only(demo, api.MCP_TOOLS),
            "middleware": [
                *([Middleware(MetricsRoute, metrics=metrics)] if metrics is not None else []),
                Middleware(ApiCalls, parameters=endpoints),
                *([Middleware(McpRequests, misfits=dict.fromkeys(api.MCP_TOOLS, api.misfit))] if mcp else []),
                Middleware(gradio_internals.EventStreams, connections=gradio_internals.Outbox.of(demo).connections),
            ],
        },
        **options,
    )


class MetricsRoute:
    """GET /metrics: the shared batch's figures in Prometheus' text format (easd.serving.metrics), before Gradio sees
    the request. `?name[]=NAME` keeps only those metrics, as prometheus_client's own exposition does; anything else
    is one line saying what /metrics takes. Every other request passes through untouched."""

    def __init__(self, app, metrics: ServingMetrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("path") != "/metrics":
            return await self.app(scope, receive, send)
        status, body, kind = self._answer(scope)
        headers = [(b"content-type", kind.encode()), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _answer(self, scope) -> tuple[int, bytes, str]:
        text = "text/plain; charset=utf-8"
        if scope.get("method") not in ("GET", "HEAD"):
            return 405, b"/metrics answers GET only\n", text
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        unknown = sorted(set(query) - {"name[]"})
        if unknown:
            return 400, f"/metrics takes only name[]=METRIC (got {unknown[0][:40]!r})\n".encode(), text
        registry = self.metrics.registry
        if "name[]" in query:
            registry = registry.restricted_registry(query["name[]"])
        return 200, generate_latest(registry), CONTENT_TYPE_LATEST
