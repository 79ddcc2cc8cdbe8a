"""`easd eval --ray`: the evaluation on Ray actors, on a real single-node Ray cluster (2 CPUs).

The cluster starts once per session (it costs seconds); each test starts its own actors on it.
"""

import csv
import json
import os

import pytest

from easd.cli import main
from easd.core.settings import DecodeSettings
from easd.errors import SettingsError
from easd.lab.evaluate import parse_methods, run_evaluation
from easd.lab.problems import load_problems
from easd.pairs.tiny import load_tiny_pair

if os.environ.get("EASD_REQUIRE_CLUSTER") == "1":  # CI installs requirements-cluster.txt: these tests must run
    import ray
else:
    ray = pytest.importorskip("ray", reason="the Ray tests need the package 'ray': pip install -r requirements-cluster.txt")

from easd.lab.cluster import RUNTIME_ENV, ClusterSettings, plan, ray_runner  # noqa: E402

METHODS = "sd,easd,easd:no_overlap"
TIMINGS = {"seconds", "tokens_per_s", "saved_seconds"}  # the only columns a Ray run may change


@pytest.fixture(scope="session")
def cluster():
    import logging

    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING, runtime_env=RUNTIME_ENV)
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


def every_key(problems: int, samples: int = 1):
    return sorted((str(p), m, str(s)) for p in range(problems) for m in METHODS.split(",") for s in range(samples))


def test_a_ray_eval_writes_the_rows_of_a_local_eval(cluster, data, tmp_path, capsys):
    command = ["eval", "--pair", "tiny-random", "--data", str(data), "--methods", METHODS, "--max-new-tokens", "12"]
    assert main([*command, "--out", str(tmp_path / "local")]) == 0
    assert main([*command, "--out", str(tmp_path / "ray"), "--ray", "--ray-actors", "2"]) == 0
    local, remote = rows(tmp_path / "local"), rows(tmp_path / "ray")
    assert keys(remote) == keys(local) == every_key(12)

    def untimed(found):
        return sorted(tuple((k, v) for k, v in row.items() if k not in TIMINGS) for row in found)

    assert untimed(remote) == untimed(local)
    summary = capsys.readouterr().out
    assert "actor 0 (" in summary and "actor 1 (" in summary and "tokens/s" in summary  # per-actor throughput
    assert json.loads((tmp_path / "ray" / "run.json").read_text())["pair"].startswith("draft tiny-random-draft")


def evaluation(data, runner, out, resume=False):
    problems = load_problems(data, "gsm8k")
    variants = parse_methods(METHODS, DecodeSettings(max_new_tokens=12))
    return run_evaluation(runner, problems, variants, 2, out, {"pair": "tiny"}, resume=resume, progress=False)


def test_an_actor_killed_mid_run_loses_nothing_and_writes_nothing_twice(cluster, data, tmp_path):
    with ray_runner(load_tiny_pair, ClusterSettings(actors=2), work=24) as runner:

        def kill_after_the_first_item(items):
            for n, finished in enumerate(runner(items)):
                if n == 0:
                    assert runner.actors[0].calls > 0  # it holds items right now
                    ray.kill(runner.actors[0].handle)
                yield finished

        evaluation(data, kill_after_the_first_item, tmp_path)
        assert keys(rows(tmp_path)) == every_key(12, samples=2)
        replacement = runner.actors[2]
        assert replacement.replaces == 0 and replacement.items > 0 and not runner.actors[0].alive
        assert "replaced actor 0" in runner.summary()


def test_an_interrupted_driver_stops_the_actors_and_resume_finishes(cluster, data, tmp_path):
    class Interrupted(KeyboardInterrupt):
        pass

    with pytest.raises(Interrupted):
        with ray_runner(load_tiny_pair, ClusterSettings(actors=2), work=24) as runner:

            def ctrl_c_after_three_items(items):
                for n, finished in enumerate(runner(items)):
                    if n == 3:
                        raise Interrupted  # as Ctrl-C would, while other items are in flight
                    yield finished

            evaluation(data, ctrl_c_after_three_items, tmp_path)
    for actor in runner.actors:  # the actors are gone, and their queued work with them
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.handle.load.remote(), timeout=30)
    assert len(rows(tmp_path)) == 3 * 3  # three items, three methods each

    with ray_runner(load_tiny_pair, ClusterSettings(actors=2), work=24) as runner:
        evaluation(data, runner, tmp_path, resume=True)
    assert keys(rows(tmp_path)) == every_key(12, samples=2)


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
