"""`python -m easd bench`: tokens/s of every way to decode greedily (or, with --temperature, every row sampled under
one protocol: no peers then), in one process, on the same prompts.

Rows, for each backend asked for (`--backend llama.cpp,transformers` loads the pair on both): our
target-only loop; every method of the table that names a `bench` setting, a row per value of it (SD at each k asked
for, `--k 1,2,3,4`; EASD at each τ_H; MTI at each τ; RSD at each δ, with --prm), each read against the method its
table entry names (`bench_against`: EASD against SD); and the backend's own peers. On transformers: its assisted generation (its defaults, and a constant
k with its confidence cut-off disabled). On llama.cpp: llama-cpp-python's own greedy generation
of the target, and a minimal SD loop written directly against llama-cpp-python
(easd.lab.speed.llama_reference), so that what our loop's bookkeeping costs shows as a ratio.

SD also runs with its logits in the model's own dtype (`--signals model`) when transformers'
heads are not float32, so the cost of float32 signals is measured in the same run.

After the ratios, SD's speed at each k is taken apart (easd.method.speed): what a draft token and a
verify pass cost in 1-token target passes, the acceptance per draft position, and Leviathan et
al.'s predicted speed-up with these costs next to the measured one.

Fairness: every method runs a short untimed warm-up first, so one-off costs do not land on
whichever runs first. Then, prompt by prompt, all methods run back to back in an order that
rotates from prompt to prompt, so slow drifts of a shared machine's speed (we saw ±15% between
identical runs) spread evenly over the methods instead of favouring whichever ran early. `--repeats N` makes N
such passes over the prompts: each figure and ratio is then also given per repetition, as its median, its range,
the 95% interval of its mean and the repetitions that would narrow that to ±3% (easd.lab.reports.stats.spread); a ratio's
are of the repetitions' own ratios, whose two rows ran interleaved in the same minutes.
"""

from __future__ import annotations

import contextlib
import resource
import time
from dataclasses import replace

import torch

from ...backends.transformers import float32_head
from ...errors import SettingsError
from ...method.generation import Generation
from ...method.methods import lookup, settings_values, with_values
from ...method.pair import ModelPair
from ...method.prompts import encode_prompt
from ...method.references import PROPOSED, REFERENCE, SPEED_REFERENCE
from ...method.settings import DecodeSettings
from ...method.speed import PassCost, Speed, measure_pass_cost
from ...method.step import Batch
from ...method.trace import Trace
from ..reports.stats import spread
from ..runs.protocol import under
from .timing import BenchPlan, Row, rotated, row_name


def run_benchmark(pairs: list[ModelPair], plan: BenchPlan) -> int:
    """Every way to decode greedily (or under the plan's protocol) on each pair (one per backend), prompt by prompt in
    rotating order; then the ratios.

    Backends run one after the other, not interleaved: llama.cpp and torch each keep their own
    threads busy-waiting for a moment after a pass, which slowed whichever ran next by up to 3×.
    """
    how = "greedy" if plan.protocol is None else plan.protocol.line()
    print(
        f"{len(plan.prompts)} prompts × {plan.repeats}, {plan.max_new_tokens} new tokens, {how}, {torch.get_num_threads()} threads"
    )
    defaults = settings_values(DecodeSettings())
    changed = [f"{name}={value}" for name, value in plan.own.items() if value != defaults[name]]
    if changed:  # a row's name gives its bench setting; these hold for all of them
        print(f"methods' own settings, every row: {', '.join(changed)}")
    rows = {}
    for pair in pairs:
        print(f"bench: {pair.describe()}")
        if pair.backend == "llama.cpp":  # which kernels ran: figures from two machines or builds differ by them
            print(f"  llama.cpp, {pair.info['llama_kernels']} kernels; {pair.info['llama_cpu']}")
        if pair.backend == "transformers":
            print(f"  {signals_memory(pair)}")
        methods = methods_of(pair, plan)
        rows |= {name: Row(name) for name in methods}
        for decode in methods.values():
            decode(plan.prompts[0][:40])  # untimed warm-up on a short prompt
        names = list(methods)
        for repetition in range(plan.repeats):
            for i, prompt in enumerate(plan.prompts):
                turn = repetition * len(plan.prompts) + i
                for j in rotated(len(names), turn):
                    _time_one(rows[names[j]], methods[names[j]], prompt, repetition)
                print(f"  {pair.backend}: prompt {turn + 1}/{len(plan.prompts) * plan.repeats} done", flush=True)
    for row in rows.values():
        print(f"  {row.name:<52} {row.tokens:>6} tokens {row.seconds:>8.2f} s {row.tokens_per_s:>7.2f} tokens/s  {row.rates()}")
    if plan.repeats > 1:
        print("tokens/s, repetition by repetition:")
        for row in rows.values():
            print(f"  {row.name:<52} {spread(row.speeds()).line()}")
    _print_ratios(ratios_of(pairs, plan, rows))
    for pair in pairs:
        _print_speed(pair.backend, plan, rows)
        if plan.protocol is None:  # the page's lanes and the exactness check are greedy SD's
            _print_page_speed(pair, plan, rows)
    if plan.protocol is None:
        for pair in pairs:
            _print_equality(
                pair.backend, rows[row_name(pair.backend, REFERENCE, plan.ks[0])], rows[row_name(pair.backend, SPEED_REFERENCE)]
            )
    print(f"peak RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GB")
    return 0


