"""Loading a draft/target pair on a backend, and checking that the two can be compared token by token.

A model reference is a local Hugging Face folder, a `.gguf` file, or a hub id. `Runtime` says how
the weights run. The llama.cpp backend reads .gguf files as they are (quantized, fast on a CPU);
the transformers backend reads all three, unpacking a GGUF's weights to float (exact in float32,
and the one for GPUs). `--backend auto` picks llama.cpp for a pair of .gguf files on a CPU, unless
llama-cpp-python is missing (then it says so in the pair's note) or --dtype or --int8 ask for
transformers; transformers otherwise.

Hub ids are tried offline first (the local hub cache), and the hub is only contacted after a
quick reachability probe, so a machine without network fails in seconds instead of retrying for
half a minute. `trust_remote_code` is never enabled.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import socket
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import torch

from ..core.pair import ModelPair
from ..errors import ModelLoadError

if TYPE_CHECKING:  # transformers is imported where a transformers model loads: a llama.cpp start skips its 2 s of imports
    from ..backends.transformers import HFModel

BACKENDS = ("auto", "llama.cpp", "transformers")
DTYPES = ("auto", "float32", "bfloat16")
INT8 = ("none", "draft", "target", "both")
HUB_PROBE_SECONDS = 3.0  # long enough for a real connection, short enough to fail fast offline
NO_LLAMA_CPP = (
    "llama-cpp-python is not installed, so this GGUF pair runs on transformers, slower: pip install -r requirements.txt"
)


@dataclass(frozen=True)
class Runtime:
    """How a pair's weights run: the backend, and for transformers the dtype, device and int8 layers.

    Every command that loads a pair takes these as --backend, --dtype and --int8 (easd.cli), and
    an lm-eval or Ray run passes them whole to wherever the pair loads.
    """

    backend: str = "auto"  # auto | llama.cpp | transformers
    dtype: str = "auto"  # transformers: auto (bfloat16 where the hardware does it natively) | float32 | bfloat16
    int8: str = "none"  # transformers on a CPU: none | draft | target | both
    device: str | None = None  # transformers: None means cuda when there is one

    def checked(self) -> Runtime:
        """Itself, or ModelLoadError naming the flag that is out of its choices or cannot go with the backend."""
        for flag, value, choices in (
            ("--backend", self.backend, BACKENDS),
            ("--dtype", self.dtype, DTYPES),
            ("--int8", self.int8, INT8),
        ):
            if value not in choices:
                raise ModelLoadError(f"{flag}: must be one of {', '.join(choices)} (got {value!r})")
        if self.backend == "llama.cpp" and (self.dtype != "auto" or self.int8 != "none"):
            flag = "--dtype" if self.dtype != "auto" else "--int8"
            raise ModelLoadError(
                f"{flag}: llama.cpp runs a GGUF's own quantized weights; drop {flag}, or use --backend transformers"
            )
        return self

    def resolve(self, gguf: bool) -> tuple[str, str]:
        """(the backend that runs a pair of these files, a note when `auto` could not take llama.cpp)."""
        if self.backend != "auto":
            return self.backend, ""
        wants_transformers = self.dtype != "auto" or self.int8 != "none" or (self.device or default_device()) != "cpu"
        if not gguf or wants_transformers:
            return "transformers", ""
        return ("llama.cpp", "") if llama_cpp_installed() else ("transformers", NO_LLAMA_CPP)


DEFAULT = Runtime()  # auto backend, auto dtype, no int8


def llama_cpp_installed() -> bool:
    return importlib.util.find_spec("llama_cpp") is not None


# --- the machine --------------------------------------------------------------------------------


def configure_threads() -> int:
    """Use every core this process may run on (containers often report the host's count),
    unless the user set OMP_NUM_THREADS. One inter-op thread: batch-1 decoding has no
    independent operators to overlap, and extra threads only contend on 2 cores."""
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(len(os.sched_getaffinity(0)))
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set, or parallel work already started: keep what is there
        pass
    return torch.get_num_threads()


def resolve_dtype(name: str, device: str = "cpu") -> torch.dtype:
    """auto → bfloat16 where the hardware does it natively (CUDA, or CPUs with AVX512-BF16/AMX), else float32."""
    if name not in DTYPES:
        raise ModelLoadError(f"--dtype: must be one of {', '.join(DTYPES)} (got {name!r})")
    if name != "auto":
        return getattr(torch, name)
    return torch.bfloat16 if _native_bf16(device) else torch.float32


def _native_bf16(device: str) -> bool:
    if device.startswith("cuda"):
        return torch.cuda.is_bf16_supported()
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


# --- loading ------------------------------------------------------------------------------------


def load_pair(draft_ref: str, target_ref: str, runtime: Runtime = DEFAULT) -> ModelPair:
    """Load two models by reference on the runtime's backend and check that they can be paired."""
    runtime = runtime.checked()
    backend, note = runtime.resolve(gguf=all(str(ref).endswith(".gguf") for ref in (draft_ref, target_ref)))
    if backend == "llama.cpp":
        from .packaged import cache_root

        paths = (Path(draft_ref).expanduser(), Path(target_ref).expanduser())
        return load_llama_pair(*paths, note=note, shifts=ShiftCache(cache_root() / SHIFTS_FILE))
    configure_threads()
    device = runtime.device or default_device()
    torch_dtype = resolve_dtype(runtime.dtype, device)
    draft, draft_tokenizer = load_model(draft_ref, torch_dtype, device, role="--draft")
    target, target_tokenizer = load_model(target_ref, torch_dtype, device, role="--target")
    pair = make_pair(draft, target, draft_tokenizer, target_tokenizer, _short_name(draft_ref), _short_name(target_ref), note)
    return with_int8(pair, runtime.int8)


def make_pair(draft, target, draft_tokenizer, target_tokenizer, draft_name: str, target_name: str, note: str = "") -> ModelPair:
    """Pair two loaded transformers models after checking their tokenizers agree."""
    from ..backends.transformers import HFModel, HFTokenizer

    tokenizer = HFTokenizer(target_tokenizer)
    check_same_tokenizer(HFTokenizer(draft_tokenizer), tokenizer)
    vocab_size = min(draft.get_input_embeddings().num_embeddings, target.get_input_embeddings().num_embeddings)
    return ModelPair(
        draft=HFModel(draft.eval(), draft_name, tokenizer.pad_id),
        target=HFModel(target.eval(), target_name, tokenizer.pad_id),
        tokenizer=tokenizer,
        draft_name=draft_name,
        target_name=target_name,
        vocab_size=vocab_size,
        eos_ids=_eos_ids(target, target_tokenizer),
        context_length=min(_context_length(draft), _context_length(target)),
        note=note,
        info={
            "draft_revision": _revision(draft),
            "target_revision": _revision(target),
            "dtype": str(target.dtype),
            "backend": "transformers",
        },
    )


def load_llama_pair(
    draft_path: Path, target_path: Path, note: str = "", shifts: ShiftCache | None = None, names: tuple[str, str] | None = None
) -> ModelPair:
    """Two .gguf files on llama.cpp, paired after checking their tokenizers agree (named by their file names
    unless `names` are given); each model's logit shift between pass shapes measured (or read from `shifts`)."""
    from ..backends import llamacpp

    configure_threads()
    for role, path in (("--draft", draft_path), ("--target", target_path)):
        if not path.is_file():
            raise ModelLoadError(f"{role}: {path} does not exist; llama.cpp reads .gguf files")
    models = []
    for role, path, name in zip(("--draft", "--target"), (draft_path, target_path), names or (draft_path.name, target_path.name)):
        try:
            models.append(llamacpp.LlamaModel(path, name))
        except ValueError as err:
            raise ModelLoadError(f"{role}: {err}") from None
    draft, target = models
    draft_tokenizer, tokenizer = llamacpp.LlamaTokenizer(draft), llamacpp.LlamaTokenizer(target)
    check_same_tokenizer(draft_tokenizer, tokenizer)
    shifts = shifts or ShiftCache()
    for model, model_tokenizer in ((draft, draft_tokenizer), (target, tokenizer)):
        model.shift = shifts.get(model, lambda m=model, t=model_tokenizer: llamacpp.measure_shift(m, t))
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
            "llama_cpp": llamacpp.llama.__version__,
            "llama_kernels": llamacpp.KERNELS,
            "draft_logit_shift": draft.shift,
            "target_logit_shift": target.shift,
        },
    )


