"""Reference decoders written directly against llama-cpp-python, for the bench and the tests to hold our loop against.

`generate` is llama-cpp-python's own high-level greedy generation of one model (its `Llama`
class, its defaults): the peer a CPU user would otherwise reach for. `speculative` is greedy
speculative decoding in a page of low-level calls, with the pass shapes of easd's loop (each block
feeds the draft the tokens it has not seen, one pass per drafted token, then the target all k + 1
in one pass) and the same context settings (easd.backends.llamacpp), so that it must emit the same
tokens; the bench times it against our loop to see what the loop's bookkeeping costs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...backends import llamacpp
from ...backends.llamacpp import llama
from ...errors import EasdError


def generate(path: Path, prompt: list[int], max_new_tokens: int, eos_ids: frozenset[int], threads: int) -> list[int]:
    """llama-cpp-python's `Llama.generate` at temperature 0, up to the first end token or `max_new_tokens`."""
    if llamacpp.amx_kernels():  # its Llama repacks weights for them, always
        raise EasdError(f"llama-cpp-python's own generate: {llamacpp.AMX_CRASHES}; time it with the portable build")
    model = llama.Llama(
        model_path=str(path), n_ctx=len(prompt) + max_new_tokens + 8, n_threads=threads, n_threads_batch=threads, verbose=False
    )
    out = []
    for token in model.generate(prompt, temp=0.0, top_k=1, reset=True):
        out.append(token)
        if token in eos_ids or len(out) == max_new_tokens:
            break
    return out


class _Sequence:
    """One model's context holding one sequence, fed the tokens it has not seen."""

    def __init__(self, model: llamacpp.LlamaModel, room: int):
        self.caches = model.caches(model.n_vocab)  # the backend's own context settings: exact mode and all
        self.caches.add_row([], room)
        self.context, self.vocab = self.caches.context, model.n_vocab
        self.seen = 0

    def feed(self, tokens: list[int], outputs: int) -> np.ndarray:
        """Decode tokens[seen:] in one llama_decode; -> the logits of the last `outputs` of them.  [outputs, V]"""
        fresh = tokens[self.seen :]
        batch = llama.llama_batch_init(len(fresh), 0, 1)
        for i, token in enumerate(fresh):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, self.seen + i, 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = i >= len(fresh) - outputs
        batch.n_tokens = len(fresh)
        assert llama.llama_decode(self.context, batch) == 0
        logits = [
            np.ctypeslib.as_array(llama.llama_get_logits_ith(self.context, i), shape=(self.vocab,)).copy()
            for i in range(len(fresh) - outputs, len(fresh))
        ]
        llama.llama_batch_free(batch)
        self.seen = len(tokens)
        return np.stack(logits) if logits else np.empty((0, self.vocab))

    def keep(self, length: int) -> None:
        """Forget everything from position `length` on."""
        if length < self.seen:
            llama.llama_memory_seq_rm(llama.llama_get_memory(self.context), 0, length, -1)
            self.seen = length


def speculative(
    draft: llamacpp.LlamaModel,
    target: llamacpp.LlamaModel,
    prompt: list[int],
    k: int,
    max_new_tokens: int,
    eos_ids: frozenset[int],
) -> list[int]:
    """Greedy SD: the draft proposes k tokens, the target keeps the longest prefix it agrees with and adds its own."""
    room = len(prompt) + max_new_tokens + k + 1
    d, t = _Sequence(draft, room), _Sequence(target, room)
    tokens = list(prompt)
    for sequence in (d, t):  # both caches hold every token but the last
        sequence.feed(tokens[:-1], 0)
    while True:
        generated = len(tokens) - len(prompt)
        steps = min(k, max_new_tokens - generated - 1)
        drafted = []
        for _ in range(steps):
            drafted.append(int(d.feed(tokens + drafted, 1)[-1].argmax()))
        best = t.feed(tokens + drafted, len(drafted) + 1).argmax(axis=1)
        n = next((i for i, c in enumerate(drafted) if c != best[i]), len(drafted))
        emitted = drafted[:n] + [int(best[n])]
        cut = next((i for i, token in enumerate(emitted) if token in eos_ids), None)
        tokens += emitted if cut is None else emitted[: cut + 1]
        if cut is not None or len(tokens) - len(prompt) >= max_new_tokens:
            return tokens[len(prompt) :]
        d.keep(len(tokens) - 1)
        t.keep(len(tokens) - 1)