def methods_of(pair: ModelPair, plan: BenchPlan) -> dict:
    """Name -> prompt -> tokens (or a Trace): our runs, each under the plan's protocol, and the backend's own peers,
    which decode greedily and so run only when the plan does."""
    b, k = pair.backend, plan.ks[0]
    base = with_values(DecodeSettings(method=REFERENCE, k=k, max_new_tokens=plan.max_new_tokens), **plan.own)
    placed = (lambda s: s) if plan.protocol is None else (lambda s: under(plan.protocol, s))  # once a row, not a decode
    target = placed(replace(base, method=SPEED_REFERENCE))
    methods = {row_name(b, SPEED_REFERENCE): lambda p: _ours(pair, p, target)}
    if plan.protocol is not None:
        print(f"  {b}'s own generation and reference loop: not run here: they decode greedily")
    elif b == "transformers":
        methods["transformers assisted (defaults)"] = lambda p: _assisted(pair, p, plan.max_new_tokens, constant_k=None)
        methods[f"transformers assisted (k={k})"] = lambda p: _assisted(pair, p, plan.max_new_tokens, constant_k=k)
    else:
        methods["llama-cpp-python generate (target)"] = lambda p: _llama_generate(pair, p, plan.max_new_tokens)
        methods[f"llama.cpp reference SD loop (k={k})"] = lambda p: _llama_reference_sd(pair, p, k, plan.max_new_tokens)
    for name, values in plan.values.items():
        against = lookup(name).bench_against
        if against not in plan.values and row_name(b, against) not in methods:  # its reference, at the run's settings
            reference = placed(replace(base, method=against))
            methods[row_name(b, against)] = lambda p, reference=reference: _ours(pair, p, reference)
        for value in values:
            settings = placed(with_values(base, method=name, **{lookup(name).bench: value}))
            try:
                lookup(name).check(pair, settings)
            except SettingsError as err:  # this backend cannot run it (SpecGuard's attention on llama.cpp): said, left out
                print(f"  {row_name(b, name, value)}: not run here: {err}")
                continue
            methods[row_name(b, name, value)] = lambda p, settings=settings: _ours(pair, p, settings)
    if b == "transformers" and head_copy_bytes(pair) > 0:  # what float32 signals cost: the same runs with the model's logits
        model_sd = placed(replace(base, signals="model"))
        methods[f"transformers SD (k={k}, {MODEL_LOGITS})"] = lambda p: _ours(pair, p, model_sd)
    return methods


