"""The same request computed once: users who ask for exactly the same thing share one computation.

Most requests in a lesson are the same ("click the first example"), and 2 cores decode about
15–25 tokens a second in all, so sixteen copies of one request would make the last user wait
sixteen times as long for a result the first already has. Instead:

  request      what one user asks a worker for: the generations of one ticket (easd.serving.worker).
  same         two requests are the same when their `request_key`s are equal: the engine's version,
               the pair (its files, backend, kernels and dtype), and each generation's prompt, chat
               flag and settings, the seed included.
  joined       a request whose twin is in line or decoding gets another `Stream` of the twin's ticket:
               everything decoded so far at once, then the stream.
  replayed     a request whose twin finished recently gets its traces from `Results` at once.

Each user holds a Stream: stopping it ends only that user's stream (they keep what they saw); the
computation stops when its last stream does. Where results are exact (llama.cpp's exact kernels,
transformers in float32) a shared result is the one a solo run gives, token for token, since a
generation decodes as it would alone. Where they are not (llama.cpp's fast kernels, bfloat16) a
shared result is still a valid run of that request, only not bit-identical to every solo run.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import _version
from ..method.pair import ModelPair
from ..method.trace import Trace

if TYPE_CHECKING:
    from ..method.generation import Generation

RESULTS_BYTES = 64 * 2**20  # finished results kept for replay: about 300 comparisons of 2 × 128 tokens
FINISHED = ("eos", "max_new_tokens", "context")  # stop reasons of a result worth replaying (not stopped, unread, error)


def request_key(pair: ModelPair, generations: Iterable[Generation]) -> Hashable:
    """What makes two requests the same (see above); equal keys promise equal results where results are exact."""
    runtime = tuple(sorted((name, str(value)) for name, value in pair.info.items()))
    asked = tuple((g.prompt, g.chat, g.use_cache, g.settings) for g in generations)
    return (_version.__version__, pair.describe(), runtime, asked)


@dataclass(frozen=True)
class Result:
    """A finished result kept for the same request: its traces, and the trace JSON every replay of it sends."""

    traces: list[Trace]
    document: dict  # easd.method.trace.to_json_dict(traces), made once
    size: int  # bytes of that document as JSON


class Results:
    """Finished results by request key, least recently used out first, within `max_bytes` of trace JSON."""

    def __init__(self, max_bytes: int = RESULTS_BYTES):
        self.max_bytes = max_bytes
        self.kept: OrderedDict[Hashable, Result] = OrderedDict()
        self.bytes = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Result | None:
        with self._lock:
            if key not in self.kept:
                return None
            self.kept.move_to_end(key)
            return self.kept[key]

    def measure(self, traces: list[Trace], document: dict) -> Result | None:
        """`traces` (and their trace JSON, `document`) as a result to keep, or None for one not to keep: one not run to
        its end (a stopped or failed one would replay a fragment), or one larger than the whole cache. Takes no lock:
        a megabyte of JSON is tens of milliseconds."""
        if not all(trace.stats.stop_reason in FINISHED for trace in traces):
            return None
        size = len(json.dumps(document))
        return Result(traces, document, size) if size <= self.max_bytes else None

    def put(self, key: Hashable, result: Result | None) -> None:
        """Keep a result (as `measure` made it; None keeps nothing)."""
        if result is None:
            return
        with self._lock:
            if key in self.kept:
                self.bytes -= self.kept.pop(key).size
            self.kept[key] = result
            self.bytes += result.size
            while self.bytes > self.max_bytes:
                self.bytes -= self.kept.popitem(last=False)[1].size
