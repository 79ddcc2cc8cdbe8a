"""Shared fixtures: the tiny random pair on each backend, built once per test session (about a second)."""

import os
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from easd.method.methods import make_settings
from easd.method.settings import DecodeSettings
from easd.pairs.loading import Runtime
from easd.pairs.tiny import load_tiny_pair

PROMPTS = ["Tom has 3 apples and buys 5 more.", "def add(a, b):", "The answer is"]
BACKENDS = ("transformers", "llama.cpp")


# Under `pytest -n 3` each file runs whole in one worker (--dist loadfile): the browser file's tests walk one page in
# order, the Ray file starts one cluster, the real-pair file loads the pair once. Files go to the workers in the order
# collected, and the two longest start first, one in each worker, so that neither is left running one at the end.
LONGEST_FILES = ("test_real_pair.py", "test_app_browser.py")


# The files above the engine: they reach a backend only through Batch and Generation, whose backends the engine's own
# files (test_batch, test_decoding, test_prefix, test_chunks, the methods' files) test on both. Run on transformers as
# well, they repeated the engine's check at about three times llama.cpp's CPU (110 CPU-s of the suite), so they run on
# llama.cpp alone; a test that names its backend itself (test_harness's lm-eval command line) keeps it.
ABOVE_THE_ENGINE = (
    "test_app_render.py",
    "test_dynamics.py",
    "test_evaluate.py",
    "test_harness.py",
    "test_isolation.py",
    "test_shared_batch.py",
    "test_sharing.py",
    "test_study.py",
)


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: LONGEST_FILES.index(item.path.name) if item.path.name in LONGEST_FILES else len(LONGEST_FILES))
    kept, repeats = [], []
    for item in items:
        (repeats if repeats_the_engines_backends(item) else kept).append(item)
    if repeats:
        config.hook.pytest_deselected(items=repeats)
        items[:] = kept


def repeats_the_engines_backends(item) -> bool:
    """A test above the engine on transformers, where its own parametrization left tiny_pair's two backends."""
    backend = getattr(item, "callspec", None) and item.callspec.params.get("tiny_pair")
    pinned = any(mark.args and mark.args[0] == "tiny_pair" for mark in item.iter_markers("parametrize"))
    return backend == "transformers" and item.path.name in ABOVE_THE_ENGINE and not pinned


