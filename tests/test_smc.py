"""SMC-SD (easd/method/methods/smc.py): what it samples from, its resampling, its cycles on the tiny pair, and that its
lane only ever grows."""

import collections
import itertools
import math

import pytest
import torch
from conftest import PROMPTS

from easd.method import acceptance as acc
from easd.method.generation import Generation
from easd.method.methods import make_settings
from easd.method.methods.smc import (
    SmcRecord,
    SmcSettings,
    after_cycle,
    choose,
    effective_sample_size,
    normalised,
    resample,
    weigh,
)
from easd.serving.chunks import GenerationSnapshot, decode_chunk
from easd.traces import files as trace_io

SMC = dict(method="smc", max_new_tokens=24)


# A two-token world in which the draft and the target are Markov chains that disagree: the draft's favourite next
# token is the target's least likely one after each token. Rows: the last token; columns: the next.
TARGET = torch.tensor([[0.8, 0.2], [0.3, 0.7]], dtype=torch.float64)
DRAFT = torch.tensor([[0.3, 0.7], [0.6, 0.4]], dtype=torch.float64)
K, CYCLES = 2, 2  # two cycles of two drafts and a bonus: sequences of 6 tokens, 64 of them


def _target_distribution() -> dict[tuple, float]:
    """The target's exact distribution over the 64 sequences, the first token following a 0."""
    exact = {}
    for sequence in itertools.product(range(2), repeat=CYCLES * (K + 1)):
        chain = (0, *sequence)
        exact[sequence] = math.prod(float(TARGET[a, b]) for a, b in zip(chain, chain[1:]))
    return exact


def _smc_output(particles: int, final: str, generator: torch.Generator) -> tuple:
    """One SMC-SD run in that world, as smc.py runs its cycles (its pure maths: `weigh`, `after_cycle` at the default ESS
    threshold and resampling, `choose`): each particle drafts K tokens from the draft, is weighed by p/q in log space,
    takes the target's bonus; the population is resampled when its ESS falls below N/2. -> the output sequence"""
    own = SmcSettings()
    sequences, last = [[] for _ in range(particles)], torch.zeros(particles, dtype=torch.long)
    log_w = torch.zeros(particles, dtype=torch.float64)
    for _ in range(CYCLES):
        before, drafted = [], []
        for _ in range(K):
            before.append(last)
            last = torch.multinomial(DRAFT[last], 1, generator=generator).squeeze(-1)
            drafted.append(last)
        before, drafted = torch.stack(before, 1), torch.stack(drafted, 1)  # [N, K]
        log_w = log_w + weigh(TARGET.log()[before], DRAFT.log()[before], drafted)
        last = torch.multinomial(TARGET[last], 1, generator=generator).squeeze(-1)  # the bonus
        sequences = [s + drafted[i].tolist() + [int(last[i])] for i, s in enumerate(sequences)]
        parents = after_cycle(log_w, own.ess, own.resampling, generator)
        if parents is not None:
            sequences, last = [list(sequences[a]) for a in parents], last[parents]
            log_w = torch.zeros(particles, dtype=torch.float64)
    return tuple(sequences[choose(log_w, final, generator)])


def _distance(particles: int, final: str, trials: int, generator: torch.Generator) -> float:
    """Total variation between the outputs of `trials` runs and the target's exact distribution."""
    counts = collections.Counter(_smc_output(particles, final, generator) for _ in range(trials))
    return 0.5 * sum(abs(counts[sequence] / trials - p) for sequence, p in _target_distribution().items())