SHIFTS_FILE = "llama-shifts.json"  # in the cache root: each GGUF's measured logit shift
SHIFT_CACHED_BYTES = 64 * 2**20  # smaller models are measured in a blink; their figures are not kept


class ShiftCache:
    """Each GGUF's measured logit shift (llamacpp.measure_shift), kept in a file so that a model is measured once.

    Keyed by the file (path, size, modification time), llama-cpp-python's version and the CPU
    features it runs with, since each can change the kernels and so the figure.
    """

    def __init__(self, path: Path | None = None):
        self.path = path

    def get(self, model, measure) -> float:
        import json

        from ..backends.llamacpp import llama
        from .packaged import temporary_path

        stat = model.path.stat()
        from ..backends.llamacpp import KERNELS

        system = llama.llama_print_system_info().decode()
        key = f"{model.path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{llama.__version__}|{KERNELS}|{system}"
        known = self._read()
        if key not in known:
            known[key] = measure()
            if self.path is not None and stat.st_size >= SHIFT_CACHED_BYTES:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                # written aside and renamed, so a process reading it at the same time finds the old file or the new one
                written = temporary_path(self.path)
                written.write_text(json.dumps(known, indent=1))
                os.replace(written, self.path)
        return float(known[key])

    def _read(self) -> dict:
        import json

        try:
            return json.loads(self.path.read_text()) if self.path is not None else {}
        except (OSError, ValueError):
            return {}


