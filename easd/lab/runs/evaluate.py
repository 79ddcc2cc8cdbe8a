"""`python -m easd eval` and `sweep`: accuracy, speed and intervention rate on reasoning problems.

Each problem is decoded by every requested variant (method, rule, thresholds), once per sample.
EASD variants reuse the SD run of the same problem and seed up to their first penalty
(`easd.prefix`), so the shared prefix is decoded once. Rows go to `results.csv` as soon as a
problem is done, so a crash, Ctrl-C or kill loses at most the problem in flight, and `--resume`
picks up where it stopped. `summary.csv`, `paired.csv` and `report.html` are rewritten at the end.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import quote

from tqdm import tqdm

from ...errors import EasdError, SettingsError, shown
from ...files import file_stem
from ...method.generation import Generation
from ...method.methods import METHODS, lookup, with_values
from ...method.pair import ModelPair
from ...method.prefix import easd_start
from ...method.prompts import encode_prompt
from ...method.seam import free_memory, row_bytes
from ...method.settings import DecodeSettings
from ...method.step import Batch
from ...method.summary import summarize
from ...method.trace import Trace
from ...traces import files as trace_io
from ..grading.answers import GRADERS, extract_answer, is_correct
from ..grading.problems import Problem
from .results_table import prepare_folder


@dataclass(frozen=True)
class Variant:
    label: str  # how results name it: sd, easd, easd:no_overlap, easd@1.5/0.6, beam:4 …
    settings: DecodeSettings


def parse_methods(text: str, base: DecodeSettings) -> list[Variant]:
    """`target,draft,sd,easd,mti,easd:no_overlap,beam:4,beam:4/0` → variants; SD first, so EASD variants can reuse it.

    A method's name alone runs it at `base`'s settings; NAME:SPEC as its table entry reads SPEC (`Method.variant`:
    easd:RULE at one of the paper's ablations, beam:N or beam:N/α with N beams and a length penalty α)."""
    variants = []
    for label in [part.strip() for part in text.split(",") if part.strip()]:
        name, _, spec = label.partition(":")
        if name not in METHODS:
            forms = ", ".join(m.variant_form for m in METHODS.values() if m.variant_form)
            raise EasdError(f"--methods: {label!r} is not one of {', '.join(METHODS)}" + (f", {forms}" if forms else ""))
        method = METHODS[name]
        try:
            settings = method.variant(spec, base) if spec else replace(base, method=name)
        except (ValueError, SettingsError) as err:
            raise EasdError(f"--methods: {label!r}: {err}") from None
        variants.append(Variant(label, settings))
    if not variants:
        raise EasdError("--methods: give at least one method, e.g. sd,easd")
    labels = [v.label for v in variants]
    twice = next((label for label in labels if labels.count(label) > 1), None)
    if twice:  # its rows would share one name, and its problems would never count as done
        raise EasdError(f"--methods: {shown(twice)} is given twice; give each method once")
    leaders = {method.follows for method in METHODS.values()}  # SD: EASD resumes its run, so it decodes first
    return sorted(variants, key=lambda v: v.settings.method not in leaders)


def grid_variants(base: DecodeSettings, method: str, grid: dict[str, list[float]]) -> list[Variant]:
    """The method's reference run (the method it follows, EASD's SD; else target-only), then the method at every point
    of its grid (each setting it sweeps by its values, in the order its table entry names them), for `sweep`. A point
    is labelled by its values: easd@1.5/0.8, mti@1/1.5, rsd@0.7."""
    names = lookup(method).grid
    reference = lookup(method).follows or "target"
    variants = [
        Variant(grid_label(method, point), with_values(base, method=method, **dict(zip(names, point))))
        for point in itertools.product(*(grid[name] for name in names))
    ]
    return [Variant(reference, replace(base, method=reference)), *variants]


def grid_label(method: str, point) -> str:
    """How results name a point of a method's grid: its values in the grid's order (easd@1.5/0.8)."""
    return f"{method}@{'/'.join(f'{v:g}' for v in point)}"


# The methods `sweep --grid` runs, and the settings each sweeps (the methods' table says which): EASD's τ_H and τ_O,
# MTI's threshold τ and guidance strength ω, RSD's δ.
GRIDS = {method.name: method.grid for method in METHODS.values() if method.grid}


# --- the work -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkItem:
    """One problem with one sample (seed offset), and the variants it still needs."""

    problem: Problem
    sample: int
    variants: tuple[Variant, ...]
    # decoded again, their rows not written twice, only so that variants that follow them (EASD after SD) start at
    # their first penalty: a resumed folder whose SD rows are done when EASD's grid points are not
    leaders: tuple[Variant, ...] = ()


# A runner decodes work items and yields each item with its (result row, trace) pairs as it
# finishes, in any order: `LocalRunner` here, or `easd.lab.runs.cluster`'s Ray runner.
Runner = Callable[[list[WorkItem]], Iterator[tuple[WorkItem, list[tuple[dict, Trace]]]]]


def pending_work(problems: list[Problem], variants: list[Variant], samples: int, done: set) -> list[WorkItem]:
    """Every (problem, sample) with the variants that have no row in results.csv yet, and the done ones they follow."""
    items = []
    for problem in problems:
        for sample in range(samples):
            missing = tuple(v for v in variants if (problem.id, v.label, sample) not in done)
            if missing:
                leaders = tuple(v for v in variants if v not in missing and _followed(v, missing))
                items.append(WorkItem(problem, sample, missing, leaders))
    return items


DEFAULT_BATCH_SIZE = 8  # rows per forward pass: on a 2-core CPU a pass over 8 rows costs ~3x one row (docs/benchmarks.md)


def decode_items(
    pair: ModelPair, items: list[WorkItem], batch_size: int = DEFAULT_BATCH_SIZE
) -> Iterator[tuple[WorkItem, list[tuple[dict, Trace]]]]:
    """Decode work items in one batch; yield each item with its (result row, trace) pairs once all its variants are done.

    Every variant of an item is a generation. An item's EASD variants wait for its SD generation and then
    start from SD's checkpoint at their first penalty (easd.method.prefix), ahead of the others in line.
    New items join as generations leave, so the batch stays full until the work runs out.
    """
    batch = Batch(pair, max_rows=batch_size)
    line = deque(items)
    purpose: dict[int, tuple[WorkItem, Variant, float]] = {}  # id(generation) -> what it is for
    done: dict[int, dict[str, tuple[dict, Trace]]] = {}  # id(item) -> finished variants

    def add(generation: Generation, item: WorkItem, variant: Variant, saved: float, first: bool = False) -> None:
        purpose[id(generation)] = (item, variant, saved)
        batch.add(generation, first=first)

    def start(item: WorkItem) -> None:
        done[id(item)] = {}
        decoded = item.leaders + item.variants
        sd = next((v for v in decoded if _followed(v, item.variants)), None)
        followers = [v for v in item.variants if sd and lookup(v.settings.method).follows == sd.settings.method]
        for variant in decoded:
            if variant not in followers:
                generation = Generation(
                    pair,
                    item.problem.prompt,
                    _seeded(variant, item),
                    keep_kv=variant is sd and bool(followers),
                    question=item.problem.question,
                    system=item.problem.system,
                )
                add(generation, item, variant, 0.0)

    def finish(item: WorkItem, variant: Variant, trace: Trace, saved: float):
        done[id(item)][variant.label] = (result_row(item.problem, variant.label, item.sample, trace, saved), trace)
        if len(done[id(item)]) == len(item.variants):
            finished = done.pop(id(item))
            yield item, [finished[v.label] for v in item.variants]

    def fill() -> None:
        while line and batch.load < batch_size:
            start(line.popleft())

    while line or batch.load:
        fill()
        for block in batch:
            generation = block.generation
            if not generation.done:
                continue
            item, variant, saved = purpose.pop(id(generation))
            if _followed(variant, item.variants):
                for follower in [v for v in item.variants if lookup(v.settings.method).follows == variant.settings.method]:
                    begin = easd_start(generation, _seeded(follower, item))
                    if begin.trace is not None:
                        yield from finish(item, follower, begin.trace, begin.saved_seconds)
                    else:
                        add(begin.generation, item, follower, begin.saved_seconds, first=True)
                generation.final = None  # the followers hold what they need
            if variant not in item.leaders:
                yield from finish(item, variant, generation.trace, saved)
            fill()


def _followed(variant: Variant, variants: tuple[Variant, ...]) -> bool:
    """Whether another variant's method follows this one's until its first intervention (EASD follows SD), so that it
    can resume this one's run instead of decoding the shared prefix again (easd.method.prefix)."""
    return any(lookup(v.settings.method).follows == variant.settings.method for v in variants)


def _seeded(variant: Variant, item: WorkItem) -> DecodeSettings:
    return replace(variant.settings, seed=variant.settings.seed + item.sample)


@dataclass
class LocalRunner:
    """Decodes work items in this process, on a pair loaded here, `batch_size` rows at a time."""

    pair: ModelPair
    batch_size: int = DEFAULT_BATCH_SIZE

    def __call__(self, items: list[WorkItem]) -> Iterator[tuple[WorkItem, list[tuple[dict, Trace]]]]:
        # refused before anything is decoded: a prompt too long for the context, or more rows than memory holds
        prompts = [_encoded(self.pair, p) for p in {i.problem.id: i.problem for i in items}.values()]
        settings = [v.settings for item in items for v in item.leaders + item.variants]
        new_tokens = max((s.max_new_tokens for s in settings), default=0)
        # a row's cache holds its prompt and new tokens within the context, and a block's drafts (Generation.capacity)
        longest = min(max((len(p) for p in prompts), default=0) + new_tokens, self.pair.context_length)
        check_batch_fits(self.pair, min(self.batch_size, len(settings)), longest + max((s.k + 1 for s in settings), default=0))
        return decode_items(self.pair, items, self.batch_size)

    def alone(self) -> LocalRunner:
        """The same pair one row at a time, in the order given: for timings that compare like with like."""
        return LocalRunner(self.pair, 1)


def _encoded(pair: ModelPair, problem: Problem) -> list[int]:
    """The problem's prompt as token ids, or a SettingsError in the words of a command that reads problems from --data."""
    try:
        return encode_prompt(pair, problem.prompt, True, problem.system)
    except SettingsError as err:
        raise SettingsError("--data", f"problem {shown(problem.id)}: its prompt {err.message}") from None


MEMORY_SHARE = 0.8  # of the free memory, what the KV caches may take; the rest is for activations and logits


def check_batch_fits(pair: ModelPair, rows: int, tokens_per_row: int) -> None:
    """Refuse, with the figures, a batch whose KV caches would not fit in the free memory: naming --max-new-tokens
    where not even one row fits."""
    per_row = row_bytes((pair.draft, pair.target), tokens_per_row)
    free = free_memory(pair.device) * MEMORY_SHARE
    if per_row > free:
        raise SettingsError(
            "--max-new-tokens",
            f"a row of up to {tokens_per_row:,} tokens needs about {per_row / 2**30:.1f} GB of KV cache, but only about "
            f"{free / 2**30:.1f} GB is free here: give fewer new tokens",
        )
    if rows * per_row > free:
        raise SettingsError(
            "--batch-size",
            f"{rows:,} rows of up to {tokens_per_row:,} tokens need about {rows * per_row / 2**30:.1f} GB of KV cache "
            f"({per_row / 2**20:.0f} MB a row), but only about {free / 2**30:.1f} GB is free here: use at most {int(free // per_row)}",
        )


def result_row(problem: Problem, label: str, sample: int, trace: Trace, saved_seconds: float) -> dict:
    text = trace.text  # joined from every record: build it once
    prediction, rule = extract_answer(text)
    summary = summarize(trace)  # the one place that counts acceptance and penalties
    return {
        "problem_id": problem.id,
        "method": label,
        "sample": sample,
        "seed": trace.settings.seed,
        "prediction": "" if prediction is None else prediction,
        "extraction": rule,
        "gold": problem.gold,
        "correct": is_correct(prediction, problem.gold, problem.format),
        "new_tokens": summary["new_tokens"],
        "seconds": round(summary["seconds"] or 0.0, 4),
        "tokens_per_s": round(summary["tokens_per_s"] or 0.0, 4),
        "num_drafts": summary["num_drafts"],
        "num_draft_tokens": summary["num_draft_tokens"],
        "mean_acceptance_length": summary["mean_acceptance_length"],
        "draft_acceptance_rate": summary["draft_acceptance_rate"],
        "accepted": summary["accepted"],
        "examined": summary["examined"],
        "penalized": summary["penalized"],
        "interventions": summary["interventions"],
        "fragile_penalties": summary["fragile_penalties"],
        "first_penalty_position": summary["first_penalty_position"],
        "target_calls": summary["target_calls"],
        "draft_calls": summary["draft_calls"],
        "stop_reason": summary["stop_reason"],
        "saved_seconds": round(saved_seconds, 4),
        "tau_h": trace.settings.tau_h,
        "tau_o": trace.settings.tau_o,
        "text": text,
    }


# --- the whole run ------------------------------------------------------------------------------


def run_evaluation(
    runner: Runner,
    problems: list[Problem],
    variants: list[Variant],
    samples: int,
    out: Path,
    config: dict,
    resume: bool = False,
    keep_traces: bool = False,
    progress: bool = True,
) -> list[dict]:
    """Decode every (problem, sample, variant) not done yet, appending rows as items finish; returns all rows.

    Only this function writes results.csv, one work item at a time, so a crash, Ctrl-C or kill
    loses at most the items in flight, whichever runner decodes them.
    """
    results = prepare_folder(out, config, resume)
    rows = results.read()
    traces_dir = out / "traces" if keep_traces else None
    if traces_dir:
        traces_dir.mkdir(exist_ok=True)
        traced = [row for row in rows if trace_path(traces_dir, row).is_file()]
        if len(traced) < len(rows):  # a row without its trace (`--traces` added later, or a kill between the two): again
            rows = traced
            results.rewrite(rows)
    done = {(r["problem_id"], r["method"], int(r["sample"])) for r in rows}
    items = pending_work(problems, variants, samples, done)
    grader = config.get("grader", GRADERS[0])
    skipped = len(problems) * samples - len(items)
    with tqdm(
        total=len(problems) * samples, initial=skipped, desc="problems", unit="problem", disable=not progress, dynamic_ncols=True
    ) as bar:
        for item, finished in runner(items):
            # the traces before the rows: a kill between the two leaves a trace written again, not a row without one
            if traces_dir is not None:
                for row, trace in finished:
                    trace_io.write_json([trace], traces_dir / trace_name(row))
            results.append([_graded(row, item.problem, grader) for row, _ in finished])
            bar.update()
    return results.read()


def _graded(row: dict, problem: Problem, grader: str) -> dict:
    """The row with `correct` by the folder's grader (result_row marks it by ours, the default)."""
    if grader == GRADERS[0]:
        return row
    return row | {"correct": is_correct(row["prediction"] or None, problem.gold, problem.format, grader)}


def trace_name(row: dict, stem=file_stem) -> str:
    """The file under --out/traces that holds a result row's trace (`eval --traces`): named by its problem id's
    file_stem (any id, of any length, names a file of its own), its method and its sample."""
    return f"{stem(str(row['problem_id']))}-{row['method'].replace(':', '_').replace('/', '_')}-s{row['sample']}.json"


def trace_path(traces: Path, row: dict) -> Path:
    """Where a result row's trace is in a folder's traces/: its trace_name, or in a folder written before that name,
    the name it had then (the id %-quoted) where only that file is there."""
    path = traces / trace_name(row)
    before = traces / trace_name(row, stem=lambda key: quote(key, safe=""))
    try:
        return before if not path.exists() and before.is_file() else path
    except OSError:  # that old name is too long for the file system: it was never written
        return path
