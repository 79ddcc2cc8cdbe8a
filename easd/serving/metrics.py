"""The shared batch's figures for Prometheus (`python app.py --metrics`, then GET /metrics), named after vLLM's.

vLLM exports `vllm:spec_decode_num_drafts`, `…_num_draft_tokens`, `…_num_accepted_tokens` and
`…_num_accepted_tokens_per_pos`, `vllm:num_requests_waiting` and `vllm:num_requests_running`; here the same figures
are `easd:…`, with a `pair` label and, where methods differ, a `method` label. Each pair's worker counts: requests
when they arrive (computed, joined to the same request running, replayed from a finished one, or refused for a full
line), the line and the running rows at every block boundary, the batch's decoding seconds, and, as each request
ends, its runs' tokens, drafts, accepted tokens per draft position (easd.method.spec_metrics), interventions and stop
reasons. Nothing of a request's prompt or text is ever a label or a value.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from ..method.methods import METHODS
from ..method.spec_metrics import SpecMetrics
from ..method.summary import intervened
from ..method.trace import Trace

SERVED = ("computed", "joined", "replayed", "refused")  # how a request was answered


class ServingMetrics:
    """The counters and gauges of every pair of one app, in one registry (what /metrics shows)."""

    def __init__(self):
        self.registry = CollectorRegistry()
        r, pair, method = self.registry, ["pair"], ["pair", "method"]
        self.requests = Counter(
            "easd:requests", "Requests, by how they were served: " + ", ".join(SERVED), [*pair, "served"], registry=r
        )
        self.waiting = Gauge("easd:num_requests_waiting", "Requests in line for rows of the shared batch", pair, registry=r)
        self.running = Gauge("easd:num_rows_running", "Rows of the shared batch held by running requests", pair, registry=r)
        self.decode_seconds = Counter("easd:decode_seconds", "Seconds the shared batch spent decoding", pair, registry=r)
        self.tokens = Counter("easd:generation_tokens", "Tokens emitted", method, registry=r)
        self.drafts = Counter("easd:spec_decode_num_drafts", "Drafts verified by the target", method, registry=r)
        self.draft_tokens = Counter("easd:spec_decode_num_draft_tokens", "Tokens proposed by the draft", method, registry=r)
        self.accepted = Counter("easd:spec_decode_num_accepted_tokens", "Drafted tokens accepted", method, registry=r)
        self.accepted_per_pos = Counter(
            "easd:spec_decode_num_accepted_tokens_per_pos",
            "Drafted tokens accepted, by draft position (1 = the first)",
            [*method, "position"],
            registry=r,
        )
        self.interventions = Counter(
            "easd:interventions",
            "Tokens a method chose against its plain model (its interventions: EASD's penalties, MTI's guided tokens, …)",
            method,
            registry=r,
        )
        self.stops = Counter("easd:run_stops", "Runs ended, by stop reason", [*pair, "reason"], registry=r)

    def arrived(self, pair: str, served: str) -> None:
        self.requests.labels(pair, served).inc()

    def boundary(self, pair: str, waiting: int, running_rows: int, decoding_seconds: float) -> None:
        """At a block boundary: the line, the rows held, and the seconds of the step that just ended."""
        self.waiting.labels(pair).set(waiting)
        self.running.labels(pair).set(running_rows)
        if decoding_seconds > 0:
            self.decode_seconds.labels(pair).inc(decoding_seconds)

    def ended(self, pair: str, traces: list[Trace]) -> None:
        """A request's runs are over (to their end, stopped or failed): count what they emitted."""
        for trace in traces:
            method = trace.settings.method
            self.tokens.labels(pair, method).inc(len(trace.records))
            self.interventions.labels(pair, method).inc(sum(intervened(r.origin, method) for r in trace.records))
            self.stops.labels(pair, trace.stats.stop_reason or "stopped").inc()
            if not METHODS[method].verifies:
                continue
            spec = SpecMetrics.of([trace])
            self.drafts.labels(pair, method).inc(spec.num_drafts)
            self.draft_tokens.labels(pair, method).inc(spec.num_draft_tokens)
            self.accepted.labels(pair, method).inc(spec.num_accepted_tokens)
            for position, accepted in enumerate(spec.accepted_per_position, start=1):
                self.accepted_per_pos.labels(pair, method, str(position)).inc(accepted)