@pytest.mark.slow  # 4,000 runs at each of 3 particle counts, 13 s: the full suite's, not the quick tier's
def test_its_default_output_approaches_the_targets_distribution_as_particles_grow():
    """At its defaults (the output drawn by weight, systematic resampling below ESS N/2), over two cycles of two drafts
    and a bonus: the output's distance from the target's distribution over the 64 sequences shrinks as the particles
    grow (importance resampling is consistent; its bias is of order 1/N). 4,000 runs each: sampling alone leaves about
    0.03 (the distance of 4,000 draws of the target itself). Measured: 0.65, 0.40, 0.08 at N = 1, 4, 32. Max-weight,
    the heaviest particle since the last resampling, does not approach it (0.42 at N = 4, 0.40 at N = 32)."""
    generator = torch.Generator().manual_seed(0)
    distance = {n: _distance(n, "sample", 4000, generator) for n in (1, 4, 32)}
    assert distance[1] > distance[4] > 2 * distance[32] and distance[32] < 0.12, distance
    heaviest = _distance(32, "max-weight", 4000, generator)
    assert heaviest > 3 * distance[32], (heaviest, distance)


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
    assert (
        after_cycle(even, 0.5, "systematic", generator) is None and len(after_cycle(lopsided, 0.5, "systematic", generator)) == 4
    )
    assert after_cycle(torch.zeros(1, dtype=torch.float64), 1.0, "systematic", generator) is None  # one particle: never
    # ties of max-weight go to the first particle, whatever its length; a sample is drawn by weight
    assert choose(torch.tensor([-1.0, 0.0, 0.0]), "max-weight", generator) == 1
    assert choose(lopsided, "sample", generator) == 0


def test_weights_are_computed_in_log_space():
    """A drafted token far in the target's tail: its float32 probability underflows to 0 (log: -inf, the particle lost),
    its log-probability stays finite."""
    logits = torch.tensor([[0.0, -200.0]])
    far = acc.Sampling(0.7)
    assert float(torch.log(far.probs(logits))[0, 1]) == float("-inf")
    weight = weigh(far.log_probs(logits), acc.Sampling(1.0).log_probs(torch.zeros(1, 2)), torch.tensor([1]))
    assert math.isfinite(float(weight)) and float(weight) == pytest.approx(-200 / 0.7 + math.log(2), rel=1e-6)


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


def test_a_runs_weights_are_those_of_fresh_passes_at_its_temperatures(hf_tiny_pair):
    """After every cycle of a real run, each particle's log-weight equals Σ log p̃(y) − log q̃(y) over the tokens it
    drafted since the last resampling, recomputed here by fresh passes of both models over its whole text (no cache)
    at the target's and the draft's temperatures: the caches, the copies at resampling and the temperatures all hold."""
    pair = hf_tiny_pair
    settings = make_settings(**SMC, smc_particles=3, smc_draft_temperature=0.9, smc_target_temperature=0.6, seed=3)
    generation = Generation(pair, PROMPTS[0], settings)
    checked = 0
    for _ in generation:
        population = generation.state
        if population.chosen is not None:
            break
        records = [r for p in population.particles for r in p.records]
        since = max((r.own.smc_cycle for r in records if r.own.smc_resampled), default=-1)  # weights start again after it
        for particle in population.particles:
            text = generation.prompt_ids + particle.tokens
            with torch.no_grad():
                target = pair.target.module(torch.tensor([text])).logits[0, :, : pair.vocab_size].double()
                draft = pair.draft.module(torch.tensor([text])).logits[0, :, : pair.vocab_size].double()
            expected = 0.0
            for record in particle.records:
                if record.origin == "smc_draft" and record.own.smc_cycle > since:
                    at = generation.prompt_length + record.position - 1  # the logits that predict this token
                    log_p, log_q = torch.log_softmax(target[at] / 0.6, -1), torch.log_softmax(draft[at] / 0.9, -1)
                    expected += float(log_p[record.token_id] - log_q[record.token_id])
            assert particle.log_w == pytest.approx(expected, abs=1e-3), (population.cycle, particle.tokens)
            checked += 1
    assert checked >= 9 and any(r.own.smc_resampled for p in generation.state.particles for r in p.records)


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
    assert "the most consistent was scored by the draft&#x27;s signals" in guard and "threshold 0.7" in guard
    # issue 74: the particles and the candidate steps in a table of their own, this token's marked ◆, above the
    # token's top candidates; the ESS threshold said whether or not the cycle resampled
    for html in (smc, guard):
        own, tokens = html.split('class="candidates"')
        assert 'class="own-list"' in own
        assert "▸ drafted · ★ emitted" in tokens and "◆" not in tokens and own.count("◆ ") == 2  # the row and the hint
    mine = traces["left"].records[0].own.smc_particle
    assert f"<td>◆ {mine}</td>" in smc and "× 3 = " in smc
    assert f"<td>◆ {traces['right'].records[0].own.specguard_chosen}</td>" in guard
    legend = str(legend_html(["smc", "specguard"]))
    assert all(label in legend for label in ("particle&#x27;s draft", "draft step kept", "step recomputed (target)"))
