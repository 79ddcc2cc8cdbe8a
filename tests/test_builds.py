"""`python -m tools.builds`: llama.cpp builds and kernel switches timed against each other, one process per variant,
on the tiny pair; and the refusal that stands in for a crash of llama.cpp's AMX kernels."""

import subprocess
import sys

import pytest

from easd.backends import llamacpp

TOOL = [sys.executable, "-m", "tools.builds", "--pair", "tiny-random", "--prompts", "1", "--max-new-tokens", "8"]


@pytest.mark.slow  # four processes, each importing torch and loading the tiny pair: about 30 s
def test_two_kernel_switches_run_interleaved_and_report_medians_ratios_and_exactness():
    done = subprocess.run(
        [*TOOL, "--variant", "exact=", "--variant", "fast=EASD_LLAMA_KERNELS=fast", "--repeats", "2"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    # rotating order: exact then fast, then fast then exact
    order = [line.split(": ")[1].split()[0] for line in out.splitlines() if line.startswith("repetition")]
    assert order == ["exact", "fast", "fast", "exact"]
    assert "(kernels: exact)" in out and "(kernels: fast)" in out and "AVX2 = 1" in out
    assert "target  ÷ exact" in out and "sd      ÷ exact" in out and "over 2 repetitions" in out
    assert out.count("greedy SD equalled target-only in 2 of 2 processes") >= 1  # exact mode: always


@pytest.mark.slow  # two processes of its own (the tool and its variant's), each importing torch
def test_a_variant_whose_process_fails_is_named_with_how_it_ended():
    done = subprocess.run(
        [*TOOL, "--variant", "wrong=EASD_LLAMA_KERNELS=wrong", "--repeats", "1"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 1
    assert (
        "wrong: its process ended with exit status 1" in done.stderr and "EASD_LLAMA_KERNELS must be exact or fast" in done.stderr
    )


def test_the_pinned_build_is_the_portable_one():
    """requirements.txt builds llama.cpp with GGML_NATIVE=OFF: AVX2 kernels, which any x86-64 CPU with AVX2 runs, and
    none of AVX-512 or AMX even on a CPU that has them (docs/method.md: the all-CPUs build, measured, not adopted).
    So the AMX kernels' crash (easd.backends.llamacpp.AMX_CRASHES) cannot happen in it, and fast mode is allowed."""
    features = llamacpp.cpu_features()
    assert features.startswith("CPU : ") and "AVX2 = 1" in features
    assert "AVX512 = 1" not in features and not llamacpp.amx_kernels()