def pytest_configure(config):
    """Under `pytest -n 3` (the README's command) three worker processes share the cores: each computes with its
    share (one thread on 2 cores), as do the apps and commands it starts (they read OMP_NUM_THREADS), so neither oversubscribes them."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers == 1:
        return
    if "OMP_NUM_THREADS" not in os.environ:
        threads = max(1, len(os.sched_getaffinity(0)) // workers)
        os.environ["OMP_NUM_THREADS"] = str(threads)
        torch.set_num_threads(threads)
    # each worker's Gradio keeps its own upload folder, so a test counting session folders counts its own
    os.environ["GRADIO_TEMP_DIR"] = tempfile.mkdtemp(prefix=f"gradio-{os.environ['PYTEST_XDIST_WORKER']}-")


@pytest.fixture(scope="session", params=BACKENDS)
def tiny_pair(request):
    """The tiny random pair on each backend: every test that takes it runs on both (one parametrization)."""
    return load_tiny_pair(Runtime(backend=request.param))


@pytest.fixture(scope="session")
def hf_tiny_pair():
    """The tiny pair on transformers alone: for transformers' own machinery (its caches, int8, bfloat16, its
    generate), for the app, which the tests serve on transformers, and for files whose backend does not matter."""
    return load_tiny_pair(Runtime(backend="transformers"))


@pytest.fixture(scope="session")
def trace_sources(tmp_path_factory, hf_tiny_pair):
    """A folder with t.csv and t.json: an SD and an EASD run of 24 tokens, for tests that spoil their fields."""
    from easd.method.generation import Generation
    from easd.traces import files as trace_io

    folder = tmp_path_factory.mktemp("sources")
    runs = [
        Generation(hf_tiny_pair, "Tom has 3 apples.", DecodeSettings(method=m, max_new_tokens=24, record_top=5)).run()
        for m in ("sd", "easd")
    ]
    trace_io.write_csv(runs, folder / "t.csv")
    trace_io.write_json(runs, folder / "t.json")
    return folder


@pytest.fixture
def run(tiny_pair):
    """run(prompt, **settings) -> Trace, on the tiny pair."""
    from easd.method.generation import Generation

    def _run(prompt: str = PROMPTS[0], pair=None, use_cache: bool = True, chat: bool = True, **settings):
        return Generation(pair or tiny_pair, prompt, make_settings(settings), chat=chat, use_cache=use_cache).run()

    return _run


@pytest.fixture(scope="session")
def eval_folder(tmp_path_factory, hf_tiny_pair):
    """A small `easd eval` output (tiny pair, 3 problems, SD and EASD, with their traces) for the Evaluation tab."""
    import json

    from easd.lab.grading.problems import load_problems
    from easd.lab.reports.report import write_reports
    from easd.lab.runs.evaluate import LocalRunner, parse_methods, run_evaluation

    folder = tmp_path_factory.mktemp("eval")
    rows = [{"question": f"<b>Q{i}</b>: {i} + 2?", "answer": f"#### {i + 2}"} for i in range(3)]
    (folder / "data.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    problems = load_problems(folder / "data.jsonl", "gsm8k")
    variants = parse_methods("sd,easd", DecodeSettings(max_new_tokens=24))
    run_evaluation(LocalRunner(hf_tiny_pair), problems, variants, 1, folder, {"pair": "tiny"}, keep_traces=True, progress=False)
    write_reports(folder, "gsm8k")
    return folder


def launch_app(host, eval_dirs=(), loaded=True, **app_options):
    """The web app for `host` on a free local port, served as app.py serves it, its pairs loaded first unless
    `loaded` is False (then, as app.py does, it starts loading the default pair and serves at once): (url, demo)."""
    import json
    import time

    from components.server import ASSETS, serve
    from components.wiring import build_app

    for name in host.allowed if loaded else [host.default]:
        host.ensure_loading(name)
        while loaded and host.pair(name) is None:
            time.sleep(0.05)
    examples = json.loads((ASSETS / "examples.json").read_text())
    demo = build_app(host, examples, eval_dirs=list(eval_dirs), **app_options)
    mcp = app_options.get("mcp", False)  # the MCP server with its tool, as app.py --mcp on serves it
    _, url, _ = serve(demo, prevent_thread_lock=True, quiet=True, metrics=host.metrics, mcp=mcp)  # /metrics with host.metrics
    return url, demo


@pytest.fixture(scope="session")
def app_server(eval_folder):
    """The web app on the tiny random pair, served on a free local port for the session: (url, host)."""
    from easd.pairs.tiny import load_tiny_pair
    from easd.serving.host import ModelHost

    host = ModelHost({"tiny-random": load_tiny_pair}, "tiny-random", max_new_tokens_cap=400, max_batch=16)
    url, demo = launch_app(host, eval_dirs=[str(eval_folder)])
    yield url, host
    demo.close()


@pytest.fixture(scope="session")
def app_url(app_server):
    return app_server[0]


BUSY_MACHINE = [sys.executable, str(Path(__file__).with_name("busy_machine.py"))]  # the command `busy_cores` runs


@pytest.fixture
def busy_cores():
    """Every core kept busy for the test, as another job or another class would keep them: what must hold under load is
    tested under it. `busy_machine.py` fills only what the machine's other work leaves idle, so under `pytest -n 3`,
    whose other workers mostly keep the cores busy themselves, it takes little of their CPU."""
    import subprocess

    machine = subprocess.Popen(BUSY_MACHINE)
    try:
        yield
    finally:
        machine.terminate()
        machine.wait()
