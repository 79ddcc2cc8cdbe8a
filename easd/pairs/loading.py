"""Which runtime runs a draft/target pair, and how each model reference becomes a loaded model.

Each runtime loads and pairs its own models (easd.backends.llamacpp.load_llama_pair,
easd.backends.transformers.make_pair); this module chooses the runtime and finds the files. A model reference is a local Hugging Face folder, a `.gguf` file, or a hub id. `Runtime` says how
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
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import torch

from ..backends import BACKENDS, DTYPES, INT8, configure_threads
from ..errors import ModelLoadError
from ..method.pair import ModelPair, PairLoader

# Each runtime's module is imported where a pair of its models loads: a llama.cpp start skips
# transformers' 2 s of imports, and a machine without llama-cpp-python still runs transformers.
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


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


# --- loading ------------------------------------------------------------------------------------


def load_pair(draft_ref: str, target_ref: str, runtime: Runtime = DEFAULT) -> ModelPair:
    """Load two models by reference on the runtime's backend and check that they can be paired."""
    runtime = runtime.checked()
    backend, note = runtime.resolve(gguf=all(str(ref).endswith(".gguf") for ref in (draft_ref, target_ref)))
    if backend == "llama.cpp":
        from ..backends.llamacpp import ShiftCache, load_llama_pair
        from .packaged import cache_root

        paths = (Path(draft_ref).expanduser(), Path(target_ref).expanduser())
        return load_llama_pair(*paths, note=note, shifts=ShiftCache(cache_root() / SHIFTS_FILE))
    from ..backends.transformers import make_pair, resolve_dtype, with_int8

    configure_threads()
    device = runtime.device or default_device()
    torch_dtype = resolve_dtype(runtime.dtype, device)
    draft, draft_tokenizer = load_model(draft_ref, torch_dtype, device, role="--draft")
    target, target_tokenizer = load_model(target_ref, torch_dtype, device, role="--target")
    pair = make_pair(draft, target, draft_tokenizer, target_tokenizer, _short_name(draft_ref), _short_name(target_ref), note)
    return with_int8(pair, runtime.int8)


SHIFTS_FILE = "llama-shifts.json"  # in the cache root: each GGUF's measured logit shift (llamacpp.ShiftCache)


def load_model(ref: str, dtype: torch.dtype, device: str, role: str):
    """(model, tokenizer) on transformers from a local folder, a .gguf file or a hub id; ModelLoadError naming `role`."""
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
    from ..backends.transformers import from_pretrained

    folder, gguf = (path.parent, {"gguf_file": path.name}) if path.is_file() else (path, {})
    try:
        return from_pretrained(folder, dtype, device, **gguf)
    except (OSError, ValueError, KeyError) as err:
        raise ModelLoadError(f"{role}: could not load {path}: {_first_line(err)}") from None


def _load_hub(repo_id: str, dtype: torch.dtype, device: str, role: str):
    """Try the local hub cache first; contact the hub only if it answers within seconds."""
    from ..backends.transformers import from_pretrained

    try:
        return from_pretrained(repo_id, dtype, device, local_files_only=True)
    except OSError:
        pass
    if not hub_reachable():
        raise ModelLoadError(
            f"{role}: {repo_id} is not in the local cache and the Hugging Face hub cannot be reached "
            "(no network?); use the offline pair `--pair qwen-coder`, or `--pair tiny-random` for a quick test"
        )
    try:
        return from_pretrained(repo_id, dtype, device, local_files_only=False)
    except (OSError, ValueError) as err:
        raise ModelLoadError(f"{role}: could not load {repo_id} from the hub: {_first_line(err)}") from None


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


def _short_name(ref: str) -> str:
    return Path(ref).name if _looks_like_path(ref) else ref


def _first_line(err: Exception) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def with_prm(pair: ModelPair, ref: str | None, runtime: Runtime = DEFAULT) -> ModelPair:
    """The pair with the process reward model `ref` loaded for RSD (`--prm`); the pair itself when `ref` is None."""
    return pair if ref is None else dataclasses.replace(pair, prm=load_prm(ref, runtime))


def loaded_with_prm(load: PairLoader, ref: str | None, runtime: Runtime = DEFAULT) -> ModelPair:
    """`load()`'s pair with RSD's process reward model `ref` (None: none); module-level, so a partial of it pickles."""
    return with_prm(load(), ref, runtime)


def load_prm(ref: str, runtime: Runtime = DEFAULT):
    """The process reward model RSD asks (`--prm`): a local folder, or a hub id from the local cache or the hub. It runs
    on transformers whatever the pair's backend (easd.backends.prm)."""
    from ..backends.prm import load_prm_folder
    from ..backends.transformers import resolve_dtype

    path = Path(ref).expanduser()
    if not _looks_like_path(ref):
        path = _hub_folder(ref)
    elif not path.is_dir():
        raise ModelLoadError(f"--prm: {ref} is not a folder; give a PRM's folder (config, tokenizer, safetensors) or a hub id")
    device = runtime.device or default_device()
    return load_prm_folder(
        path, resolve_dtype(runtime.dtype if runtime.backend == "transformers" else "auto", device), device, _short_name(ref)
    )


def _hub_folder(repo_id: str) -> Path:
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except Exception:  # noqa: BLE001 (not in the local cache, in any of the ways huggingface_hub says so)
        pass
    if not hub_reachable():
        raise ModelLoadError(
            f"--prm: {repo_id} is not in the local cache and the Hugging Face hub cannot be reached (no network?)"
        )
    try:
        return Path(snapshot_download(repo_id))
    except Exception as err:  # noqa: BLE001 (a hub error, told in one line)
        raise ModelLoadError(f"--prm: could not download {repo_id}: {_first_line(err)}") from None
