"""The llama.cpp backend: GGUF files run by llama.cpp through llama-cpp-python's low-level API.

`LlamaModel` is one loaded GGUF file. A batch's `LlamaCaches` is one llama.cpp context holding a
sequence per row (its seq_id), each in its own part of the KV cache (`kv_unified` off). A pass is
one `llama_decode` over every row's unseen tokens, with logits asked for only where the loop needs
them; a rejected draft leaves with `llama_memory_seq_rm`, and a row's state moves between batches
as llama.cpp's own sequence bytes. `LlamaTokenizer` takes the token ids and the chat template from
the GGUF itself. `load_llama_pair` pairs two files, with each model's measured logit shift (below).

Numerics, measured. llama.cpp's fastest CPU kernels change with the shape of a pass: weights
repacked for 4-row products, "tiled" K-quant products from 8 rows on, and attention split over
the cache for one query or tiled from 64. With them a position's logits differ between a 1-token
and a 5-token pass (up to 0.5 on the embedded target), and a row's logits depend on how many
other rows share its pass. Without them each product is a dot product per output and attention
one pass per query, the same for any pass: a row's logits do not depend on the pass's shape or on
the other rows, so greedy SD equals target-only and a batched row its solo run, bit for bit.
`KERNELS` chooses, once per process (llama.cpp reads one switch from the environment):
  exact (the default)  no repacking, no tiled products, keys and values cached as bfloat16 (for
                       which llama.cpp has only the one-pass attention)
  fast                 llama.cpp's defaults, faster for batches: EASD_LLAMA_KERNELS=fast
`measure_shift` finds the largest change of a logit between the pass shapes the loop uses (0 when
exact); the fragile flag counts it as rounding (easd.method.acceptance.Rounding).
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import sys
import threading
import weakref
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..errors import EasdError, ModelLoadError
from ..files import write_text_whole
from ..method.pair import ModelPair, check_same_tokenizer
from . import configure_threads

KERNELS = os.environ.get("EASD_LLAMA_KERNELS", "exact")
if KERNELS not in ("exact", "fast"):
    raise ValueError(f"EASD_LLAMA_KERNELS must be exact or fast (got {KERNELS!r})")
os.environ["GGML_CPU_TILED_MM"] = "0" if KERNELS == "exact" else "1"  # read by llama.cpp at its first matrix product

import llama_cpp as llama  # noqa: E402 (after the switch above)

_SILENT = llama.llama_log_callback(lambda level, text, data: None)  # kept: llama.cpp calls it for as long as we run
llama.llama_log_set(_SILENT, None)  # llama.cpp logs every load and context on stderr otherwise; errors come back to us

ROW_CELLS = 256  # llama.cpp rounds a row's share of the cache up to a multiple of this
MICRO_BATCH = 256  # tokens llama.cpp computes at once: long prompts go through in pieces of this many
MAX_ROWS = 256  # sequences one llama.cpp context can hold (its LLAMA_MAX_SEQ)
GGML_TYPE_BF16 = 30  # ggml's number for bfloat16 (llama-cpp-python names only some of ggml's types)
_BACKEND = threading.Lock()
_started = False


def _start_backend() -> None:
    global _started
    with _BACKEND:
        if not _started:
            llama.llama_backend_init()
            _load_cpu_variants()
            if KERNELS == "fast" and amx_kernels():
                raise ModelLoadError(AMX_CRASHES + ": set EASD_LLAMA_KERNELS=exact (the default), or use the portable build")
            _started = True


# llama.cpp 0.3.36's AMX kernels (in a native build on an AMX CPU, or the sapphirerapids variant of an all-CPUs
# build) stop the process with "illegal instruction" at their first tile instruction, measured on a Xeon with AMX
# (upstream: ggml-org/llama.cpp#26954). They run only from repacked weights ("extra buffer types"): fast mode, and
# llama-cpp-python's own Llama; exact mode never uses them.
AMX_CRASHES = "this build of llama.cpp has AMX kernels, which crash on this version (llama.cpp PR 26954)"


def amx_kernels() -> bool:
    """Whether the llama.cpp this process runs has AMX kernels for this CPU (see AMX_CRASHES)."""
    return "AMX_INT8 = 1" in cpu_features()


def cpu_features() -> str:
    """llama.cpp's CPU kernels in this process, e.g. "CPU : SSE3 = 1 | … | AVX2 = 1 | … | REPACK = 1"."""
    return llama.llama_print_system_info().decode(errors="replace").strip(" |")