def ratios_of(pairs: list[ModelPair], plan: BenchPlan, rows: dict) -> list[tuple[str, Row, Row]]:
    """Each method's rows against its reference (`bench_against`: target-only, EASD's SD at the first k, RSD's draft
    alone) and against target-only; and the peers' ratios."""
    k, ratios = plan.ks[0], []
    backends = [pair.backend for pair in pairs]
    for b in backends:
        target, sd = rows[row_name(b, SPEED_REFERENCE)], rows[row_name(b, REFERENCE, k)]
        for name, values in plan.values.items():
            against = lookup(name).bench_against
            reference = rows[row_name(b, against, plan.values[against][0]) if against in plan.values else row_name(b, against)]
            for value in values:
                if row_name(b, name, value) not in rows:  # not run on this backend
                    continue
                row = rows[row_name(b, name, value)]
                ratios.append((f"{row.name} ÷ {reference.name.removeprefix(b + ' ')}", row, reference))
                if (
                    against != SPEED_REFERENCE and lookup(against).bench == ""
                ):  # against a plain run: also its cost over the target
                    ratios.append((f"{row.name} ÷ target-only", row, target))
        if b == "transformers" and f"transformers SD (k={k}, {MODEL_LOGITS})" in rows:
            ratios.append(("SD, float32 signals ÷ model-dtype logits", sd, rows[f"transformers SD (k={k}, {MODEL_LOGITS})"]))
        if plan.protocol is not None:  # the peers decode greedily: not run
            continue
        if b == "transformers":
            ratios.append((f"transformers SD ÷ assisted (k={k})", sd, rows[f"transformers assisted (k={k})"]))
        else:
            ratios.append(
                ("llama.cpp target-only ÷ llama-cpp-python generate", target, rows["llama-cpp-python generate (target)"])
            )
            ratios.append((f"llama.cpp SD ÷ reference SD loop (k={k})", sd, rows[f"llama.cpp reference SD loop (k={k})"]))
    if set(backends) == {"llama.cpp", "transformers"}:
        ratios.append(
            ("llama.cpp target-only ÷ transformers target-only", rows["llama.cpp target-only"], rows["transformers target-only"])
        )
    return ratios


def _llama_generate(pair: ModelPair, prompt: str, max_new_tokens: int) -> list[int]:
    from .llama_reference import generate

    ids = encode_prompt(pair, prompt, chat=True)
    return generate(pair.target.path, ids, max_new_tokens, pair.eos_ids, pair.target.threads)


def _llama_reference_sd(pair: ModelPair, prompt: str, k: int, max_new_tokens: int) -> list[int]:
    from .llama_reference import speculative

    return speculative(pair.draft, pair.target, encode_prompt(pair, prompt, chat=True), k, max_new_tokens, pair.eos_ids)


MODEL_LOGITS = "model-dtype logits"


def head_copy_bytes(pair: ModelPair) -> int:
    """Memory float32 signals add: the float32 copies of the pair's bfloat16/float16 lm_heads (shared if one model)."""
    total = 0
    for model in {id(m.module): m.module for m in (pair.draft, pair.target)}.values():
        head = model.get_output_embeddings()
        if float32_head(model) is not head:
            total += head.weight.numel() * 4
    return total


def signals_memory(pair: ModelPair) -> str:
    copies = head_copy_bytes(pair)
    if not copies:
        return "signals: both lm_heads compute in float32 already; float32 signals cost nothing here"
    return f"signals: float32 copies of the lm_heads take {copies / 2**20:.0f} MB (the pair's weights: {_weights_bytes(pair) / 2**20:.0f} MB)"


def _weights_bytes(pair: ModelPair) -> int:
    tensors = {id(t): t for m in (pair.draft.module, pair.target.module) for t in [*m.parameters(), *m.buffers()]}
    return sum(t.numel() * t.element_size() for t in tensors.values())


def _time_one(row: Row, decode, prompt: str, repetition: int) -> None:
    started = time.perf_counter()
    result = decode(prompt)
    seconds = time.perf_counter() - started
    if isinstance(result, Trace):
        row.traces.append(result)
        result = result.token_ids
    row.outputs.append(result)
    lap = row.laps.setdefault(repetition, [0, 0.0])
    lap[0], lap[1] = lap[0] + len(result), lap[1] + seconds


def _ours(pair: ModelPair, prompt: str, settings: DecodeSettings) -> Trace:
    return Generation(pair, prompt, settings).run()


@torch.inference_mode()
def _assisted(pair: ModelPair, prompt: str, max_new_tokens: int, constant_k: int | None) -> list[int]:
    ids = torch.tensor([encode_prompt(pair, prompt, chat=True)], device=pair.device)
    with _assistant_settings(pair.draft.module, constant_k):
        out = pair.target.module.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            assistant_model=pair.draft.module,
            do_sample=False,
            max_new_tokens=max_new_tokens,
        )
    return out[0, ids.shape[1] :].tolist()


@contextlib.contextmanager
def _assistant_settings(draft, constant_k: int | None):
    """Constant k: exactly k drafts per round, without the confidence cut-off that ends drafts early."""
    config = draft.generation_config
    names = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")
    saved = {name: getattr(config, name) for name in names}
    if constant_k is not None:
        config.update(
            num_assistant_tokens=constant_k, num_assistant_tokens_schedule="constant", assistant_confidence_threshold=0.0
        )
    try:
        yield
    finally:
        config.update(**saved)


