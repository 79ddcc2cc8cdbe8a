"""The two runtimes behind the seam of easd.method.seam: transformers (PyTorch) and llama.cpp (GGUF).

Each module implements `Model`, `Caches` and `Tokenizer` for its runtime, and loads a pair of its
own models (`llamacpp.load_llama_pair`, `transformers.make_pair`). Which runtime runs a pair, and
how a reference (folder, .gguf file, hub id, named pair) becomes files, is easd.pairs' business.
Here: the choices both runtimes are described by, and the threads they run on. Rule checked by
tests/test_layout.py: nothing here imports `easd.pairs`, `easd.lab`, `easd.cli` or the UI.
"""

from __future__ import annotations

import os

import torch

BACKENDS = ("auto", "llama.cpp", "transformers")
DTYPES = ("auto", "float32", "bfloat16")  # transformers' weights: auto is bfloat16 where the hardware does it natively
INT8 = ("none", "draft", "target", "both")  # transformers on a CPU: which models take dynamic int8 weights


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
