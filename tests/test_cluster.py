"""`easd eval --ray`: the evaluation on Ray actors, on a real single-node Ray cluster (2 CPUs).

The cluster starts once, for this file's tests (it costs seconds); each test starts its own actors on it. It ends
with them: its daemons idle at about 5% of a core, which the rest of the suite would pay for.
"""

import csv
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from easd.cli import main
from easd.errors import SettingsError
from easd.lab.grading.problems import load_problems
from easd.lab.runs.evaluate import LocalRunner, parse_methods, run_evaluation
from easd.method.settings import DecodeSettings
from easd.pairs.tiny import load_tiny_pair

if os.environ.get("EASD_REQUIRE_CLUSTER") == "1":  # CI installs requirements-cluster.txt: these tests must run
    import ray
else:
    ray = pytest.importorskip("ray", reason="the Ray tests need the package 'ray': pip install -r requirements-cluster.txt")

from easd.lab.runs.cluster import RUNTIME_ENV, ClusterSettings, plan, ray_runner

pytestmark = pytest.mark.slow  # a real Ray cluster: an actor killed mid-run, Ctrl-C and --resume, nothing lost or twice

METHODS = "sd,easd,easd:no_overlap,mti"
ROOT = Path(__file__).resolve().parent.parent
TIMINGS = {"seconds", "tokens_per_s", "saved_seconds"}  # the only columns a Ray run may change


@pytest.fixture(scope="module")
def cluster():
    import logging

    # address="local": a cluster of its own, even where `ray start` runs one (or left its address behind)
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level=logging.WARNING, runtime_env=RUNTIME_ENV)
    yield
    ray.shutdown()


@pytest.fixture
def data(tmp_path):
    rows = [
        {"question": f"Tom has {i} apples and buys {i + 2} more. How many?", "answer": f"#### {2 * i + 2}"} for i in range(12)
    ]
    path = tmp_path / "problems.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def rows(folder):
    return list(csv.DictReader((folder / "results.csv").open(newline="")))


def keys(found):
    return sorted((r["problem_id"], r["method"], r["sample"]) for r in found)


def every_key(problems: int):
    return sorted((str(p), m, "0") for p in range(problems) for m in METHODS.split(","))


def evaluation(data, runner, out, resume=False):
    problems = load_problems(data, "gsm8k")
    variants = parse_methods(METHODS, DecodeSettings(max_new_tokens=12))
    return run_evaluation(runner, problems, variants, 1, out, {"pair": "tiny", "settings": {}}, resume=resume, progress=False)


def untimed(found):
    return sorted(tuple((k, v) for k, v in row.items() if k not in TIMINGS) for row in found)


@pytest.fixture(scope="class")
def runner(cluster):
    """Two actors on the tiny pair, shared by a class's tests: each actor start imports torch (seconds)."""
    with ray_runner(load_tiny_pair, ClusterSettings(actors=2), work=12) as shared:
        yield shared


