"""SMC-SD (easd/method/methods/smc.py): what it samples from, its resampling, its cycles on the tiny pair, and that its
lane only ever grows."""

import pytest
import torch
from conftest import PROMPTS

from easd.method.generation import Generation
from easd.method.methods import make_settings
from easd.method.methods.smc import SmcRecord, choose, effective_sample_size, log_weight, normalised, resample
from easd.serving.chunks import GenerationSnapshot, decode_chunk
from easd.traces import files as trace_io

SMC = dict(method="smc", max_new_tokens=24)


def _distributions(vocab: int = 6):
    """A target p and a draft q that disagree: the draft's favourite is the target's least likely token."""
    p = torch.tensor([0.40, 0.25, 0.15, 0.10, 0.07, 0.03])[:vocab]
    q = torch.tensor([0.05, 0.10, 0.15, 0.20, 0.20, 0.30])[:vocab]
    return p / p.sum(), q / q.sum()


def _selected_frequencies(particles: int, trials: int, generator: torch.Generator) -> torch.Tensor:
    """One SMC-SD cycle of one drafted token, many times: each particle drafts y ~ q and is weighed by p(y)/q(y)
    (`log_weight`), and the output is drawn by weight (`choose`, final="sample"). -> how often each token is output."""
    p, q = _distributions()
    counts = torch.zeros(len(p))
    for _ in range(trials):
        drafted = torch.multinomial(q, particles, replacement=True, generator=generator)
        log_w = torch.tensor([log_weight(p[None], q[None], y[None]) for y in drafted], dtype=torch.float64)
        counts[drafted[choose(log_w, [1] * particles, "sample", generator)]] += 1
    return counts / trials


def test_its_output_approaches_the_targets_distribution_as_particles_grow():
    """With one particle the output is the draft's token (q); as particles grow, weighing and drawing by weight make
    it the target's (p): importance resampling, consistent as N → ∞. Total variation from p, with 4,000 trials each
    (its standard error about 0.01): it must shrink from TV(q, p) = 0.52 towards 0 (importance resampling's bias is
    of order 1/N: at N = 32 about 0.06 for this draft, which the target's likeliest token surprises most)."""
    generator = torch.Generator().manual_seed(0)
    p, q = _distributions()
    distance = {n: 0.5 * float((_selected_frequencies(n, 4000, generator) - p).abs().sum()) for n in (1, 4, 32)}
    assert abs(distance[1] - 0.5 * float((q - p).abs().sum())) < 0.05
    assert distance[1] > distance[4] > distance[32] and distance[32] < 0.1, distance


def test_effective_sample_size_and_systematic_resampling():
    even, lopsided = torch.zeros(4, dtype=torch.float64), torch.tensor([0.0, -50.0, -50.0, -50.0], dtype=torch.float64)
    assert effective_sample_size(even) == pytest.approx(4) and effective_sample_size(lopsided) == pytest.approx(1)
    assert normalised(torch.full((3,), float("-inf"))).tolist() == pytest.approx([1 / 3] * 3)  # no weight anywhere: even
    weights = torch.log(torch.tensor([0.5, 0.25, 0.125, 0.125], dtype=torch.float64))
    generator = torch.Generator().manual_seed(1)
    for _ in range(50):  # systematic: each particle gets ⌊N·w⌋ or ⌈N·w⌉ offspring
        ancestors = resample(weights, "systematic", generator)
        assert [ancestors.count(i) for i in range(4)] in ([2, 1, 1, 0], [2, 1, 0, 1], [2, 1, 1, 0])
    assert sorted(set(resample(lopsided, "multinomial", generator))) == [0]


@pytest.fixture
def smc_run(tiny_pair):
    return Generation(tiny_pair, PROMPTS[0], make_settings(**SMC, smc_particles=4)).run()


