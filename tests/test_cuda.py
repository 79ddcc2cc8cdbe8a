"""The GPU path on a CUDA GPU: the device check (scripts/device-check.sh) runs these, marked `cuda`; they skip, saying
so, on a machine without CUDA. What the CPU can check of the same code (batching, chunks, float32 signals) is checked
on the CPU elsewhere (test_batch.py, test_chunks.py, test_fragility.py); here it runs on CUDA, where the kernels,
the padding's effect on bfloat16 and the memory are the GPU's own. Figures are printed for the device check's report.
Where CUDA is missing, the one test that runs is the device check's own: it must say so in one line and fail.
"""

import subprocess
from pathlib import Path

import pytest
import torch

from easd.method.generation import Generation
from easd.method.seam import row_bytes
from easd.method.settings import DecodeSettings
from easd.method.step import Batch
from easd.pairs.loading import Runtime
from easd.pairs.registry import load_named_pair
from easd.pairs.tiny import load_tiny_pair
from easd.serving.chunks import GenerationSnapshot, catch_up, decode_chunk

ROOT = Path(__file__).resolve().parent.parent
CUDA = torch.cuda.is_available()
on_cuda = pytest.mark.skipif(not CUDA, reason="no CUDA GPU here: the device check runs these on one")

PROMPTS = ["Tom has 3 apples and buys 5 more.", "def add(a, b):", "The answer is", "Once upon a time"]
APP_ROW_TOKENS = 2048 + 512  # a row's room in the app (easd.serving.host: PROMPT_TOKENS + the default token cap)


def problems(count: int) -> list[str]:
    """Small grade-school problems made here (the device has no dataset)."""
    return [
        f"A shop sells {a} boxes of {b} pencils and then {c} more pencils. How many pencils does it sell? "
        "Think step by step, then give the number."
        for a, b, c in ((3 + i, 4 + i % 5, 7 * i + 2) for i in range(count))
    ]


@pytest.fixture(scope="module")
def tiny32():
    return load_tiny_pair(Runtime(backend="transformers", dtype="float32", device="cuda"))


@pytest.fixture(scope="module")
def embedded16():
    return load_named_pair("qwen-coder", Runtime(backend="transformers", dtype="bfloat16", device="cuda"))


@pytest.mark.cuda
@on_cuda
@pytest.mark.parametrize("method", ["sd", "easd"])
def test_a_batched_row_equals_its_solo_run_in_float32(tiny32, method):
    settings = DecodeSettings(method=method, max_new_tokens=48, tau_h=0.5)
    batched = Batch(tiny32, [Generation(tiny32, p, settings) for p in PROMPTS]).run()
    for prompt, row in zip(PROMPTS, batched):
        assert row.token_ids == Generation(tiny32, prompt, settings).run().token_ids


@pytest.mark.cuda
@on_cuda
def test_chunked_equals_continuous(tiny32):
    settings = [DecodeSettings(method=m, max_new_tokens=40, tau_h=0.5) for m in ("sd", "easd")]
    continuous = Batch(tiny32, [Generation(tiny32, PROMPTS[0], s) for s in settings]).run()
    kept = [Generation(tiny32, PROMPTS[0], s) for s in settings]  # as the app's worker keeps them between calls
    latest = {id(g): GenerationSnapshot.of(g) for g in kept}
    while decoding := [g for g in kept if not g.done]:
        progress = decode_chunk(tiny32, [latest[id(g)] for g in decoding], max_steps=3)
        for generation, done in zip(decoding, progress):
            catch_up(generation, done)
            latest[id(generation)] = done.snapshot
    assert [g.trace.token_ids for g in kept] == [t.token_ids for t in continuous]


@pytest.mark.cuda
@on_cuda
def test_float32_signals_on_bfloat16_weights_equal_a_float64_reference(embedded16):
    model = embedded16.target.module
    weight = model.get_output_embeddings().weight.detach().double()[: embedded16.vocab_size]
    seen = []
    handle = model.get_decoder().register_forward_hook(lambda _m, _i, out: seen.append(out.last_hidden_state[0, -1]))
    try:
        trace = Generation(embedded16, PROMPTS[0], DecodeSettings(method="target", max_new_tokens=24)).run()
    finally:
        handle.remove()
    reference = torch.special.entr(torch.softmax(torch.stack(seen[1:]).double() @ weight.T, dim=-1)).sum(dim=-1)
    recorded = torch.tensor([r.h_target for r in trace.records], dtype=torch.float64, device=reference.device)
    error = float((recorded - reference[: len(recorded)]).abs().max())
    print(f"float32 signals on bfloat16 weights: largest entropy error {error:.2e} nats over {len(recorded)} tokens")
    assert error < 1e-4


@pytest.mark.cuda
@on_cuda
def test_the_fragile_share_of_easds_penalties_in_bfloat16_on_20_problems(embedded16):
    settings = DecodeSettings(method="easd", max_new_tokens=256, tau_h=1.5)
    traces = Batch(embedded16, [Generation(embedded16, p, settings) for p in problems(20)]).run()
    records = [r for t in traces for r in t.records]
    penalties = [r for r in records if r.origin == "easd_penalty"]
    fragile = sum(bool(r.fragile) for r in penalties)
    print(f"EASD in bfloat16, 20 problems, {len(records)} tokens: {len(penalties)} penalties, {fragile} of them fragile")
    assert penalties  # on CPU (llama.cpp) the rule penalized a token in 13 of 46 GSM8K problems at τ_H = 1.5


@pytest.mark.cuda
@on_cuda
def test_memory_per_row_stays_within_what_the_apps_batch_sizing_assumes(embedded16):
    def peak(rows: int) -> int:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        settings = DecodeSettings(method="easd", max_new_tokens=256)
        Batch(embedded16, [Generation(embedded16, p, settings) for p in problems(rows)]).run()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated()

    one, eight = peak(1), peak(8)
    per_row = (eight - one) / 7
    assumed = row_bytes((embedded16.draft, embedded16.target), APP_ROW_TOKENS)
    print(f"memory per row: {per_row / 2**20:.1f} MiB measured at 256 tokens; the app's sizing assumes {assumed / 2**20:.1f} MiB")
    assert 0 < per_row < assumed


@pytest.mark.skipif(CUDA, reason="on a GPU the device check runs whole")
def test_the_device_check_without_cuda_says_so_in_one_line_and_exits_non_zero(tmp_path):
    report = tmp_path / "report.md"
    run = subprocess.run(["bash", "scripts/device-check.sh", str(report)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and not report.exists()
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("device check: no CUDA GPU here (torch ")
