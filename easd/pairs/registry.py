"""Named model pairs: what `--pair NAME` means, which is the default, and which can load here."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch

from ..errors import ModelLoadError
from .loading import DEFAULT, ModelPair, Runtime, hub_reachable, llama_cpp_installed, load_pair


@dataclass(frozen=True)
class PairSpec:
    name: str
    draft: str
    target: str
    about: str  # one line for `pairs` and --help
    size: str  # what the weights weigh on disk or over the network
    memory: str  # what a normal start needs (measured where we could, see docs/benchmarks.md)
    load: Callable[[Runtime], ModelPair]  # how the weights run -> the loaded pair
    available: Callable[[], tuple[bool, str]]  # can it load on this machine now, and why (not)


# --- the loaders --------------------------------------------------------------------------------


def _tiny(runtime: Runtime) -> ModelPair:
    from .tiny import load_tiny_pair

    return load_tiny_pair(runtime)


def _qwen_coder(runtime: Runtime) -> ModelPair:
    """llama.cpp reads the joined GGUF files as they are; transformers their converted folders."""
    from .packaged import DRAFT, TARGET, converted_folder, gguf_file

    backend, note = runtime.checked().resolve(gguf=True)
    specs = (DRAFT, TARGET)
    if backend == "llama.cpp":  # joining is reading, hashing and writing, which free the GIL: both files at once
        with ThreadPoolExecutor(len(specs)) as pool:
            files = list(pool.map(gguf_file, specs))
    else:  # a conversion holds a whole model in memory: one at a time
        files = [converted_folder(spec) for spec in specs]
    pair = load_pair(str(files[0]), str(files[1]), dataclasses.replace(runtime, backend=backend))
    # Upstream Qwen stops at <|im_end|> and at <|endoftext|>; the GGUF records only the first,
    # and raw-text (--no-chat) prompts end with the second.
    (end_of_text,) = pair.tokenizer.encode("<|endoftext|>")
    return dataclasses.replace(
        pair, draft_name=DRAFT.name, target_name=TARGET.name, eos_ids=pair.eos_ids | {end_of_text}, note=note or pair.note
    )


def _hub(draft: str, target: str) -> Callable[[Runtime], ModelPair]:
    return lambda runtime: load_pair(draft, target, runtime)


# --- availability -------------------------------------------------------------------------------


def _always() -> tuple[bool, str]:
    return True, "built locally"


def _packaged() -> tuple[bool, str]:
    from .packaged import DRAFT, TARGET, installed

    if not (installed(DRAFT) and installed(TARGET)):
        return False, "part packages not installed: pip install -r requirements.txt"
    if llama_cpp_installed():
        return True, "installed; llama.cpp runs it as shipped (the first start joins its parts, seconds)"
    return True, "installed; llama-cpp-python is missing, so transformers converts it on the first start (about 3 min)"


def _on_hub(draft: str, target: str, gpu: bool) -> Callable[[], tuple[bool, str]]:
    def check() -> tuple[bool, str]:
        if gpu and not torch.cuda.is_available():
            return False, "needs a GPU"
        if _hub_cached(draft) and _hub_cached(target):
            return True, "in the local hub cache"
        return (True, "downloads from the hub") if hub_reachable() else (False, "not cached, and the hub cannot be reached")

    return check


def _hub_cached(repo_id: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)


# --- the registry -------------------------------------------------------------------------------

_QWEN_05, _QWEN_15, _QWEN_7 = "Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-7B-Instruct"
_R1_15, _R1_7 = "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B"

PAIRS: dict[str, PairSpec] = {
    spec.name: spec
    for spec in (
        PairSpec(
            "qwen-coder",
            "Qwen2.5-Coder-0.5B-Instruct",
            "Qwen2.5-Coder-1.5B-Instruct",
            "the embedded default: 4-bit GGUF files from PyPI part packages, offline, CPU",
            "1.6 GB of packages, joined once into 1.6 GB in the cache; transformers adds a 4.6 GB converted cache",
            "llama.cpp: under 3 GB; transformers: 4.6 GB in bfloat16, 13.6 GB in float32",
            _qwen_coder,
            _packaged,
        ),
        PairSpec(
            "tiny-random",
            "tiny-random-draft",
            "tiny-random-target",
            "two tiny random Qwen2 models built in a second; gibberish text, for tests and demos",
            "none",
            "under 0.5 GB RAM",
            _tiny,
            _always,
        ),
        PairSpec(
            "qwen2.5",
            _QWEN_05,
            _QWEN_15,
            "Qwen2.5 instruct models from the hub, CPU",
            "4 GB download",
            "about 5 GB RAM (bfloat16)",
            _hub(_QWEN_05, _QWEN_15),
            _on_hub(_QWEN_05, _QWEN_15, gpu=False),
        ),
        PairSpec(
            "qwen2.5-7b",
            _QWEN_15,
            _QWEN_7,
            "Qwen2.5 1.5B → 7B from the hub, GPU",
            "18 GB download",
            "about 19 GB GPU memory (bfloat16)",
            _hub(_QWEN_15, _QWEN_7),
            _on_hub(_QWEN_15, _QWEN_7, gpu=True),
        ),
        PairSpec(
            "r1-distill",
            _R1_15,
            _R1_7,
            "DeepSeek-R1-Distill-Qwen 1.5B → 7B from the hub, GPU",
            "19 GB download",
            "about 19 GB GPU memory (bfloat16)",
            _hub(_R1_15, _R1_7),
            _on_hub(_R1_15, _R1_7, gpu=True),
        ),
    )
}


def default_pair_name() -> str:
    """The embedded real pair when its packages are installed, else the tiny random pair."""
    return "qwen-coder" if PAIRS["qwen-coder"].available()[0] else "tiny-random"


def load_named_pair(name: str, runtime: Runtime = DEFAULT) -> ModelPair:
    if name not in PAIRS:
        raise ModelLoadError(f"--pair: unknown pair {name!r}; choose one of {', '.join(PAIRS)} (see `python -m easd pairs`)")
    return PAIRS[name].load(runtime.checked())


def pairs_table() -> list[dict]:
    """Every named pair with its size, memory and whether it can load here now."""
    rows = []
    for spec in PAIRS.values():
        ok, why = spec.available()
        rows.append(
            {
                "pair": spec.name,
                "draft → target": f"{spec.draft} → {spec.target}",
                "size": spec.size,
                "memory": spec.memory,
                "available": "yes" if ok else "no",
                "why": why,
                "about": spec.about,
            }
        )
    return rows