class TestTwoActors:
    """Both of the cluster's CPUs busy with one runner's actors; the test after this class needs them free."""

    def test_a_ray_eval_writes_the_rows_of_a_local_eval(self, runner, hf_tiny_pair, data, tmp_path):
        evaluation(data, LocalRunner(hf_tiny_pair), tmp_path / "local")  # the actors' pair: load_tiny_pair's transformers
        evaluation(data, runner, tmp_path / "ray")
        local, remote = rows(tmp_path / "local"), rows(tmp_path / "ray")
        assert keys(remote) == keys(local) == every_key(12)
        assert untimed(remote) == untimed(local)
        assert all(actor.items > 0 for actor in runner.actors)  # both took a share

    def test_an_actor_killed_mid_run_loses_nothing_and_writes_nothing_twice(self, runner, data, tmp_path):
        victim = next(actor for actor in runner.actors if actor.alive)

        def kill_after_the_first_item(items):
            for n, finished in enumerate(runner(items)):
                if n == 0:
                    assert victim.calls > 0  # it holds items right now
                    ray.kill(victim.handle)
                yield finished

        evaluation(data, kill_after_the_first_item, tmp_path)
        assert keys(rows(tmp_path)) == every_key(12)
        replacement = runner.actors[-1]
        assert replacement.replaces == victim.number and replacement.items > 0 and not victim.alive
        assert f"replaced actor {victim.number}" in runner.summary()

    def test_a_run_stopped_midway_resumes_on_the_same_actors(self, runner, data, tmp_path):
        def stop_after_three_items(items):
            for n, finished in enumerate(runner(items)):
                if n == 3:
                    raise KeyboardInterrupt  # as Ctrl-C in the driver would, with the next items in flight
                yield finished

        with pytest.raises(KeyboardInterrupt):
            evaluation(data, stop_after_three_items, tmp_path)
        assert len(rows(tmp_path)) == 3 * len(METHODS.split(",")) and all(actor.calls == 0 for actor in runner.actors)
        evaluation(data, runner, tmp_path, resume=True)
        assert keys(rows(tmp_path)) == every_key(12)


def test_ctrl_c_on_the_command_line_stops_the_actors_and_resume_finishes(cluster, data, tmp_path, capsys):
    """The real thing: `easd eval --ray ADDRESS` in its own process, joining this cluster, then SIGINT."""
    address = ray.get_runtime_context().gcs_address
    out = tmp_path / "out"
    # one actor (faster to start), three rows at a time: rows of one batch all end at once, so a
    # bigger batch could write every row before the signal lands; 64 tokens a row, since the tiny pair decodes
    # ~700 tokens/s and the 24 rows must take seconds, not the blink in which the signal could miss them; 6 problems:
    # the 6 more it once ran proved nothing more
    command = ["eval", "--pair", "tiny-random", "--data", str(data), "--limit", "6", "--methods", METHODS]
    command += ["--max-new-tokens", "64", "--batch-size", "3", "--out", str(out), "--ray", address, "--ray-actors", "1"]
    # started as a shell starts it, with Ctrl-C's default action: Python turns SIGINT into KeyboardInterrupt only when
    # its parent had not set SIGINT to be ignored, and a pytest -n 2 worker had by the time this test ran
    process = subprocess.Popen(
        [sys.executable, "-m", "easd", *command],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and len(rows(out) if (out / "results.csv").exists() else []) < 3:
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=60) == 130
    assert "rerun with --resume" in process.stderr.read()
    written = rows(out)
    assert 3 <= len(written) < 6 * len(METHODS.split(","))  # stopped before the end
    deadline = time.monotonic() + 60  # the driver killed its actors: their CPUs are free again
    while time.monotonic() < deadline and ray.available_resources().get("CPU", 0) < 2:
        time.sleep(0.1)
    assert ray.available_resources().get("CPU", 0) == 2

    assert main([*command, "--resume"]) == 0
    after = rows(out)
    assert keys(after) == every_key(6) and after[: len(written)] == written
    assert json.loads((out / "run.json").read_text())["pair"].startswith("draft tiny-random-draft → target")
    assert "actor 0 (" in capsys.readouterr().out  # per-actor throughput in the summary


def test_actors_and_resources_default_to_what_the_cluster_has():
    assert plan(ClusterSettings(), {"CPU": 8.0}, work=100) == plan(ClusterSettings(actors=8), {"CPU": 8.0}, work=100)
    on_gpus = plan(ClusterSettings(), {"CPU": 32.0, "GPU": 4.0}, work=100)
    assert (on_gpus.actors, on_gpus.cpus, on_gpus.gpus) == (4, 1, 1.0)
    assert plan(ClusterSettings(gpus_per_actor=0.5), {"CPU": 32.0, "GPU": 4.0}, work=100).actors == 8
    assert plan(ClusterSettings(), {"CPU": 8.0}, work=3).actors == 3  # no more pair loads than items
    with pytest.raises(SettingsError, match="--ray-actors: 3 actor.* need 6 CPUs; the cluster has 2"):
        plan(ClusterSettings(actors=3, cpus_per_actor=2), {"CPU": 2.0}, work=100)