def load_model(ref: str, dtype: torch.dtype, device: str, role: str):
    """(model, tokenizer) from a local folder, a .gguf file or a hub id."""
    path = Path(ref).expanduser()
    if _looks_like_path(ref):
        if not path.exists():
            raise ModelLoadError(f"{role}: {ref} does not exist; give a model folder, a .gguf file or a hub id")
        return _load_local(path, dtype, device, role)
    return _load_hub(ref, dtype, device, role)


def _looks_like_path(ref: str) -> bool:
    """Hub ids look like `owner/name` (or a bare `name`); anything else is a file or folder."""
    return Path(ref).expanduser().exists() or ref.startswith((".", "/", "~")) or ref.count("/") > 1 or ref.endswith(".gguf")


def _load_local(path: Path, dtype: torch.dtype, device: str, role: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, gguf = (path.parent, {"gguf_file": path.name}) if path.is_file() else (path, {})
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=False, **gguf)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, trust_remote_code=False, **gguf)
    except (OSError, ValueError, KeyError) as err:
        raise ModelLoadError(f"{role}: could not load {path}: {_first_line(err)}") from None
    return model.to(device), tokenizer


def _load_hub(repo_id: str, dtype: torch.dtype, device: str, role: str):
    """Try the local hub cache first; contact the hub only if it answers within seconds."""
    try:
        return _from_hub(repo_id, dtype, device, local_files_only=True)
    except OSError:
        pass
    if not hub_reachable():
        raise ModelLoadError(
            f"{role}: {repo_id} is not in the local cache and the Hugging Face hub cannot be reached "
            "(no network?); use the offline pair `--pair qwen-coder`, or `--pair tiny-random` for a quick test"
        )
    try:
        return _from_hub(repo_id, dtype, device, local_files_only=False)
    except (OSError, ValueError) as err:
        raise ModelLoadError(f"{role}: could not load {repo_id} from the hub: {_first_line(err)}") from None


def _from_hub(repo_id: str, dtype: torch.dtype, device: str, local_files_only: bool):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    common = {"trust_remote_code": False, "local_files_only": local_files_only}
    tokenizer = AutoTokenizer.from_pretrained(repo_id, **common)
    model = AutoModelForCausalLM.from_pretrained(repo_id, dtype=dtype, **common)
    return model.to(device), tokenizer


