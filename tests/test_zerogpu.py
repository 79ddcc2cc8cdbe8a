"""The ZeroGPU path (components.zerogpu): off a Space it changes nothing; on one, the app decodes its shared batch in calls.

A real ZeroGPU needs a Space and a CUDA build of torch, neither of which exists here: `spaces` refuses
to start in ZeroGPU mode on a CPU torch. So the app is tested as ZeroGPU runs it with only the GPU
call left out: `on_zerogpu` says yes, and `decode_on_gpu` is the undecorated function (what
`spaces.GPU` returns off a Space), run in this process on the CPU. A user of the app must get the
same runs as from the continuous batch.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import launch_app
from gradio_client import Client

from components import zerogpu
from components.host import ModelHost
from easd.core.compare import Comparison
from easd.core.settings import DecodeSettings
from easd.pairs.tiny import load_tiny_pair

ROOT = Path(__file__).resolve().parent.parent


def test_off_a_space_nothing_changes():
    assert not zerogpu.on_zerogpu()
    assert zerogpu.chunks_for("tiny-random", None) is None
    assert not hasattr(zerogpu.decode_on_gpu, "zerogpu")  # what spaces.GPU marks a decorated function with
    host = ModelHost({"tiny-random": load_tiny_pair}, "tiny-random", max_batch=4)
    host.ensure_loading("tiny-random")
    worker = wait_for_worker(host)
    assert worker.chunks is None and zerogpu.MODE not in host.states["tiny-random"].message


def test_a_call_asks_zerogpu_for_its_decoding_time_and_the_overhead_within_bounds():
    assert zerogpu.chunk_duration("p", [], zerogpu.CHUNK_S) == zerogpu.CHUNK_S + zerogpu.OVERHEAD_S
    assert zerogpu.chunk_duration("p", [], 0) == zerogpu.MIN_S
    assert zerogpu.chunk_duration("p", [], 600) == zerogpu.MAX_S


def test_a_zerogpu_space_with_a_cpu_torch_is_told_to_install_a_cuda_build():
    env = dict(os.environ, SPACES_ZERO_GPU="true", SPACES_ZERO_DEVICE_API_URL="http://127.0.0.1:9")
    run = subprocess.run(
        [sys.executable, "-c", "import components.zerogpu"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode != 0 and "the installed torch is a CPU build" in run.stderr


@pytest.fixture()
def zerogpu_app(monkeypatch):
    """The app as on ZeroGPU, minus the GPU call: (url, host, rows per call). A round decodes for 0.3 s, so runs span many calls."""
    monkeypatch.setattr(zerogpu, "on_zerogpu", lambda: True)
    monkeypatch.setattr(zerogpu, "CHUNK_S", 0.3)
    calls = []

    def counted(*args):
        calls.append(len(args[1]))  # the rows in the call
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


def wait_for_worker(host: ModelHost, timeout: float = 60):
    import time

    deadline = time.monotonic() + timeout
    while (worker := host.states["tiny-random"].worker) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return worker
