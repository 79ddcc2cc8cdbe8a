"""`easd eval --ray`: the evaluation's work items decoded by Ray actors, on one machine or many.

Each actor loads the model pair once and decodes the work items it is sent with the same
`decode_items` a local run uses (batched: each call's items are the rows of one batch). The driver keeps a few calls in flight per actor, takes results
with `ray.wait` as they finish, and hands them to `run_evaluation`, which alone writes
results.csv; so --resume, the reports and the app read a Ray run like a local one.

Why actors and `ray.wait` rather than Ray Data: the work is a few hundred to a few thousand items
of seconds to minutes each, whose results must reach one writer as they finish. A hand-held queue
of actor calls does exactly that, and lets the driver see which items a dead actor held and send
them elsewhere; Ray Data's streaming executor adds blocks, batches and its own retries to
reason about, without being faster here.

A dead actor (killed, out of memory, its node gone) loses only the calls it held: their items go
back to the queue and a fresh actor replaces it. A result reaches the driver only through the
call the driver is waiting on, so an item is written once however often it was retried.
"""

from __future__ import annotations

import os
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from ...errors import EasdError, SettingsError
from ...method.pair import ModelPair
from ...method.trace import Trace
from .evaluate import DEFAULT_BATCH_SIZE, WorkItem, decode_items

# Calls queued on each actor: the next one is already there when the current one finishes,
# so an actor never idles while the driver writes. More only means more to retry when it dies.
CALLS_IN_FLIGHT = 2
# After this long without every actor loaded, say what the actors wait for (busy cluster, slow load).
LOAD_NOTICE_SECONDS = 60
# An item whose actor died this many times stops the job (it may be what kills them).
MAX_ATTEMPTS = 3


@dataclass(frozen=True)
class ClusterSettings:
    """Where the actors run and what each takes; None = chosen from the cluster (see `plan`)."""

    address: str = "local"  # "local" starts a cluster in this process, "auto" joins `ray start`'s, or host:port / ray://…
    actors: int | None = None  # default: as many as the cluster's GPUs (or CPUs) hold
    cpus_per_actor: int = 1  # also the actor's torch threads
    gpus_per_actor: float | None = None  # default: 1 when the cluster has GPUs, else 0
    batch_size: int = DEFAULT_BATCH_SIZE  # rows each actor decodes per pass; also the work items per call

    def validate(self) -> ClusterSettings:
        if self.actors is not None and self.actors < 1:
            raise SettingsError("--ray-actors", f"must be ≥ 1 (got {self.actors})")
        if self.cpus_per_actor < 1:
            raise SettingsError("--ray-cpus-per-actor", f"must be ≥ 1 (got {self.cpus_per_actor})")
        if self.gpus_per_actor is not None and self.gpus_per_actor < 0:
            raise SettingsError("--ray-gpus-per-actor", f"must be ≥ 0 (got {self.gpus_per_actor})")
        return self


@dataclass(frozen=True)
class ActorPlan:
    """How many actors, and the resources each asks Ray for."""

    actors: int
    cpus: int
    gpus: float
    batch_size: int = DEFAULT_BATCH_SIZE


