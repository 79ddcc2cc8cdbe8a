"""What each test costs the machine in CPU-seconds, not in wall time: on 2 cores the suite is bound by CPU, and a
test's wall time says more about what ran beside it than about what it asks (a Ray test that waits on its actors
for 300 s while the browser file computes may cost 39 CPU-seconds).

    python -m pytest -n 3 -p tools.cpu_per_test                    # writes .cpu-per-test/<worker>.jsonl
    python -m tools.cpu_per_test .cpu-per-test                      # by file, the most costly tests, the quick tier's share
    python -m tools.cpu_per_test .cpu-per-test --top 40

As a pytest plugin it records, per test (setup, call and teardown together), the CPU time of the worker's whole
process tree: the worker itself, the children it reaped (a subprocess, the busy-machine tests' spinning processes),
and every descendant alive at a test's start or end (Chromium, Ray's processes, an app's server), each keeping the
CPU last seen when it ends. A descendant started and ended inside one test without being reaped by the worker
(Ray's replacement actors) is not counted; a child seen alive at a boundary and reaped later would count twice
(the suite's subprocesses end inside their test). The folder is emptied when a run starts.
"""

from __future__ import annotations

import argparse
import collections
import json
import resource
import shutil
import time
from pathlib import Path

import psutil
import pytest

FOLDER = Path(".cpu-per-test")


class TreeClock:
    """The CPU-seconds a process and its descendants have used so far."""

    def __init__(self):
        self.me = psutil.Process()
        self.last_seen: dict[tuple[int, float], float] = {}  # (pid, start time) -> its CPU when last looked at

    def now(self) -> float:
        for child in self.me.children(recursive=True):
            try:
                times = child.cpu_times()
                self.last_seen[(child.pid, child.create_time())] = times.user + times.system
            except psutil.Error:  # it ended while we looked: its last figure stands
                pass
        own, reaped = self.me.cpu_times(), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.user + own.system + reaped.ru_utime + reaped.ru_stime + sum(self.last_seen.values())


# --- the pytest plugin ----------------------------------------------------------------------------------


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist) starts the folder afresh
        shutil.rmtree(FOLDER, ignore_errors=True)
    FOLDER.mkdir(exist_ok=True)
    config._cpu_clock = TreeClock()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    clock = item.config._cpu_clock
    cpu, wall = clock.now(), time.monotonic()
    result = yield
    row = {"test": item.nodeid, "cpu_s": round(clock.now() - cpu, 2), "wall_s": round(time.monotonic() - wall, 2)}
    row["slow"] = item.get_closest_marker("slow") is not None
    worker = getattr(item.config, "workerinput", {}).get("workerid", "main")  # gw0, gw1, ... under xdist
    with (FOLDER / f"{worker}.jsonl").open("a") as out:
        out.write(json.dumps(row) + "\n")
    return result


# --- the summary ----------------------------------------------------------------------------------------


def read_rows(folder: Path) -> list[dict]:
    files = sorted(folder.glob("*.jsonl"))
    if not files:
        raise SystemExit(f"error: {folder}: no .jsonl files; run python -m pytest -p tools.cpu_per_test first")
    return [json.loads(line) for path in files for line in path.read_text().splitlines() if line.strip()]


def summary(rows: list[dict], top: int) -> str:
    total = sum(r["cpu_s"] for r in rows)
    quick = sum(r["cpu_s"] for r in rows if not r["slow"])
    by_file = collections.Counter()
    for r in rows:
        by_file[r["test"].split("::")[0]] += r["cpu_s"]
    lines = [
        f"{len(rows)} tests, {total:,.0f} CPU-s in all; the quick tier's {sum(not r['slow'] for r in rows)} "
        f"tests {quick:,.0f} CPU-s ({quick / total:.0%})",
        "",
        "CPU-s   share  file",
    ]
    lines += [f"{cpu:7.1f}  {cpu / total:5.1%}  {name}" for name, cpu in by_file.most_common(15)]
    lines += ["", f"the {top} most costly tests:", "CPU-s   wall-s  test"]
    for r in sorted(rows, key=lambda r: -r["cpu_s"])[:top]:
        lines.append(f"{r['cpu_s']:7.1f} {r['wall_s']:7.1f}  {r['test']}{'' if r['slow'] else '   (quick tier)'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Summarize the CPU-seconds each test used (written by -p tools.cpu_per_test).")
    parser.add_argument("folder", nargs="?", type=Path, default=FOLDER, help="the folder the plugin wrote")
    parser.add_argument("--top", type=int, default=20, help="how many of the most costly tests to list")
    args = parser.parse_args(argv)
    print(summary(read_rows(args.folder), args.top))


if __name__ == "__main__":
    main()
