"""When a stream's news is sent: on the ticks of one clock every stream shares, and only to a client that took the
last update. The page's run, the API's compare and a room's viewers all send on these ticks."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator

from easd.serving.tickets import Stream

from .gradio_internals import Uptake


def news(stream: Stream, every_s: float, uptake: Uptake | None = None) -> Iterator[int]:
    """Until the stream is done, each time it has news (blocks, a new place in line): the first at once, then on the
    ticks of a clock shared by every stream (every `every_s`: a browser cannot use more), so the streams of one run
    wake together and share each update's work (Ticket.update); a tick on which the client has not yet taken its last
    update (`uptake`) is skipped, so a slow client gets fewer, larger updates instead of a backlog."""
    seen = -1
    while not stream.done:
        news = stream.wait(seen, every_s)
        if news == seen or stream.done:
            continue
        if seen != -1:
            time.sleep(to_tick(every_s))
        if take(stream, seen, uptake):
            seen = stream.version
            yield seen


async def news_without_a_thread(stream: Stream, every_s: float, uptake: Uptake | None = None) -> AsyncIterator[int]:
    """`news` for an async handler: it looks on every tick instead of waiting on the stream, so a stream holds no
    thread (a hundred users watching one run hold a hundred, where Gradio lends 40)."""
    seen = -1
    while not stream.done:
        if stream.version != seen and take(stream, seen, uptake):
            seen = stream.version
            yield seen
        await asyncio.sleep(to_tick(every_s))


def to_tick(every_s: float) -> float:
    """Seconds until the next tick of the clock every stream shares."""
    return every_s - time.monotonic() % every_s


def take(stream: Stream, seen: int, uptake: Uptake | None) -> bool:
    """Whether to send the stream's news now: the first at once, later ones once the client took the last one."""
    return seen == -1 or uptake is None or not uptake.behind()