def plan(settings: ClusterSettings, resources: dict, work: int) -> ActorPlan:
    """Fill in the defaults from the cluster's resources; refuse a request the cluster can never hold."""
    has_gpus = resources.get("GPU", 0) >= 1
    gpus = settings.gpus_per_actor if settings.gpus_per_actor is not None else (1.0 if has_gpus else 0.0)
    cpus = settings.cpus_per_actor
    if settings.actors is not None:
        actors = settings.actors
    elif gpus > 0:
        actors = int(resources.get("GPU", 0) // gpus)
    else:
        actors = int(resources.get("CPU", 0) // cpus)
    actors = max(1, min(actors, work))  # never load the pair more often than there are items
    for name, each, flag in (("CPU", cpus, "--ray-cpus-per-actor"), ("GPU", gpus, "--ray-gpus-per-actor")):
        have = resources.get(name, 0)
        if each > 0 and actors * each > have:
            raise SettingsError(
                flag if settings.actors is None else "--ray-actors",
                f"{actors} actor(s) × {each:g} {name} need {actors * each:g} {name}s; the cluster has {have:g} "
                f"(lower --ray-actors or {flag})",
            )
    return ActorPlan(actors, cpus, gpus, settings.batch_size)


# --- the actor ----------------------------------------------------------------------------------


@dataclass
class Decoded:
    """What one actor call sends back."""

    results: list[list[tuple[dict, Trace]]]  # per item: decode_items' (row, trace) pairs
    seconds: float  # decoding time, without loading the pair
    where: str  # node and process, for the summary


class Decoder:
    """A Ray actor: loads the pair once (on first use), then decodes the items it is sent."""

    def __init__(self, load_pair: Callable[[], ModelPair], threads: int):
        import torch

        # One torch thread per CPU Ray gave this actor, not one per core of the node.
        os.environ["OMP_NUM_THREADS"] = str(threads)
        torch.set_num_threads(threads)
        self.load_pair, self.pair, self.load_seconds = load_pair, None, 0.0

    def load(self) -> tuple[str, float]:
        """The pair's description and how long loading took."""
        if self.pair is None:
            started = time.perf_counter()
            self.pair = self.load_pair()
            self.load_seconds = time.perf_counter() - started
        return self.pair.describe(), self.load_seconds

    def decode(self, items: list[WorkItem], batch_size: int) -> Decoded:
        import ray

        self.load()
        started = time.perf_counter()
        finished = {id(item): results for item, results in decode_items(self.pair, items, batch_size)}
        results = [finished[id(item)] for item in items]
        where = f"{ray.util.get_node_ip_address()} pid {os.getpid()}"
        return Decoded(results, time.perf_counter() - started, where)


@dataclass
class Actor:
    """The driver's view of one actor: its handle and what it has done."""

    number: int
    handle: object  # ray.actor.ActorHandle
    replaces: int | None = None  # the number of the dead actor it took over from
    alive: bool = True
    where: str = ""
    load_seconds: float = 0.0
    items: int = 0
    tokens: int = 0
    seconds: float = 0.0
    calls: int = 0  # calls now in flight

    def line(self) -> str:
        rate = f"{self.tokens / self.seconds:.1f} tokens/s" if self.seconds else "no tokens"
        notes = [self.where] if self.where else []
        notes += [f"replaced actor {self.replaces}"] if self.replaces is not None else []
        notes += ["died"] if not self.alive else []
        about = f" ({', '.join(notes)})" if notes else ""
        return (
            f"actor {self.number}{about}: {self.items} problems, {self.tokens} tokens in {self.seconds:.1f} s ({rate}); "
            f"pair loaded in {self.load_seconds:.1f} s"
        )


# --- the driver ---------------------------------------------------------------------------------


@dataclass
class RayRunner:
    """A runner for `run_evaluation` (see evaluate.Runner) whose items are decoded by Ray actors."""

    load_pair: Callable[[], ModelPair]
    plan: ActorPlan
    actors: list[Actor] = field(default_factory=list)
    pair_description: str = ""

    def start(self) -> None:
        """Start the actors and wait until each has loaded the pair, so a load error stops the job at once."""
        import ray

        for _ in range(self.plan.actors):
            self.actors.append(self._spawn())  # one by one: each takes the next number
        loads = [actor.handle.load.remote() for actor in self.actors]
        if len(ray.wait(loads, num_returns=len(loads), timeout=LOAD_NOTICE_SECONDS)[0]) < len(loads):
            free = {name: ray.available_resources().get(name, 0) for name in ("CPU", "GPU")}
            print(
                f"still starting {len(loads)} actor(s) of {self.plan.cpus} CPU and {self.plan.gpus:g} GPU each; "
                f"the cluster has {free['CPU']:g} CPUs and {free['GPU']:g} GPUs free (another job may hold them)",
                file=sys.stderr,
            )
        try:
            loaded = _get_all(ray, loads)
        except _lost_errors(ray) as err:  # e.g. Ray's memory monitor killed an actor: every actor holds a whole pair
            reason = "out of memory" if isinstance(err, ray.exceptions.OutOfMemoryError) else type(err).__name__
            raise SettingsError(
                "--ray-actors",
                f"an actor died while loading the pair ({reason}); each of the {len(loads)} actors loads the whole pair, "
                "so start fewer actors per node, or use nodes with more memory",
            ) from None
        for actor, (description, seconds) in zip(self.actors, loaded):
            actor.load_seconds, self.pair_description = seconds, description

    def stop(self) -> None:
        """Kill every actor: their queued and running calls end with them."""
        import ray

        for actor in self.actors:
            if actor.alive:
                ray.kill(actor.handle)
                actor.alive = False

    def summary(self) -> str:
        return "\n".join(actor.line() for actor in self.actors)

    def alone(self) -> RayRunner:
        """A runner on one of these actors (the first alive), one row at a time in the order given: a study's timings,
        like with like in one process. It shares this runner's actors, so one that replaces a dead actor joins them."""
        return RayRunner(self.load_pair, replace(self.plan, actors=1, batch_size=1), self.actors, self.pair_description)

    def __call__(self, items: list[WorkItem]) -> Iterator[tuple[WorkItem, list[tuple[dict, Trace]]]]:
        import ray

        size = max(1, min(self.plan.batch_size, -(-len(items) // (CALLS_IN_FLIGHT * self.plan.actors))))  # small jobs spread too
        queue = deque(items[i : i + size] for i in range(0, len(items), size))
        in_flight: dict = {}  # ObjectRef -> (Actor, the items of that call)
        attempts: dict[tuple, int] = {}
        try:
            while queue or in_flight:
                self._submit(queue, in_flight)
                [ref], _ = ray.wait(list(in_flight), num_returns=1)
                actor, chunk = in_flight.pop(ref)
                actor.calls -= 1
                try:
                    decoded = ray.get(ref)
                except _lost_errors(ray):
                    self._lost(actor, chunk, queue, attempts)
                    continue
                except ray.exceptions.RayTaskError as err:
                    raise (err.cause if isinstance(err.cause, EasdError) else err) from None
                actor.where, actor.seconds, actor.items = decoded.where, actor.seconds + decoded.seconds, actor.items + len(chunk)
                for item, results in zip(chunk, decoded.results):
                    actor.tokens += sum(row["new_tokens"] for row, _ in results)
                    yield item, results
        finally:  # closed early (Ctrl-C, an error, the caller stopped): drop the queued calls
            for ref in in_flight:
                try:
                    ray.cancel(ref)
                except Exception:  # already finished or its actor gone: nothing to cancel
                    pass
                in_flight[ref][0].calls -= 1

    def _submit(self, queue: deque, in_flight: dict) -> None:
        """Top the plan's number of live actors up to CALLS_IN_FLIGHT calls, one call per actor per round, so all get a
        share (all of them: each dead one is replaced; `alone`'s runner: the first)."""
        live = [actor for actor in self.actors if actor.alive][: self.plan.actors]
        for _ in range(CALLS_IN_FLIGHT):
            for actor in live:
                if actor.calls < CALLS_IN_FLIGHT and queue:
                    chunk = queue.popleft()
                    in_flight[actor.handle.decode.remote(chunk, self.plan.batch_size)] = (actor, chunk)
                    actor.calls += 1

    def _lost(self, actor: Actor, chunk: list[WorkItem], queue: deque, attempts: dict) -> None:
        """An actor died holding `chunk`: retry its items first, on a fresh actor in its place."""
        import ray

        for item in chunk:
            key = (item.problem.id, item.sample)
            attempts[key] = attempts.get(key, 0) + 1
            if attempts[key] >= MAX_ATTEMPTS:
                raise EasdError(
                    f"--ray: problem {item.problem.id} (sample {item.sample}) was on {MAX_ATTEMPTS} actors that died; "
                    "it may be what kills them (memory?): lower --max-new-tokens or give actors more memory, then --resume"
                )
        queue.appendleft(chunk)
        if actor.alive:  # its other calls fail too; replace it once
            actor.alive = False
            ray.kill(actor.handle)  # it may only be unreachable: make sure it decodes nothing more
            self.actors.append(self._spawn(replaces=actor.number))

    def _spawn(self, replaces: int | None = None) -> Actor:
        import ray

        remote = ray.remote(Decoder).options(
            num_cpus=self.plan.cpus,
            num_gpus=self.plan.gpus,
            max_restarts=0,  # the driver replaces dead actors itself, so it knows which items to retry
        )
        return Actor(len(self.actors), remote.remote(self.load_pair, self.plan.cpus), replaces)


def _lost_errors(ray) -> tuple[type[Exception], ...]:
    """The errors that mean 'the actor or its node is gone', not 'the code failed'."""
    e = ray.exceptions
    return (e.RayActorError, e.WorkerCrashedError, e.OutOfMemoryError, e.NodeDiedError, e.ObjectLostError)


def _get_all(ray, refs: list) -> list:
    try:
        return ray.get(refs)
    except ray.exceptions.RayTaskError as err:
        raise (err.cause if isinstance(err.cause, EasdError) else err) from None


# --- the cluster --------------------------------------------------------------------------------

# Ship this checkout's `easd` package to every node, so the actors run the driver's code
# (the libraries in requirements.txt must be installed on every node).
RUNTIME_ENV = {"py_modules": [str(Path(__file__).resolve().parent.parent)]}


@contextmanager
def ray_runner(load_pair: Callable[[], ModelPair], settings: ClusterSettings, work: int) -> Iterator[RayRunner]:
    """Connect to (or start) the cluster, start the actors, and on the way out kill them and disconnect.

    Leaving by Ctrl-C or an error works the same way: the actors die, a cluster started here
    shuts down, and every finished item is already in results.csv for --resume.
    """
    ray = _import_ray()
    connected_here = not ray.is_initialized()  # tests and notebooks may have connected already
    if connected_here:
        _connect(ray, settings.address)
    runner = RayRunner(load_pair, plan(settings, ray.cluster_resources(), work))
    try:
        runner.start()
        yield runner
    finally:
        runner.stop()
        if connected_here:
            ray.shutdown()


def _import_ray():
    try:
        import ray
    except ImportError:
        raise SettingsError("--ray", "needs the package 'ray': pip install -r requirements-cluster.txt") from None
    return ray


def _connect(ray, address: str) -> None:
    import logging

    local = {"include_dashboard": False} if address == "local" else {}  # joining a cluster takes its settings
    try:
        ray.init(address=address, logging_level=logging.WARNING, runtime_env=RUNTIME_ENV, **local)
    except (ConnectionError, ValueError, RuntimeError) as err:
        where = "a new local cluster" if address == "local" else address
        raise SettingsError("--ray", f"cannot connect to {where} ({str(err).splitlines()[0]})") from None
