"""A class at once: N users press Generate together; how long until the last one has their result?

    python -m tools.loadtest --pair qwen-coder --backend llama.cpp,transformers --users 1,4,8,16 --max-new-tokens 128
    python -m tools.loadtest --pair qwen-coder --backend llama.cpp --users 1,16 --same-prompt
    python -m tools.loadtest --pair qwen-coder --backend llama.cpp --users 1 --viewers 30

Serves the app on a local port (the real app: `components.wiring.build_app`, the pair loaded once) and
sends N simultaneous `/compare` requests over Gradio's queue protocol, as gradio_client sends them (from a process
of their own at the lowest CPU priority, as the users' own machines, and one event loop: `tools.loadclients`), each with its own prompt and seed (with
`--same-prompt`, all the first example's, as a class clicking it together: computed once, easd.serving.same_request).
Twice, in the same run:
  * the queue without a shared batch: `--max-batch 2`, one comparison at a time, all `max(users)` sent at once; the
    time the N-th result arrives is what N users wait in a queue;
  * the shared batch: `--max-batch` (default: the memory estimate), each N sent at once.
Each user's shared-batch result is compared token for token with the same request's result in the
queue, where it ran alone (both backends promise equality: transformers in float32, llama.cpp in
its exact mode). Each request's estimated start and end (easd.serving.estimates), as first made once
the batch's pace had been measured over 3 steps, is compared with when it really started and ended.
With `--viewers N`, a presenter opens a room (components.rooms) and runs the first example twice,
alone and with N viewers following it, each through Gradio's queue protocol as a page does; it
prints the two times and the bytes each viewer received against the result's size. With several
backends, each is measured in turn, in the same run. The process's peak RSS after each backend is
printed too. Every user comes from this machine's one address, so
the per-client and per-address limits are lifted here.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import re
import resource
import threading
import time
import uuid

import httpx

from components import api
from components.rooms import ROOM_EVERY_S
from components.server import serve
from components.wiring import build_app
from easd.backends import configure_threads
from easd.pairs.loading import Runtime
from easd.pairs.registry import default_pair_name, load_named_pair
from easd.serving.host import ModelHost
from easd.serving.metrics import SERVED, ServingMetrics
from easd.serving.same_request import RESULTS_BYTES, Results
from tools.loadclients import PROMPTS, users_at_once, watch_room


def start_app(pair, name: str, max_batch: int | None, cap: int, users: int, shared: bool = True):
    """The app on a local port; without `shared`, as it was before easd.serving.same_request: every request computed."""
    host = ModelHost(
        {name: lambda: pair},
        name,
        max_new_tokens_cap=cap,
        max_batch=max_batch,
        max_queued_per_client=users,
        max_per_address=users,
        result_bytes=RESULTS_BYTES if shared else 0,
        metrics=ServingMetrics(),  # what GET /metrics would show (app.py --metrics on), printed after each round
    )
    host.ensure_loading(name)
    while host.pair(name) is None:
        time.sleep(0.05)
    host.states[name].worker.joins = shared
    demo = build_app(host, [])
    _, url, _ = serve(demo, prevent_thread_lock=True, quiet=True, metrics=host.metrics)
    return demo, url, host


def metrics_line(host: ModelHost) -> str:
    """The /metrics figures so far, summed over their labels (but a request's `served`), from the app's registry."""
    totals: dict[str, float] = {}
    for family in host.metrics.registry.collect():
        for sample in family.samples:
            key = sample.name + (f"[{sample.labels['served']}]" if "served" in sample.labels else "")
            totals[key] = totals.get(key, 0.0) + sample.value
    requests = ", ".join(f"{served} {totals.get(f'easd:requests_total[{served}]', 0):.0f}" for served in SERVED)
    return (
        f"/metrics so far: requests {requests}; tokens {totals.get('easd:generation_tokens_total', 0):.0f}; drafts "
        f"{totals.get('easd:spec_decode_num_drafts_total', 0):.0f}, accepted tokens "
        f"{totals.get('easd:spec_decode_num_accepted_tokens_total', 0):.0f}; decoding "
        f"{totals.get('easd:decode_seconds_total', 0):.1f} s"
    )


def send(url: str, users: int, max_new_tokens: int, same: bool = False) -> tuple[list[float], list[dict]]:
    """`users` requests at once, one client each (all the same with `same`), from a process of their own
    (tools.loadclients); -> (seconds until each result, in user order), results."""
    parameters = [(name, default) for name, default, *_ in api.parameters()]
    with multiprocessing.get_context("spawn").Pool(1) as clients:
        return clients.apply(users_at_once, (url, users, max_new_tokens, same, parameters))


def tokens_of(result: dict) -> list[list[int]]:
    return [[row["token_id"] for row in run["rows"]] for run in result["runs"]]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pair", default=None, help="a named pair (default: the app's default)")
    parser.add_argument("--backend", default="auto", help="auto, llama.cpp or transformers; several, comma-separated, in turn")
    parser.add_argument("--dtype", default="auto", help="transformers' dtype: auto, float32 or bfloat16")
    parser.add_argument("--users", default="1,4,8,16", help="comma-separated numbers of simultaneous users")
    parser.add_argument("--max-new-tokens", type=int, default=128, help="tokens per lane, greedy")
    parser.add_argument("--max-batch", type=int, default=None, help="rows of the shared batch (default: the memory estimate)")
    parser.add_argument("--same-prompt", action="store_true", help="every user sends the first example, as a class does")
    parser.add_argument(
        "--queue-users",
        type=int,
        default=None,
        help="users sent to the queue without a shared batch (--max-batch 2) (default: the most of --users)",
    )
    parser.add_argument("--viewers", type=int, default=0, help="also measure a room: the presenter's run with N viewers")
    args = parser.parse_args(argv)
    counts = sorted({int(n) for n in args.users.split(",")})
    configure_threads()
    name = args.pair or default_pair_name()
    for backend in [b.strip() for b in args.backend.split(",") if b.strip()]:
        dtype = args.dtype if backend == "transformers" else "auto"  # llama.cpp runs the GGUF's own weights
        pair = load_named_pair(name, Runtime(backend=backend, dtype=dtype))
        print(f"pair: {pair.describe()}; {args.max_new_tokens} tokens per lane, greedy; users {counts}", flush=True)
        measure(pair, name, counts, args)
        if args.viewers:
            measure_room(pair, name, args.viewers, args.max_new_tokens)
        print(f"peak RSS of this process so far: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GB", flush=True)


def measure(pair, name: str, counts: list[int], args: argparse.Namespace) -> None:
    """Today's queue, then the shared batch at each number of users, all against the queue's lone runs."""
    most, queued = max(counts), min(args.queue_users or max(counts), max(counts))
    demo, url, _ = start_app(pair, name, 2, args.max_new_tokens, queued, shared=False)
    queue_s, alone = send(url, queued, args.max_new_tokens, args.same_prompt)
    demo.close()
    arrivals = sorted(queue_s)
    print(
        f"the queue without a shared batch (--max-batch 2), {queued} users at once: results after "
        + ", ".join(f"{s:.0f}" for s in arrivals)
        + " s"
    )

    demo, url, host = start_app(pair, name, args.max_batch, args.max_new_tokens, most)
    rows = host.states[name].worker.max_rows
    print(f"shared batch: --max-batch {rows}", flush=True)
    print(
        f"{'users':>5} | {'queue: last result':>18} | {'shared batch: last result':>25} | {'× one user alone':>16} | equal to alone"
    )
    one, worker = None, host.states[name].worker
    for n in counts:
        worker.results = Results()  # each round starts with none kept: no result of the last round is replayed
        with Estimates(worker) as estimates:
            seconds, results = send(url, n, args.max_new_tokens, args.same_prompt)
        last = max(seconds)
        one = one or (last if n == 1 else None)
        # the same request's lone run: with --same-prompt every user's is the queue's first, else the user's own
        lone = [alone[0] if args.same_prompt else alone[i] if i < len(alone) else None for i in range(n)]
        equal = sum(a is not None and tokens_of(r) == tokens_of(a) for r, a in zip(results, lone))
        ratio = f"{last / one:.2f}×" if one else "n/a"
        queue = f"{arrivals[n - 1]:>16.0f} s" if n <= len(arrivals) else f"{'n/a':>18}"
        compared = sum(a is not None for a in lone)
        print(f"{n:>5} | {queue} | {last:>23.0f} s | {ratio:>16} | {equal} of {compared}", flush=True)
        print(f"      estimates: {estimates.report()}", flush=True)
        print(f"      {metrics_line(host)}", flush=True)
    demo.close()


def measure_room(pair, name: str, viewers: int, max_new_tokens: int) -> None:
    """The presenter's run of the first example, alone and with `viewers` pages watching its room."""
    demo, url, host = start_app(pair, name, None, max_new_tokens, 2)
    results = host.states[name].worker.results
    page = PageClient(url, name)
    presenter = page.session()
    code = re.search(r"room ([A-Z0-9]{5})", json.dumps(page.call(presenter, "present", [None]))).group(1)
    alone = page.generate(presenter, seed=1, max_new_tokens=max_new_tokens)
    alone_decoding = decoding_seconds(results)
    # the viewers' pages are another process, as browsers are: their reading does not share the server's GIL
    spawn = multiprocessing.get_context("spawn")
    ready, done, counts = spawn.Event(), spawn.Event(), spawn.Queue()
    audience = spawn.Process(target=watch_room, args=(page.url, page.watch_index, code, viewers, ready, done, counts))
    audience.start()
    ready.wait(120)
    time.sleep(2)  # every viewer's page is in the room
    watched = page.generate(presenter, seed=2, max_new_tokens=max_new_tokens)  # another seed: not replayed
    watched_decoding = decoding_seconds(results)
    result = next(reversed(results.kept.values())).size  # the run's trace JSON, in bytes
    time.sleep(3 * ROOM_EVERY_S)  # the viewers' last update, after the run ended
    done.set()
    received = sorted(counts.get(timeout=60))
    audience.join(30)
    demo.close()
    print(
        f"room of {viewers} viewers: the presenter's run decoded in {watched_decoding:.1f} s "
        f"(alone: {alone_decoding:.1f} s, {watched_decoding / alone_decoding:.2f}×), and their page had it after "
        f"{watched:.1f} s (alone: {alone:.1f} s, {watched / alone:.2f}×); each viewer received "
        f"{received[0] / 1e3:,.0f}–{received[-1] / 1e3:,.0f} kB, {received[-1] / result:.2f}× the result "
        f"({result / 1e3:,.0f} kB of trace JSON)",
        flush=True,
    )


def decoding_seconds(results: Results) -> float:
    """How long the latest finished run's generations took in the batch (the longer lane's time)."""
    return max(trace.stats.seconds for trace in next(reversed(results.kept.values())).traces)


class PageClient:
    """The app's page events through Gradio's queue protocol, as its JavaScript client sends them."""

    def __init__(self, url: str, pair: str):
        self.url, self.pair = url, pair
        config = httpx.get(f"{url}config").json()
        ids = {c["id"]: c.get("props", {}).get("elem_id") for c in config["components"]}
        self.defaults = {c["id"]: c.get("props", {}).get("value") for c in config["components"]}  # what a fresh page sends
        self.events, self.inputs, loads = {}, {}, {}
        for index, dependency in enumerate(config["dependencies"]):
            for target, trigger in dependency["targets"]:
                if trigger == "click" and ids.get(target) not in self.events:
                    self.events[ids.get(target)] = index
                    self.inputs[ids.get(target)] = [(i, ids.get(i)) for i in dependency["inputs"]]
                elif trigger == "load" and dependency["types"]["generator"]:
                    loads[len(dependency["outputs"])] = index
        # of the page's load events, the room's is the one that streams (a generator), and it renders everything
        self.watch_index = loads[max(loads)]

    def session(self) -> str:
        return uuid.uuid4().hex

    def call(self, session: str, event: str | int, data: list, query: str = "") -> list:
        """Send one event and read its stream to the end; -> its final output."""
        index = self.events[event] if isinstance(event, str) else event
        body = {"data": data, "fn_index": index, "session_hash": session}
        httpx.post(f"{self.url}gradio_api/queue/join{query}", json=body).raise_for_status()
        with httpx.stream("GET", f"{self.url}gradio_api/queue/data", params={"session_hash": session}, timeout=600) as r:
            for line in r.iter_lines():
                if line.startswith("data: ") and '"process_completed"' in line:
                    return json.loads(line[6:])["output"]["data"]
        raise RuntimeError(f"event {event} ended without a result")

    def generate(self, session: str, seed: int, max_new_tokens: int) -> float:
        """The presenter's Generate on the first example; -> seconds until its last update."""
        chosen = {"prompt": PROMPTS[0], "pair": self.pair, "seed": seed, "max_new_tokens": max_new_tokens}
        data = [chosen.get(name, self.defaults[i]) for i, name in self.inputs["generate"]]  # the rest as a fresh page has it
        began = time.monotonic()
        self.call(session, "generate", data)
        return time.monotonic() - began


class Estimates:
    """Watches the worker while requests run: each ticket's first estimate made once the pace was measured over
    MEASURED_STEPS steps, against when it really started and ended."""

    MEASURED_STEPS = 3

    def __init__(self, worker):
        self.worker, self.first = worker, {}  # id(ticket) -> (ticket, seen at, estimated start, estimated end)
        self._done = threading.Event()

    def __enter__(self):
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join()

    def _watch(self):
        while not self._done.wait(0.05):
            if self.worker.pace.steps < self.MEASURED_STEPS:
                continue
            for ticket in [*self.worker.line, *self.worker.running]:
                if id(ticket) not in self.first and not ticket.done:
                    at = ticket.estimated_at
                    self.first[id(ticket)] = (ticket, at, at + ticket.starts_in_s, at + ticket.ends_in_s)

    def report(self) -> str:
        """How far the estimates fell from what happened, as a share of the time that was left when they were made."""
        starts, ends = [], []
        for ticket, seen, start, end in self.first.values():
            if ticket.started is None or ticket.ended is None:
                continue
            if ticket.started > seen + 0.5:  # it was in line when seen
                starts.append(abs(start - ticket.started) / (ticket.started - seen))
            ends.append(abs(end - ticket.ended) / max(ticket.ended - seen, 1e-6))

        def line(errors: list[float]) -> str:
            if not errors:
                return "none"
            within = sum(e <= 0.3 for e in errors)
            return f"mean error {100 * sum(errors) / len(errors):.0f}%, worst {100 * max(errors):.0f}%, {within} of {len(errors)} within ±30%"

        return f"{len(self.first)} requests seen; start (those in line): {line(starts)}; end: {line(ends)}"


if __name__ == "__main__":
    main()