def hub_reachable(timeout: float = HUB_PROBE_SECONDS) -> bool:
    """A TCP connection to the hub's host within `timeout` seconds (DNS failure returns at once)."""
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
        return False
    from huggingface_hub import constants

    url = urlsplit(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=timeout).close()
        return True
    except OSError:
        return False


# --- int8 ---------------------------------------------------------------------------------------


def with_int8(pair: ModelPair, which: str) -> ModelPair:
    """Quantize the draft, the target or both to dynamic int8 (CPU only).

    A quantized draft only changes which tokens get proposed: SD still emits exactly the
    target's distribution, just with a different acceptance rate. A quantized target *is* a
    different model, so its outputs differ from the unquantized target's.
    """
    if which not in INT8:
        raise ModelLoadError(f"--int8: must be one of {', '.join(INT8)} (got {which!r})")
    if which == "none":
        return pair
    if pair.backend != "transformers":
        raise ModelLoadError("--int8: quantizes transformers models; llama.cpp runs the GGUF's own quantization")
    if pair.device.type != "cpu":
        raise ModelLoadError("--int8: dynamic int8 quantization runs on the CPU only; drop --int8 on a GPU")
    draft = _int8(pair.draft) if which in ("draft", "both") else pair.draft
    target = _int8(pair.target) if which in ("target", "both") else pair.target
    names = {
        "draft_name": pair.draft_name + (" [int8]" if draft is not pair.draft else ""),
        "target_name": pair.target_name + (" [int8]" if target is not pair.target else ""),
    }
    return dataclasses.replace(pair, draft=draft, target=target, info={**pair.info, "int8": which}, **names)


def _int8(model: HFModel) -> HFModel:
    """Every Linear layer to int8 weights with float32 activations (what quantize_dynamic supports)."""
    from ..backends.transformers import HFModel

    with warnings.catch_warnings():  # torch warns that the quantized tensor API will move; it works in 2.13
        warnings.simplefilter("ignore")
        module = torch.ao.quantization.quantize_dynamic(model.module.float(), {torch.nn.Linear}, dtype=torch.qint8)
    return HFModel(module, model.name + " [int8]", model.pad_id)


# --- pairing checks -----------------------------------------------------------------------------


def check_same_tokenizer(draft_tokenizer, target_tokenizer) -> None:
    """Refuse a pair whose tokenizers map some string to different ids, naming the first one."""
    draft_vocab, target_vocab = draft_tokenizer.vocab(), target_tokenizer.vocab()
    for token, token_id in sorted(target_vocab.items(), key=lambda item: item[1]):
        if draft_vocab.get(token) != token_id:
            where = "is missing" if token not in draft_vocab else f"is id {draft_vocab[token]}"
            raise ModelLoadError(
                f"the tokenizers differ: {token!r} is id {token_id} in the target but {where} in the draft; "
                "speculative decoding needs a draft and target with the same tokenizer (e.g. one model family)"
            )
    extra = sorted(set(draft_vocab) - set(target_vocab), key=draft_vocab.get)
    if extra:
        raise ModelLoadError(
            f"the tokenizers differ: {extra[0]!r} (id {draft_vocab[extra[0]]}) exists in the draft but not in the target; "
            "speculative decoding needs a draft and target with the same tokenizer"
        )


def _eos_ids(model, tokenizer) -> frozenset[int]:
    ids = model.generation_config.eos_token_id if model.generation_config is not None else None
    ids = [ids] if isinstance(ids, int) else list(ids or [])
    if tokenizer.eos_token_id is not None:
        ids.append(tokenizer.eos_token_id)
    return frozenset(ids)


def _context_length(model) -> int:
    return int(getattr(model.config, "max_position_embeddings", None) or 2048)


def _revision(model) -> str:
    return str(getattr(model.config, "_commit_hash", None) or "")


def _short_name(ref: str) -> str:
    return Path(ref).name if _looks_like_path(ref) else ref


def _first_line(err: Exception) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]
