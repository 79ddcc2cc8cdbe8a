"""The load test's users and viewers (tools.loadtest), each group in a process of its own: this module imports only
what a client needs (httpx; no torch, no Gradio), so each process it spawns starts in a fifth of a second, not five."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import uuid

import httpx

PROMPTS = [  # sixteen questions a class might ask, of different lengths and kinds
    "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. How much did she earn?",
    "Write a short poem about the sea at night.",
    "Explain to a ten-year-old why the sky is blue.",
    "Is 221 a prime number? Think step by step.",
    "Give three tips for learning a new language.",
    "Write a Python function that checks whether a string is a palindrome, ignoring spaces and case.",
    "If a shirt costs $25 after a 20% discount, what was its original price?",
    "What are the pros and cons of working from home?",
    "Write a haiku about autumn leaves.",
    "Tell me a story about a robot who learns to paint, in three sentences.",
    "What is the difference between a list and a tuple in Python?",
    "A bakery sells muffins for $3 each and cookies for $1.50 each. Maria buys 4 muffins and 6 cookies and pays "
    "with a $50 bill. How much change does she get?",
    "Describe your ideal weekend in a few sentences.",
    "Suggest a name for a coffee shop run by cats, and explain your choice.",
    "Which of these is a chemical change? (A) ice melting (B) salt dissolving in water (C) iron rusting "
    "(D) water boiling. Explain briefly, then give the letter.",
    "Write an opening line for a mystery novel.",
]


def elsewhere() -> None:
    """Run this process at the lowest CPU priority: users' and viewers' browsers run on their own machines, so on a
    2-core machine their reading would otherwise take from the server what no real class takes, and hide its own
    cost (reading in the server's process, they would also hold its GIL)."""
    os.nice(19)


def users_at_once(url: str, users: int, max_new_tokens: int, same: bool, parameters: list) -> tuple[list[float], list[dict]]:
    """`users` calls of /compare at once (`parameters`: its (name, default) pairs, in order); -> (seconds until each
    result, in user order), results."""
    elsewhere()
    return asyncio.run(_call_all(url, users, max_new_tokens, same, parameters))


async def _call_all(url: str, users: int, max_new_tokens: int, same: bool, parameters: list) -> tuple[list[float], list[dict]]:
    """Every user's /compare call at once, each as its own API client (a session, its heartbeat, its event stream),
    all in one event loop: a hundred gradio_client Clients in one process would cost more than the server they
    measure (each reads its stream in threads of its own), so the clients here do only what the protocol asks."""
    config = httpx.get(f"{url}config", timeout=60).json()
    index = next(d["id"] for d in config["dependencies"] if d.get("api_name") == "compare")
    defaults = dict(parameters)
    async with httpx.AsyncClient(
        timeout=httpx.Timeout(600, connect=60), limits=httpx.Limits(max_connections=None, max_keepalive_connections=0)
    ) as http:

        async def user(i: int) -> tuple[float, str]:
            which = 0 if same else i
            asked = defaults | {"prompt": PROMPTS[which % len(PROMPTS)], "seed": which, "max_new_tokens": max_new_tokens}
            began = time.monotonic()
            completed = await call_compare(http, url, index, [asked[name] for name, _ in parameters])
            return time.monotonic() - began, completed

        done = await asyncio.gather(*(user(i) for i in range(users)))
    # a user's clock stops when the result has arrived; reading it is their browser's work, on their own machine
    # (parsed in the loop, a hundred 3 MB results would make the last user wait for the other 99 to be read)
    return [seconds for seconds, _ in done], [result_of(completed) for _, completed in done]


async def call_compare(http: httpx.AsyncClient, url: str, index: int, data: list) -> str:
    """One API client's call of /compare over Gradio's queue protocol, as gradio_client makes it: a session with its
    heartbeat, the call joined to the queue, its event stream read to the end; -> the completed message, unread
    (`result_of` reads it)."""
    session = uuid.uuid4().hex

    async def heartbeat():
        async with http.stream("GET", f"{url}gradio_api/heartbeat/{session}") as beats:
            async for _ in beats.aiter_lines():
                pass

    beating = asyncio.create_task(heartbeat())
    try:
        body = {"data": data, "fn_index": index, "session_hash": session}
        (await http.post(f"{url}gradio_api/queue/join", json=body)).raise_for_status()
        async with http.stream("GET", f"{url}gradio_api/queue/data", params={"session_hash": session}) as stream:
            async for line in stream.aiter_lines():
                if line.startswith("data: ") and '"process_completed"' in line:
                    return line[6:]
        raise RuntimeError("the event stream ended without a result")
    finally:
        beating.cancel()


def result_of(completed: str) -> dict:
    """The result in a completed message of /compare (raises on an error)."""
    output = json.loads(completed)["output"]
    if "error" in output and output["error"] is not None:
        raise RuntimeError(f"compare failed: {output['error']}")
    return output["data"][0]


def watch_room(url: str, watch_index: int, code: str, viewers: int, ready, done, counts) -> None:
    """`viewers` pages in room `code` (in a process of their own, `elsewhere`), until `done`; -> the bytes each
    received."""
    elsewhere()
    watchers = [Viewer(url, watch_index, code) for _ in range(viewers)]
    ready.set()
    done.wait()
    counts.put([w.received for w in watchers])


class Viewer:
    """A page opened with ?room=CODE: joins the room and counts the bytes its stream brings."""

    def __init__(self, url: str, watch_index: int, code: str):
        self.received, session = 0, uuid.uuid4().hex
        body = {"data": [None], "fn_index": watch_index, "session_hash": session}
        httpx.post(f"{url}gradio_api/queue/join?room={code}", json=body).raise_for_status()
        self.thread = threading.Thread(target=self._read, args=(url, session), daemon=True)
        self.thread.start()

    def _read(self, url: str, session: str) -> None:
        with httpx.stream("GET", f"{url}gradio_api/queue/data", params={"session_hash": session}, timeout=None) as r:
            for chunk in r.iter_bytes():
                self.received += len(chunk)