def test_a_run_records_its_cycles_weights_and_resampling(smc_run):
    records = smc_run.records
    assert len(records) == SMC["max_new_tokens"] and {r.origin for r in records} <= {"smc_draft", "smc_bonus"}
    cycles = {}
    for record in records:
        assert isinstance(record.own, SmcRecord) and len(record.own.smc_population) == 4
        cycles.setdefault(record.own.smc_cycle, []).append(record)
    for cycle in cycles.values():  # a cycle's tokens: its particle's drafts, then the target's bonus
        weights = [share for _, _, share in cycle[0].own.smc_population]
        assert sum(weights) == pytest.approx(1) and cycle[0].own.smc_sample_size == pytest.approx(1 / sum(w * w for w in weights))
        assert cycle[0].own.smc_resampled == (cycle[0].own.smc_sample_size < 0.5 * 4)
    assert smc_run.stats.target_calls >= len(cycles) and smc_run.stats.draft_calls >= len(cycles)


def test_one_particle_with_no_resampling_is_draft_then_bonus(tiny_pair):
    """N = 1: every cycle keeps its k drafts and adds the target's bonus; the weight never matters."""
    trace = Generation(tiny_pair, PROMPTS[1], make_settings(**SMC, k=3, smc_particles=1)).run()
    origins = [r.origin for r in trace.records]
    assert origins[:8] == ["smc_draft"] * 3 + ["smc_bonus"] + ["smc_draft"] * 3 + ["smc_bonus"]
    assert not any(r.own.smc_resampled for r in trace.records)


def test_its_lane_only_grows_and_its_trace_reads_back(tiny_pair, tmp_path):
    """The lane streams what every particle agrees on, then the chosen particle's rest: records are never taken back."""
    generation = Generation(tiny_pair, PROMPTS[2], make_settings(**SMC, smc_particles=3))
    seen = []
    for block in generation:
        seen += block.records
    assert seen == generation.trace.records and [r.position for r in seen] == list(range(len(seen)))
    for name in ("t.csv", "t.json"):
        trace_io.save([generation.trace], tmp_path / name)
        [back] = trace_io.load(tmp_path / name)
        assert back.records == generation.trace.records


def test_the_same_seed_decodes_the_same_and_in_chunks_too(tiny_pair):
    settings = make_settings(**SMC, smc_particles=3, seed=5)
    first, again = (Generation(tiny_pair, PROMPTS[0], settings).run() for _ in range(2))
    assert first.token_ids == again.token_ids
    snapshot, records = GenerationSnapshot.of(Generation(tiny_pair, PROMPTS[0], settings)), []
    while True:  # ZeroGPU's rounds: a fresh start from a snapshot, its particles' caches rebuilt from their tokens
        [progress] = decode_chunk(tiny_pair, [snapshot], max_steps=2)
        records += [r for block in progress.blocks for r in block.records]
        if progress.stop_reason is not None:
            break
        snapshot = progress.snapshot
    assert [r.token_id for r in records] == first.token_ids


def test_either_lane_runs_it_beside_specguard_and_the_inspector_says_why(hf_tiny_pair):
    """The app's comparison: SMC-SD in one lane, SpecGuard in the other, one batch; each token's inspector names
    what decided it (the particles' weights and ESS; the step's candidates and scores)."""
    from easd.method.compare import Comparison
    from easd.method.whatif import RuleView
    from easd.render.inspector import inspector_html
    from easd.render.lanes import legend_html

    settings = make_settings(max_new_tokens=16, specguard_delimiter=" ", smc_particles=3)
    traces = Comparison(hf_tiny_pair, PROMPTS[0], settings, methods={"left": "smc", "right": "specguard"}).run()
    assert [len(t.records) for t in traces.values()] == [16, 16]
    smc = str(inspector_html("left", traces["left"], traces["left"].records[0], RuleView.of(settings)))
    assert "particles each drafted" in smc and "effective sample size" in smc and "particle, its cycle" in smc
    guard = str(inspector_html("right", traces["right"], traces["right"].records[0], RuleView.of(settings)))
    assert "candidates and the most consistent was checked" in guard and "threshold 0.7" in guard
    legend = str(legend_html())
    assert all(label in legend for label in ("particle&#x27;s draft", "draft step kept", "step recomputed (target)"))