def _print_ratios(pairs: list[tuple[str, Row, Row]]) -> None:
    """Each ratio of tokens/s over all repetitions; with several, its median and spread over the repetitions' own
    ratios (the two rows ran interleaved within each, so a repetition's ratio compares like with like)."""
    print("ratios:")
    for label, a, b in pairs:
        print(f"  {label:<56} {a.tokens_per_s / b.tokens_per_s:.3f}×")
        if len(a.laps) > 1:
            print(f"  {'':<56} {spread([x / y for x, y in zip(a.speeds(), b.speeds())]).line('{:.3f}×')}")


def _print_speed(backend: str, plan: BenchPlan, rows: dict) -> None:
    """SD's speed taken apart at each k (easd.method.speed): measured costs, acceptance, predicted against measured."""
    target = rows[row_name(backend, SPEED_REFERENCE)].traces
    one_pass = sum(t.stats.target_seconds for t in target) / sum(t.stats.target_calls for t in target)
    target_rate = sum(len(t.records) for t in target) / sum(t.stats.seconds for t in target)
    print(f"{backend}: SD's speed, explained (a 1-token target pass: {1000 * one_pass:.1f} ms; costs in such passes)")
    print(
        f"  {'k':>2} {'c':>5} {'r':>5} {'α by draft position':<32} {'tokens/pass':>11} {'predicted':>9} {'measured':>8} {'GPU-like':>8}"
    )
    for k in plan.ks:
        speed = Speed.of(rows[row_name(backend, REFERENCE, k)].traces, PassCost(one_pass), target_rate)
        positions = " ".join(f"{a:.2f}" for a in speed.alpha_by_position)
        print(
            f"  {k:>2} {speed.c:>5.2f} {speed.r:>5.2f} {positions:<32} {speed.tokens_per_pass:>11.2f} "
            f"{speed.predicted:>8.2f}× {speed.measured:>7.2f}× {speed.gpu_like:>7.2f}×"
        )


def _print_page_speed(pair: ModelPair, plan: BenchPlan, rows: dict) -> None:
    """The SD lane's c and r as the app's Speed panel reads them: its SD and EASD lanes share every pass, each pass read
    against a 1-token target pass over as many rows (measured as the app measures it when a pair loads); and, as the
    panel once read them, against a pass over one row. The first should match the solo figures above at the same k."""
    k, cost = plan.ks[0], measure_pass_cost(pair)
    sd = DecodeSettings(method=REFERENCE, max_new_tokens=plan.max_new_tokens, k=k)
    lanes = [
        Batch(pair, [Generation(pair, p, sd), Generation(pair, p, replace(sd, method=PROPOSED))]).run()[0] for p in plan.prompts
    ]
    shared, one_row = Speed.of(lanes, cost), Speed.of(lanes, PassCost(cost.one_row))
    alone = Speed.of(rows[row_name(pair.backend, REFERENCE, k)].traces, PassCost(cost.one_row))
    print(
        f"{pair.backend}: the page's SD lane at k={k}, sharing its passes with the EASD lane ({shared.rows:.2f} rows a pass;"
        f" a 1-token target pass: {1000 * cost.one_row:.1f} ms for one row, +{1000 * cost.per_extra_row:.1f} ms a row more)"
    )
    print(f"  against a pass over as many rows (the panel): c {shared.c:.2f}, r {shared.r:.2f}")
    print(f"  against a pass over one row (the panel before): c {one_row.c:.2f}, r {one_row.r:.2f}")
    print(f"  solo, against the same one-row pass:            c {alone.c:.2f}, r {alone.r:.2f}")


def _print_equality(backend: str, sd: Row, target: Row) -> None:
    """Greedy SD must reproduce target-only: exactly in float32 and in llama.cpp's exact mode; bfloat16 may flip near-ties."""
    same = sum(a == b for a, b in zip(sd.outputs, target.outputs))
    print(f"{backend}: greedy SD text equals target-only on {same} of {len(sd.outputs)} prompts")
    for i, (a, b) in enumerate(zip(sd.outputs, target.outputs)):
        if a != b:
            first = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            print(f"  prompt {i + 1}: first difference at token {first}")
