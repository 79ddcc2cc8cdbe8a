"""The ZeroGPU path (easd.serving.zerogpu): off a Space it changes nothing; on one, the app decodes its shared batch in calls.

A real ZeroGPU needs a Space and a CUDA build of torch, neither of which exists here: `spaces` refuses
to start in ZeroGPU mode on a CPU torch. So the app is tested as ZeroGPU runs it with only the GPU
left out: `on_zerogpu` says yes, and every call crosses ZeroGPU's process boundary as the simulation
makes it (a spawned process per call, arguments and results pickled), or, where a test needs many
calls, runs in this process as the undecorated function. A user of the app must get the same runs as
from the continuous batch, and each call asks for about what it needs.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import launch_app
from gradio_client import Client

from easd.errors import QuotaSpent
from easd.method.compare import Comparison
from easd.method.generation import Generation
from easd.method.settings import DecodeSettings
from easd.pairs.tiny import load_tiny_pair
from easd.serving import zerogpu
from easd.serving.chunks import GenerationSnapshot
from easd.serving.host import ModelHost

pytestmark = pytest.mark.slow  # ZeroGPU's process boundary: spawned calls, sized budgets, the same runs as one continuous batch

ROOT = Path(__file__).resolve().parent.parent


def test_off_a_space_nothing_changes():
    assert not zerogpu.on_zerogpu()
    assert zerogpu.chunks_for("tiny-random", None, load_tiny_pair) is None
    assert not hasattr(zerogpu.decode_on_gpu, "zerogpu")  # what spaces.GPU marks a decorated function with
    host = ModelHost({"tiny-random": load_tiny_pair}, "tiny-random", max_batch=4)
    host.ensure_loading("tiny-random")
    worker = wait_for_worker(host)
    assert worker.chunks is None and zerogpu.MODE not in host.states["tiny-random"].message
    assert host.gpu_cost("tiny-random", 128) == ""  # the page says nothing of GPU seconds


def test_a_call_asks_for_what_its_longest_row_needs_at_the_measured_speed():
    calls = zerogpu.GpuCalls("p", load_tiny_pair)
    assert calls.budget(128) == zerogpu.FIRST_S - zerogpu.SPARE_S  # nothing measured yet
    assert zerogpu.chunk_duration("p", load_tiny_pair, [], calls.budget(128)) == zerogpu.FIRST_S
    calls.tokens_per_s = 50.0  # a GPU's speed: 128 tokens need 2.56 s, 3.2 s with the margin
    assert calls.budget(128) == pytest.approx(128 / 50 * zerogpu.MARGIN)
    assert zerogpu.chunk_duration("p", load_tiny_pair, [], calls.budget(128)) == 4 + zerogpu.SPARE_S
    assert calls.cost_s(128) == 7  # one call carries the first example's 2 × 128 tokens
    assert calls.budget(1) == zerogpu.MIN_S - zerogpu.SPARE_S  # a call asks for at least MIN_S
    calls.tokens_per_s = 5.0  # a CPU's: 512 tokens need 128 s, more than one call may ask for
    assert calls.budget(512) == zerogpu.MAX_S - zerogpu.SPARE_S
    assert calls.cost_s(512) == 60 + 60 + 17  # 228 + 228 + 56 tokens
    assert "137 GPU seconds" in calls.describe_cost(512)
    assert f"about **{zerogpu.FIRST_S} GPU seconds**" in zerogpu.GpuCalls("p", load_tiny_pair).describe_cost(512)


def test_a_spent_quota_reads_as_one_line_that_says_what_to_do(monkeypatch):
    import gradio as gr

    said = "You have exceeded your free ZeroGPU quota (15s requested vs. 4s left). Try again in 0:21:07."

    def refused(*args):
        raise gr.Error(said, title="ZeroGPU quota exceeded")

    monkeypatch.setattr(zerogpu, "decode_on_gpu", refused)
    pair = load_tiny_pair()
    snapshot = GenerationSnapshot.of(Generation(pair, "Hi", DecodeSettings(max_new_tokens=4)))
    with pytest.raises(QuotaSpent) as caught:
        zerogpu.GpuCalls("tiny-random", load_tiny_pair)([snapshot])
    line = str(caught.value)
    assert "\n" not in line and said in line and "Log in to Hugging Face" in line and "recorded comparison" in line
    monkeypatch.setattr(zerogpu, "decode_on_gpu", lambda *args: 1 / 0)  # any other failure stays itself
    with pytest.raises(ZeroDivisionError):
        zerogpu.GpuCalls("tiny-random", load_tiny_pair)([snapshot])


def test_a_zerogpu_space_with_a_cpu_torch_is_told_to_install_a_cuda_build():
    env = dict(os.environ, SPACES_ZERO_GPU="true", SPACES_ZERO_DEVICE_API_URL="http://127.0.0.1:9")
    run = subprocess.run(
        [sys.executable, "-c", "import easd.serving.zerogpu"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode != 0 and "the installed torch is a CPU build" in run.stderr


@pytest.fixture()
def zerogpu_app(monkeypatch):
    """The app as on ZeroGPU, minus the GPU call: (url, host, rows per call). A round decodes for 0.3 s, so runs span many calls."""
    monkeypatch.setattr(zerogpu, "on_zerogpu", lambda: True)
    for limit in ("FIRST_S", "MIN_S", "MAX_S"):  # every call decodes for 0.3 s
        monkeypatch.setattr(zerogpu, limit, zerogpu.SPARE_S + 0.3)
    calls = []

    def counted(*args):
        calls.append(len(args[2]))  # the rows in the call
        return zerogpu._decode_on_gpu(*args)

    monkeypatch.setattr(zerogpu, "decode_on_gpu", counted)
    host = ModelHost({"tiny-random": load_tiny_pair}, "tiny-random", max_new_tokens_cap=400, max_batch=8)
    url, demo = launch_app(host)
    yield url, host, calls
    demo.close()
    zerogpu.LOADED.clear()


def test_on_zerogpu_users_get_the_same_runs_as_from_one_continuous_batch(zerogpu_app):
    url, host, calls = zerogpu_app
    worker = host.states["tiny-random"].worker
    assert worker.chunks is not None and zerogpu.MODE in host.states["tiny-random"].message
    asks = {"first pupil": 300, "second pupil": 200}
    jobs = {p: Client(url, verbose=False).submit(prompt=p, max_new_tokens=n, api_name="/compare") for p, n in asks.items()}
    for prompt, job in jobs.items():
        result = job.result(timeout=240)
        runs = {run["settings"]["method"]: [row["token_id"] for row in run["rows"]] for run in result["runs"]}
        lanes = Comparison(load_tiny_pair(), prompt, DecodeSettings(max_new_tokens=asks[prompt])).run()
        alone = {trace.settings.method: trace for trace in lanes.values()}  # SD | EASD, the default lanes
        assert runs == {method: trace.token_ids for method, trace in alone.items()}
        assert all(run["stats"]["stop_reason"] == alone[run["settings"]["method"]].stats.stop_reason for run in result["runs"])
    assert len(calls) >= 3 and max(calls) == 4  # the runs spanned several calls, and both users' rows shared some
    assert "GPU seconds** of your daily quota (from the speed measured so far" in host.gpu_cost("tiny-random", 128)


def test_across_zerogpus_process_boundary_a_user_gets_the_run_and_this_process_never_runs_a_model(monkeypatch):
    """Each call in a freshly spawned process (EASD_SIMULATE_ZEROGPU's rules): arguments and results pickled, nothing
    shared. The app's own copy of the pair only tokenizes: no forward pass and no CUDA in this process."""
    monkeypatch.setattr(zerogpu, "SIMULATED", True)  # as EASD_SIMULATE_ZEROGPU=1 sets it on import
    monkeypatch.setattr(zerogpu, "FIRST_S", zerogpu.SPARE_S + 0.01)  # the first call stops after a step or two
    spawned = []

    def counted(*args):
        spawned.append(len(args[2]))
        return zerogpu.in_a_fresh_process(*args)

    monkeypatch.setattr(zerogpu, "decode_on_gpu", counted)
    host = ModelHost({"tiny-random": load_tiny_pair}, "tiny-random", max_batch=4)
    url, demo = launch_app(host)
    try:
        pair = wait_for_worker(host).pair
        forwards = []
        for model in (pair.draft.module, pair.target.module):
            model.register_forward_pre_hook(lambda *_: forwards.append(1))
        result = Client(url, verbose=False).predict(prompt="a pupil", max_new_tokens=40, api_name="/compare")
    finally:
        demo.close()
    lanes = Comparison(load_tiny_pair(), "a pupil", DecodeSettings(max_new_tokens=40)).run()
    alone = {trace.settings.method: trace.token_ids for trace in lanes.values()}
    assert {run["settings"]["method"]: [row["token_id"] for row in run["rows"]] for run in result["runs"]} == alone
    assert len(spawned) >= 2 and not zerogpu.LOADED  # several calls, each loading its own pair in its own process
    assert not forwards and not torch.cuda.is_initialized()
    assert [call.asked_s for call in host.states["tiny-random"].worker.chunks.calls][0] == zerogpu.SPARE_S + 1


def test_the_simulation_command_prints_what_each_call_asked_for(capsys):
    """`python -m tools.zerogpu` (the device check runs it on a GPU), called here in this process: each of its calls
    still runs in a process spawned for it. Run as a command, its own start cost another 8 s of CPU."""
    from tools.zerogpu import main as simulate

    assert simulate(["--pair", "tiny-random", "--max-new-tokens", "8"]) == 0
    first, second = capsys.readouterr().out.split("example 2:")
    assert f"call: asked {zerogpu.FIRST_S} s" in first and "8 tokens per row" in first
    said, asked = re.search(r"about (\d+) GPU seconds", second)[1], re.search(r"call: asked (\d+) s", second)[1]
    assert "from the speed measured so far" in second and said == asked  # sized from the first call's speed, as told


def wait_for_worker(host: ModelHost, timeout: float = 60):
    import time

    deadline = time.monotonic() + timeout
    while (worker := host.states["tiny-random"].worker) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return worker