def test_ray_flags_without_ray_are_refused_before_any_model_loads(data, tmp_path, capsys):
    command = ["eval", "--pair", "tiny-random", "--data", str(data), "--out", str(tmp_path / "o")]
    assert main([*command, "--ray-actors", "2"]) == 2
    assert "--ray-actors: needs --ray" in capsys.readouterr().err
    assert main([*command, "--ray", "--ray-cpus-per-actor", "0"]) == 2
    assert "--ray-cpus-per-actor: must be ≥ 1" in capsys.readouterr().err


def _dies_while_loading():
    os._exit(1)  # as an actor killed by Ray's memory monitor during its model load


def test_an_actor_that_dies_while_loading_the_pair_is_one_clear_line(cluster):
    with pytest.raises(SettingsError, match="--ray-actors: an actor died while loading the pair"):
        with ray_runner(_dies_while_loading, ClusterSettings(actors=1), work=4):
            pass


def test_a_study_on_ray_whose_worker_is_killed_mid_study_writes_a_local_studys_rows_once(cluster, data, tmp_path, capsys):
    """`study --ray ADDRESS`, one of its actors' processes SIGKILLed when the first row is written: its problems run
    again on a fresh actor and the folder holds a local study's rows, each once (the driver alone writes results.csv).
    The timed phase runs on one actor, one row at a time. 6 problems (two batches an actor): 12 proved nothing more."""
    address = ray.get_runtime_context().gcs_address
    command = ["study", "--pair", "tiny-random", "--backend", "transformers", "--data", str(data), "--limit", "6"]
    command += ["--max-new-tokens", "12", "--grid-limit", "2", "--speed-limit", "2", "--speed-repeats", "1"]
    command += ["--tau-hs", "1", "--tau-os", "0.4", "--tau-h", "0.5", "--batch-size", "3"]
    assert main([*command, "--out", str(tmp_path / "local")]) == 0
    out, killed = tmp_path / "ray", []

    def kill_a_worker_at_the_first_row():
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not ((out / "results.csv").exists() and rows(out)):
            time.sleep(0.02)
        workers = [p for p in psutil.process_iter(["cmdline"]) if (p.info["cmdline"] or [""])[0] == "ray::Decoder"]
        os.kill(workers[0].pid, signal.SIGKILL)  # an actor's process, as the OOM killer or a lost node ends it
        killed.append(workers[0].pid)

    killer = threading.Thread(target=kill_a_worker_at_the_first_row)
    killer.start()
    capsys.readouterr()
    assert main([*command, "--out", str(out), "--ray", address, "--ray-actors", "2"]) == 0
    killer.join()
    assert killed and "replaced actor" in capsys.readouterr().out
    for folder in (Path(), Path("speed")):
        local, remote = rows(tmp_path / "local" / folder), rows(out / folder)
        assert keys(remote) == keys(local) and len(set(keys(remote))) == len(remote), folder
        assert untimed(remote) == untimed(local), folder
    # timed in turns, one row at a time: target-only first on the first problem, last on the next (a problem's rows in
    # its turn's order; the problems in the order they finished, which the killed actor may change)
    timed: dict[str, list[str]] = {}
    for row in rows(out / "speed"):
        timed.setdefault(row["problem_id"], []).append(row["method"])
    first, second = dict.fromkeys(row["problem_id"] for row in rows(tmp_path / "local" / "speed"))
    assert (timed[first], timed[second]) == (["target", "sd", "easd"], ["sd", "easd", "target"])
    assert json.loads((out / "run.json").read_text())["pair"] == json.loads((tmp_path / "local" / "run.json").read_text())["pair"]