def _load_cpu_variants() -> None:
    """The CPU kernels, where llama.cpp was built with one library per x86 CPU family (GGML_BACKEND_DL with
    GGML_CPU_ALL_VARIANTS: libggml-cpu-haswell.so … libggml-cpu-sapphirerapids.so, docs/method.md): ggml registers none
    until asked, and looks for them beside the Python executable, not in llama_cpp/lib where the build put them.
    Load the best one this CPU runs from there, through libllama's own ggml (pip copies each library's symlinks as
    files, so a second libggml of our own would keep a registry libllama never reads). The default build has its CPU
    backend built in: nothing to load."""
    lib = llama.llama_cpp._lib  # its dependencies answer for ggml's functions: the ggml libllama uses
    lib.ggml_backend_reg_count.restype = ctypes.c_size_t
    if lib.ggml_backend_reg_count() > 0:
        return
    lib.ggml_backend_load_all_from_path.argtypes = [ctypes.c_char_p]
    lib.ggml_backend_load_all_from_path(str(llama.llama_cpp._base_path).encode())
    if lib.ggml_backend_reg_count() == 0:
        raise ModelLoadError(
            f"llama.cpp was built with GGML_BACKEND_DL, but no CPU backend in {llama.llama_cpp._base_path} runs on this "
            "CPU: reinstall llama-cpp-python as requirements.txt says"
        )


@dataclass(eq=False)
class LlamaModel:
    """One GGUF file loaded by llama.cpp (easd.method.seam.Model)."""

    path: Path
    name: str
    threads: int = field(default_factory=torch.get_num_threads)  # as many as torch uses (easd.backends.configure_threads)
    shift: float = 0.0  # set by the loader from `measure_shift` (or its cached figure)
    backend: str = field(default="llama.cpp", init=False)
    device: torch.device = field(default=torch.device("cpu"), init=False)
    eps: float = field(default=0.0, init=False)  # llama.cpp's rounding is in `shift`, measured
    max_rows: int = field(default=MAX_ROWS, init=False)
    has_attention: bool = field(default=False, init=False)  # llama.cpp's API gives no attention weights

    def __post_init__(self):
        _start_backend()
        params = llama.llama_model_default_params()
        params.use_mmap = True  # the weights stay in the page cache, shared with other processes reading the file
        params.use_extra_bufts = KERNELS == "fast"  # repacked weights take shape-dependent kernels
        self.handle = llama.llama_model_load_from_file(str(self.path).encode(), params)
        if not self.handle:
            raise ValueError(f"llama.cpp could not load {self.path.name}")
        weakref.finalize(self, llama.llama_model_free, self.handle)  # also at exit, before llama.cpp's module goes
        self.vocab = llama.llama_model_get_vocab(self.handle)
        self.n_vocab = llama.llama_vocab_n_tokens(self.vocab)
        self.context_length = llama.llama_model_n_ctx_train(self.handle)

    @property
    def dtype(self) -> str:
        """llama.cpp's description of the weights, e.g. "GGUF qwen2 1.5B Q4_K - Medium"."""
        text = ctypes.create_string_buffer(256)
        llama.llama_model_desc(self.handle, text, len(text))
        return "GGUF " + text.value.decode(errors="replace")

    @property
    def bytes_per_token(self) -> int:
        """KV-cache bytes one token takes: 16-bit keys and values, every layer, every KV head."""
        head_dim = llama.llama_model_n_embd(self.handle) // llama.llama_model_n_head(self.handle)
        return 2 * 2 * llama.llama_model_n_layer(self.handle) * llama.llama_model_n_head_kv(self.handle) * head_dim

    def caches(self, vocab_size: int, use_cache: bool = True) -> LlamaCaches:
        return LlamaCaches(self, vocab_size, use_cache)

    def attention_rows(self, tokens: list[int], start: int, layers: int):
        raise NotImplementedError("llama.cpp exposes no attention weights")


# --- the caches of a batch ------------------------------------------------------------------------------


