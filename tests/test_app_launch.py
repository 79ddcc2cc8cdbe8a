"""`python app.py` itself, as the README starts it: flags, environment, and a real launch."""

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import app

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_eval_dirs_come_from_flags_and_the_environment(monkeypatch):
    monkeypatch.setenv("EASD_EVAL_DIRS", os.pathsep.join(["runs/a", "runs/b"]))
    assert app.parse_args(["--eval-dir", "runs/c"]).eval_dir == ["runs/a", "runs/b", "runs/c"]
    monkeypatch.delenv("EASD_EVAL_DIRS")
    assert app.parse_args([]).eval_dir == []


@pytest.mark.slow  # app.py in a process of its own refuses a bad --eval-dir before loading
def test_an_eval_dir_without_results_is_refused_before_any_model_loads(tmp_path):
    done = subprocess.run(
        [sys.executable, "app.py", "--pair", "tiny-random", "--eval-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and "holds no results.csv" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow  # app.py in a process of its own serves the page
def test_app_py_starts_and_serves_the_page(eval_folder):
    port = free_port()
    command = [sys.executable, "app.py", "--pair", "tiny-random", "--port", str(port), "--eval-dir", str(eval_folder)]
    server = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        page = wait_for_page(f"http://127.0.0.1:{port}/config", server)
        assert "EASD Lab" in page and "Evaluation" in page
    finally:
        server.terminate()
        server.wait(timeout=30)


def wait_for_page(url: str, server: subprocess.Popen, seconds: float = 120) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"app.py exited with {server.returncode}:\n{server.stdout.read()}")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.read().decode()
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"app.py did not serve {url} within {seconds:.0f} s")


def test_max_queued_per_client_comes_from_the_flag_or_the_environment(monkeypatch):
    assert app.make_host(app.parse_args(["--pair", "none"])).max_queued_per_client == 2
    monkeypatch.setenv("EASD_MAX_QUEUED_PER_CLIENT", "5")
    assert app.make_host(app.parse_args(["--pair", "none"])).max_queued_per_client == 5
    assert app.make_host(app.parse_args(["--pair", "none", "--max-queued-per-client", "1"])).max_queued_per_client == 1


def test_the_row_allowance_reaches_the_host_and_a_negative_one_is_refused_in_one_line(capsys):
    """--row-allowance: the rows a lane may use a step while others decode (2 by default, 0: no limit)."""
    assert app.make_host(app.parse_args(["--pair", "none"])).row_allowance == 2
    assert app.make_host(app.parse_args(["--pair", "none", "--row-allowance", "0"])).row_allowance is None
    with pytest.raises(SystemExit, match="--row-allowance must be a whole number of rows ≥ 0"):
        app.make_host(app.parse_args(["--pair", "none", "--row-allowance", "-1"]))


def test_every_flag_comes_from_the_environment_by_one_rule_and_is_checked_as_the_flag(monkeypatch, capsys):
    monkeypatch.setenv("EASD_MAX_BATCH", "8")  # --max-batch
    monkeypatch.setenv("EASD_FORWARDED_ALLOW_IPS", "10.0.0.0/8")
    monkeypatch.setenv("GRADIO_SERVER_PORT", "7001")  # Gradio's own name, which a Space sets
    args = app.parse_args(["--max-batch", "4"])
    assert (args.max_batch, args.forwarded_allow_ips, args.port) == (4, "10.0.0.0/8", 7001)  # the command line wins
    assert app.parse_args([]).max_batch == 8
    monkeypatch.setenv("EASD_INT8", "everything")
    with pytest.raises(SystemExit):
        app.parse_args([])
    assert "argument --int8: invalid choice: 'everything'" in capsys.readouterr().err