@dataclass
class Capacity:
    """What a context was made to hold: `rows` sequences of up to `cells` tokens each."""

    rows: int
    cells: int

    def holds(self, rows: int, cells: int) -> bool:
        return rows <= self.rows and cells <= self.cells


class LlamaCaches:
    """One context whose sequences are the rows of a batch (easd.method.seam.Caches).

    The context is made when the first row joins, sized for the rows and their room; when a row
    needs more, a bigger context takes every row's cache over (as llama.cpp's sequence bytes).
    `use_cache=False` clears a row and recomputes it from its first token on each pass.
    """

    def __init__(self, model: LlamaModel, vocab_size: int, use_cache: bool = True):
        self.model, self.vocab_size, self.use_cache = model, vocab_size, use_cache
        self.context = None
        self._release = lambda: None  # frees the context, once (a finalizer: also at exit)
        self.capacity = Capacity(0, 0)
        self.seq_ids: list[int] = []  # row -> its sequence in the context
        self.lengths: list[int] = []  # row -> tokens its sequence holds

    @property
    def rows(self) -> int:
        return len(self.seq_ids)

    def length(self, row: int) -> int:
        return self.lengths[row]

    def add_row(self, tokens: list[int], room: int, start: bytes | None = None) -> None:
        if not self.use_cache:
            tokens = []
        self._make_room(self.rows + 1, max(room, len(tokens) + 1))
        seq = min(set(range(self.capacity.rows)) - set(self.seq_ids))
        self.seq_ids.append(seq)
        self.lengths.append(0)
        row = self.rows - 1
        if start is not None and tokens:
            self._restore(seq, start)
            llama.llama_memory_seq_rm(self._memory(), seq, len(tokens), -1)  # keep the first len(tokens) of it
            self.lengths[row] = len(tokens)
        elif tokens:
            self._decode({row: tokens}, {row: 0})  # the row's prefix alone, as in a solo run

    def keep_rows(self, rows: list[int]) -> None:
        for row in set(range(self.rows)) - set(rows):
            llama.llama_memory_seq_rm(self._memory(), self.seq_ids[row], -1, -1)
        self.seq_ids = [self.seq_ids[row] for row in rows]
        self.lengths = [self.lengths[row] for row in rows]

    def save_row(self, row: int) -> bytes | None:
        if not self.lengths[row]:
            return None
        seq = self.seq_ids[row]
        size = llama.llama_state_seq_get_size(self.context, seq)
        buffer = (ctypes.c_uint8 * size)()
        written = llama.llama_state_seq_get_data(self.context, buffer, size, seq)
        return bytes(buffer[:written])

    def logits(
        self, sequences: dict[int, list[int]], last: dict[int, int], precise: Collection[int] = ()
    ) -> dict[int, torch.Tensor]:
        """One llama_decode over each row's unseen tokens; `precise` changes nothing (llama.cpp's logits are float32)."""
        if not self.use_cache:
            for row in sequences:
                self.truncate(row, 0)
        fresh = {row: tokens[self.lengths[row] :] for row, tokens in sequences.items()}
        return self._decode(fresh, last)

    def truncate(self, row: int, length: int) -> None:
        if length < self.lengths[row]:
            llama.llama_memory_seq_rm(self._memory(), self.seq_ids[row], length, -1)
            self.lengths[row] = length

    def tidy(self) -> None:
        """Nothing to do: llama.cpp reuses a sequence's freed cells itself."""

    # --- the one pass -------------------------------------------------------------------------------------

    def _decode(self, fresh: dict[int, list[int]], last: dict[int, int]) -> dict[int, torch.Tensor]:
        """Decode each row's `fresh` tokens after what its sequence holds; -> logits at its last `last[row]`.  {row: [last, V]}"""
        count = sum(len(tokens) for tokens in fresh.values())
        batch = llama.llama_batch_init(count, 0, 1)
        outputs: dict[int, list[int]] = {}  # row -> the batch indices whose logits it gets
        try:
            i = 0
            for row, tokens in fresh.items():
                start, wanted = self.lengths[row], len(tokens) - last.get(row, 0)
                for j, token in enumerate(tokens):
                    batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, start + j, 1
                    batch.seq_id[i][0] = self.seq_ids[row]
                    batch.logits[i] = j >= wanted
                    if j >= wanted:
                        outputs.setdefault(row, []).append(i)
                    i += 1
            batch.n_tokens = count
            status = llama.llama_decode(self.context, batch)
            if status != 0:
                raise RuntimeError(f"llama_decode failed with status {status} on a pass of {count} tokens")
            logits = {row: self._read(indices) for row, indices in outputs.items()}
        finally:
            llama.llama_batch_free(batch)
        for row, tokens in fresh.items():
            self.lengths[row] += len(tokens)
        return logits

    def _read(self, indices: list[int]) -> torch.Tensor:
        """The logits llama.cpp computed at these batch indices, cut to the shared vocabulary.  -> [len(indices), V]"""
        rows = [
            np.ctypeslib.as_array(llama.llama_get_logits_ith(self.context, i), shape=(self.model.n_vocab,))[: self.vocab_size]
            for i in indices
        ]
        return torch.from_numpy(np.stack(rows))  # np.stack copies out of llama.cpp's buffer

    # --- the context and its size -----------------------------------------------------------------------

    def _make_room(self, rows: int, cells: int) -> None:
        """A context holding `rows` rows of `cells` tokens each: this one, or a bigger one that takes the rows over."""
        if self.capacity.holds(rows, cells):
            return
        if rows > MAX_ROWS:
            raise EasdError(f"llama.cpp decodes at most {MAX_ROWS} rows at once (asked for {rows}); use a smaller batch")
        wanted = Capacity(
            rows=min(max(rows, 2 * self.capacity.rows, 1), MAX_ROWS),
            cells=-(-max(cells, self.capacity.cells) // ROW_CELLS) * ROW_CELLS,
        )
        saved = [self.save_row(row) for row in range(self.rows)]
        self._release()
        self.context = self._new_context(wanted)
        self._release = weakref.finalize(self, llama.llama_free, self.context)
        self.capacity = wanted
        self.seq_ids = list(range(len(saved)))
        for seq, state in enumerate(saved):
            if state is not None:
                self._restore(seq, state)

    def _new_context(self, capacity: Capacity):
        params = llama.llama_context_default_params()
        params.n_seq_max = capacity.rows
        params.n_ctx = capacity.rows * capacity.cells
        params.n_batch = max(capacity.rows * capacity.cells, MICRO_BATCH)  # one pass may hold every row's tokens
        params.n_ubatch = MICRO_BATCH
        params.kv_unified = False  # each row in its own part of the cache: its attention sees only its own cells
        if KERNELS == "exact":
            params.type_k = params.type_v = GGML_TYPE_BF16  # one-pass attention for any shape (see above)
        params.n_threads = params.n_threads_batch = self.model.threads
        params.no_perf = True
        context = llama.llama_init_from_model(self.model.handle, params)
        if not context:
            raise EasdError(
                f"llama.cpp could not make room for {capacity.rows} rows of {capacity.cells} tokens (out of memory?): "
                "use a smaller batch or fewer new tokens"
            )
        return context

    def _restore(self, seq: int, state: bytes) -> None:
        state = restream(state, self.capacity.rows)
        buffer = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
        if llama.llama_state_seq_set_data(self.context, buffer, len(state), seq) != len(state):
            raise RuntimeError("llama.cpp could not restore a row's cache")

    def _memory(self):
        return llama.llama_get_memory(self.context)


def restream(state: bytes, streams: int) -> bytes:
    """A sequence's saved cache, made fit for a context of `streams` rows.

    llama.cpp writes a sequence's cache as a header (a magic number and the sequence's id), its
    context's stream count (one stream per row here), then each stream's cells, a count of 0
    standing for a stream that holds none of them; a context with another stream count refuses it
    ("n_stream mismatch"). A row's cells all lie in its own stream, and llama.cpp reads them into
    the stream of the sequence it restores, so the same cells can be written for any stream count.
    (The layout of llama.cpp's state as pinned in requirements.txt; tests/test_llamacpp.py restores
    rows across context sizes.)
    """

    def word(value: int) -> bytes:
        return value.to_bytes(4, sys.byteorder)

    header, count, offset = state[:8], int.from_bytes(state[8:12], sys.byteorder), 12
    for stream in range(count):
        if int.from_bytes(state[offset : offset + 4], sys.byteorder):  # this stream holds the row's cells
            cells = state[offset : len(state) - 4 * (count - stream - 1)]  # up to the empty streams after it
            return header + word(streams) + cells + word(0) * (streams - 1)
        offset += 4
    return header + word(streams) + word(0) * streams


# --- the tokenizer ----------------------------------------------------------------------------------------


class LlamaTokenizer:
    """The GGUF's own tokenizer and chat template, through llama.cpp (easd.method.seam.Tokenizer)."""

    def __init__(self, model: LlamaModel):
        self.model, self.vocab_handle = model, model.vocab
        template = llama.llama_model_chat_template(model.handle, None)
        self.chat_template = template.decode() if template else None
        pad = llama.llama_vocab_pad(model.vocab)
        self.pad_id = pad if pad >= 0 else 0
        self.eos_ids = frozenset(t for t in (llama.llama_vocab_eos(model.vocab), llama.llama_vocab_eot(model.vocab)) if t >= 0)

    def encode(self, text: str) -> list[int]:
        data = text.encode("utf-8")
        size = len(data) + 16
        while True:
            buffer = (llama.llama_token * size)()
            count = llama.llama_tokenize(self.vocab_handle, data, len(data), buffer, size, False, True)
            if count >= 0:
                return list(buffer[:count])
            size = -count  # the buffer was too small: llama.cpp says how many it needs

    def render_chat(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        if not self.chat_template:
            raise ValueError("this GGUF holds no chat template")
        return _render(self.chat_template, messages, add_generation_prompt, self._special_text("eos"), self._special_text("bos"))

    def text(self, token_id: int) -> str:
        return self._piece(token_id, special=True).decode("utf-8", errors="replace")

    def decode(self, token_ids: list[int]) -> str:
        return b"".join(self._piece(t, special=False) for t in token_ids).decode("utf-8", errors="replace")

    def vocab(self) -> dict[str, int]:
        return {
            llama.llama_vocab_get_text(self.vocab_handle, i).decode("utf-8", errors="replace"): i
            for i in range(self.model.n_vocab)
        }

    def _piece(self, token_id: int, special: bool) -> bytes:
        buffer = ctypes.create_string_buffer(64)
        count = llama.llama_token_to_piece(self.vocab_handle, token_id, buffer, len(buffer), 0, special)
        if count < 0:
            buffer = ctypes.create_string_buffer(-count)
            count = llama.llama_token_to_piece(self.vocab_handle, token_id, buffer, len(buffer), 0, special)
        return buffer.raw[:count]

    def _special_text(self, which: str) -> str:
        token = {"eos": llama.llama_vocab_eos, "bos": llama.llama_vocab_bos}[which](self.vocab_handle)
        return self._piece(token, special=True).decode("utf-8", errors="replace") if token >= 0 else ""


def _render(template: str, messages: list[dict[str, str]], add_generation_prompt: bool, eos: str, bos: str) -> str:
    """A chat template rendered as transformers renders it: a sandboxed Jinja2 environment with its settings."""
    return _compiled(template).render(
        messages=messages, add_generation_prompt=add_generation_prompt, eos_token=eos, bos_token=bos
    )


@functools.lru_cache(maxsize=8)
def _compiled(template: str):
    """A chat template compiled once: compiling takes milliseconds, and every request renders one (a class, a hundred)."""
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise ValueError(message)

    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    environment.globals["raise_exception"] = raise_exception
    return environment.from_string(template)


# --- how far the pass's shape moves a logit ---------------------------------------------------------------


CALIBRATION_TEXT = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "def total(a, b):\n    return a + b  # 72 clips"
)
CALIBRATION_WIDTH = 5  # tokens per pass in the wider shape: a verify pass at the default k = 4
CALIBRATION_ROWS = 4  # rows sharing a 1-token pass in the batched shape


def measure_shift(model: LlamaModel, tokenizer: LlamaTokenizer, positions: int = 8) -> float:
    """The largest change of any logit at `positions` positions of a calibration text between the pass shapes
    the loop uses: 1 token per pass alone (the reference), CALIBRATION_WIDTH tokens per pass, and 1 token
    per pass beside CALIBRATION_ROWS − 1 other rows."""
    tokens = tokenizer.encode(CALIBRATION_TEXT)[: positions + 8]
    prefix, scored = tokens[:8], tokens[8:]
    alone = _pass_logits(model, prefix, scored, width=1)
    wide = _pass_logits(model, prefix, scored, width=CALIBRATION_WIDTH)
    shared = _pass_logits(model, prefix, scored, width=1, rows=CALIBRATION_ROWS)
    return float(max((wide - alone).abs().max(), (shared - alone).abs().max()))


def _pass_logits(model: LlamaModel, prefix: list[int], scored: list[int], width: int, rows: int = 1) -> torch.Tensor:
    """Logits predicting each of `scored` after `prefix`, fed `width` tokens a pass, in row 0 of `rows` identical rows.  -> [len(scored), V]"""
    caches = model.caches(model.n_vocab)
    for _ in range(rows):
        caches.add_row(prefix[:-1], len(prefix) + len(scored))
    out = []
    for fed in range(0, len(scored), width):  # `fed` scored tokens were in the sequence before this pass
        count = min(width, len(scored) - fed)
        sequence = prefix + scored[: fed + count - 1]
        out.append(caches.logits(dict.fromkeys(range(rows), sequence), dict.fromkeys(range(rows), count))[0])
    return torch.cat(out)


# --- a pair of GGUF files ---------------------------------------------------------------------------------


def load_llama_pair(
    draft_path: Path, target_path: Path, note: str = "", shifts: ShiftCache | None = None, names: tuple[str, str] | None = None
) -> ModelPair:
    """Two .gguf files on llama.cpp, paired after checking their tokenizers agree (named by their file names
    unless `names` are given); each model's logit shift between pass shapes measured (or read from `shifts`)."""
    configure_threads()
    for role, path in (("--draft", draft_path), ("--target", target_path)):
        if not path.is_file():
            raise ModelLoadError(f"{role}: {path} does not exist; llama.cpp reads .gguf files")
    models = []
    for role, path, name in zip(("--draft", "--target"), (draft_path, target_path), names or (draft_path.name, target_path.name)):
        try:
            models.append(LlamaModel(path, name))
        except ValueError as err:
            raise ModelLoadError(f"{role}: {err}") from None
    draft, target = models
    draft_tokenizer, tokenizer = LlamaTokenizer(draft), LlamaTokenizer(target)
    check_same_tokenizer(draft_tokenizer, tokenizer)
    shifts = shifts or ShiftCache()
    for model, model_tokenizer in ((draft, draft_tokenizer), (target, tokenizer)):
        model.shift = shifts.get(model, lambda m=model, t=model_tokenizer: measure_shift(m, t))
    return ModelPair(
        draft=draft,
        target=target,
        tokenizer=tokenizer,
        draft_name=draft.name,
        target_name=target.name,
        vocab_size=min(draft.n_vocab, target.n_vocab),
        eos_ids=tokenizer.eos_ids,
        context_length=min(draft.context_length, target.context_length),
        note=note,
        info={
            "dtype": target.dtype,
            "backend": "llama.cpp",
            "llama_cpp": llama.__version__,
            "llama_kernels": KERNELS,
            "llama_cpu": cpu_features(),  # which of llama.cpp's kernels this CPU ran (docs/method.md, the builds)
            "draft_logit_shift": draft.shift,
            "target_logit_shift": target.shift,
        },
    )


SHIFT_CACHED_BYTES = 64 * 2**20  # smaller models are measured in a blink; their figures are not kept


class ShiftCache:
    """Each GGUF's measured logit shift (`measure_shift`), kept in a file so that a model is measured once.

    Keyed by the file (path, size, modification time), llama-cpp-python's version and the CPU
    features it runs with, since each can change the kernels and so the figure.
    """

    def __init__(self, path: Path | None = None):
        self.path = path

    def get(self, model: LlamaModel, measure: Callable[[], float]) -> float:
        stat = model.path.stat()
        system = llama.llama_print_system_info().decode()
        key = f"{model.path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{llama.__version__}|{KERNELS}|{system}"
        known = self._read()
        if key not in known:
            known[key] = measure()
            if self.path is not None and stat.st_size >= SHIFT_CACHED_BYTES:
                write_text_whole(self.path, json.dumps(known, indent=1))  # a process reading it finds the old or the new
        return float(known[key])

    def _read(self) -> dict:
        try:
            return json.loads(self.path.read_text()) if self.path is not None else {}
        except (OSError, ValueError):
            return {}
