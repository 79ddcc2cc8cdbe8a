"""SMC-SD (Emara, Barba da Costa, Chang, Freer, Vieira, Cotterell and Abdelfattah, arXiv 2604.15672): speculative
decoding without rejection. N particles each draft k tokens; the target scores every particle's tokens in one pass of
fixed size; each particle keeps all its tokens, one more from the target (the bonus), and a weight for how much
likelier the target finds them than the draft did; when the weights grow uneven the particles are resampled by
weight, and at the end one particle, drawn by weight, is the output. Nothing is ever rolled back.

One cycle, for every unfinished particle i (docs/method.md, "SMC-SD"; as the authors' code abdelfattah-lab/smcsd
does it, the paper's text beyond its abstract was not reachable here):
  1. the draft proposes y_1..y_k, each drawn from q̃ (the draft at `draft_temperature`);
  2. the target scores context + y_1..y_k in one pass: p̃_1..p̃_{k+1} (at `target_temperature`);
  3. the particle's log-weight grows by Σ_j log p̃_j(y_j) − log q̃_j(y_j), computed in log space (`weigh`);
  4. it takes all k tokens and a bonus b ~ p̃_{k+1};
  5. if the effective sample size 1 / Σ w̄_i² of the normalised weights w̄ falls below `ess` × N, the particles are
     resampled by weight (systematic, or multinomial) and every weight starts again from 0 (`after_cycle`).
This is sequential importance resampling of the draft's sequences towards the target's at its temperature. With
`final` = "sample" (the default, as the authors' code finalizes: a particle drawn from softmax of the log-weights)
the output's distribution approaches the target's as N grows (exact as N → ∞); with one particle it is the draft's
distribution followed by the target's bonus tokens. "max-weight" takes the particle whose weight since the last
resampling is largest: the largest ratio of target to draft probability of its recent tokens, which is not the
likeliest text, and does not approach the target as N grows (the authors' branch that tried it found it
"systematically picked the wrong particle" on math); ties go to the first particle, whatever their lengths.

Here the particles are a group of rows in the shared batch (its `width`: N rows of each model's caches, the others
forked from the first's prompt): each drafts in the batch's draft passes and is scored in its one target pass, beside
every other generation's rows, as vLLM's sequence groups share a batch; a resampling makes the rows follow their
ancestors (copies of their caches, easd.method.rows `follow`). The lane streams only what every particle agrees on
(their common prefix, which no later resampling can change) and, at the end, the rest of the chosen particle: a
trace only ever grows.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from .. import acceptance as acc
from ..judging import Block, Proposal
from ..knobs import Control, knob
from ..origins import Origin
from ..settings import MIN_TEMPERATURE
from ..trace import Candidate, TokenRecord, recorded
from .base import Method

MAX_PARTICLES = 16  # each is a row of both models' caches, stepped every cycle


@dataclass(frozen=True)
class SmcSettings:
    particles: int = knob(
        4,
        "SMC-SD's particles N: sequences drafted side by side and resampled by weight (1: the draft's tokens, weighed)",
        low=1,
        high=MAX_PARTICLES,
        label="SMC particles",
        short="particles drafted side by side",
        control=Control("slider", 1, 8, 1),
        sweep=(1, 2, 4, 8),
    )  # 4: the authors' command line's default (their examples use 8 to 12)
    draft_temperature: float = knob(
        0.7,
        "the draft's temperature as it drafts each particle's tokens (SMC-SD samples; it has no greedy form)",
        low=MIN_TEMPERATURE,
        high=2,
        label="SMC draft temperature",
        short="the draft samples at",
        control=Control("slider", 0.05, 1.5, 0.05),
    )  # 0.7 in every script of the authors
    target_temperature: float = knob(
        0.7,
        "the target's temperature: its bonus tokens are drawn at it, and the weights measure the draft against it",
        low=MIN_TEMPERATURE,
        high=2,
        label="SMC target temperature",
        short="the target weighs and samples at",
        control=Control("slider", 0.05, 1.5, 0.05),
    )  # 0.7 in the authors' accuracy and speed scripts
    ess: float = knob(
        0.5,
        "resample when the effective sample size falls below this share of the particles (0: never resample)",
        low=0,
        high=1,
        label="SMC ESS threshold",
        short="resample below this share of N",
        control=Control("slider", 0, 1, 0.05),
    )
    resampling: str = knob(
        "systematic",
        "how particles are resampled by weight: systematic (one uniform) or multinomial",
        choices=("systematic", "multinomial"),
    )
    final: str = knob(
        "sample",
        "which particle is the output: sample (drawn by weight, as the authors' code; approaches the target as N grows) "
        "or max-weight (the largest weight since the last resampling, which does not)",
        choices=("sample", "max-weight"),
    )


# what every row carries of its cycle, which its inspector reads
WEIGHED = ("smc_cycle", "smc_weight", "smc_sample_size", "smc_resampled", "smc_population_top1_id")
SMC_DRAFT = Origin(
    "smc_draft",
    "particle's draft",
    "background: #d7ecf7; border-bottom: 2px dashed #0072B2;",  # sky blue, dashed blue: drafted, kept without a test
    "chosen",
    "The draft proposed {chosen} for the particle this text comes from; SMC-SD kept it without a test, and weighed "
    "the particle by how much likelier the target found its tokens than the draft did.",
    ended="every particle agrees up to here: later tokens are still in play",
    writer="draft",
    needs=WEIGHED,
)
SMC_BONUS = Origin(
    "smc_bonus",
    "particle's bonus (target)",
    "background: #b3e3d3; border-bottom: 2px dashed #009E73;",  # bluish green, dashed: the target's token of a cycle
    "bonus",
    "After the particle's drafts, the target added {chosen} from its own distribution, as every cycle does.",
    ended="the cycle's tokens every particle agrees on end with a target's bonus token",
    needs=WEIGHED,
)


@dataclass
class SmcRecord:
    smc_cycle: int = recorded(
        "the cycle that wrote the token (every particle drafts, is weighed, maybe resampled)", "int", label="cycle"
    )
    smc_weight: float = recorded(
        "its particle's share of the weights after that cycle (before any resampling)",
        "float",
        low=0,
        high=1,
        label="particle's weight",
    )
    smc_sample_size: float = recorded(
        "the particles' effective sample size 1 / Σ w̄² after that cycle", "float", low=0, label="ESS"
    )
    smc_resampled: bool = recorded("the particles were resampled by weight after that cycle", "bool", label="resampled after")
    smc_population: list[Candidate] = recorded(
        "every particle after that cycle: its number, the text it drafted, its share of the weights",
        "candidates",
        label="particle, its cycle's text",
        beside="token",
        values="weight",
        ids=False,
        marks="smc_particle",
    )
    smc_particle: int = recorded(
        "the particle whose text this token is (its number in that cycle's list)", "int", label="particle"
    )


# --- the maths, pure (SMC-SD's weights, effective sample size, resampling, the final choice) --------------------


def weigh(log_p: torch.Tensor, log_q: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Σ_j log p̃_j(y_j) − log q̃_j(y_j): how much likelier the target finds a particle's drafts than the draft did, in
    log space (a far-tail token's log-probability stays finite); -inf where the target rules a token out.
    [..., k, V], [..., k, V], [..., k] -> [...]"""
    picked = tokens[..., None]
    return (log_p.gather(-1, picked) - log_q.gather(-1, picked)).squeeze(-1).sum(-1)


def normalised(log_w: torch.Tensor) -> torch.Tensor:
    """The weights w̄ = softmax(log w); even where every particle's weight is 0 (log w all -inf).  [N] -> [N]"""
    log_w = log_w.double()
    if not torch.isfinite(log_w).any():
        return torch.full_like(log_w, 1 / len(log_w))
    return torch.softmax(log_w, dim=0)


def effective_sample_size(log_w: torch.Tensor) -> float:
    """1 / Σ w̄²: N when the weights are even, 1 when one particle holds them all.  [N] -> a number"""
    return float(1.0 / (normalised(log_w) ** 2).sum())


def resample(log_w: torch.Tensor, how: str, generator: torch.Generator | None) -> list[int]:
    """Each new particle's ancestor, drawn by weight.  [N] -> N indices

    systematic: one uniform u ~ U[0, 1/N), the ancestors at the weights' cumulative sum's crossings of u + j/N (the
    authors' default: lower variance than N independent draws); multinomial: N independent draws."""
    weights, n = normalised(log_w), len(log_w)
    if how == "multinomial":
        return torch.multinomial(weights.float(), n, replacement=True, generator=generator).tolist()
    u = float(torch.rand(1, generator=generator, dtype=torch.float64)) / n
    points = torch.tensor([u + j / n for j in range(n)], dtype=torch.float64)
    return torch.searchsorted(weights.cumsum(0), points, right=True).clamp(max=n - 1).tolist()


def after_cycle(log_w: torch.Tensor, ess: float, how: str, generator: torch.Generator | None) -> list[int] | None:
    """After a cycle: each particle's ancestor if the effective sample size fell below `ess` × N (the caller then
    copies them and starts every weight again from 0), else None.  [N] -> N indices or None"""
    n = len(log_w)
    if n == 1 or effective_sample_size(log_w) >= ess * n:
        return None
    return resample(log_w, how, generator)


def choose(log_w: torch.Tensor, final: str, generator: torch.Generator | None) -> int:
    """The output particle: drawn by weight (final="sample"), or the heaviest (ties: the first).  [N] -> index"""
    if final == "sample":
        return int(torch.multinomial(normalised(log_w).float(), 1, generator=generator))
    return int(torch.argmax(log_w))  # the first of equal maxima


# --- the particles ------------------------------------------------------------------------------------------------


@dataclass
class Particle:
    tokens: list[int] = field(default_factory=list)  # its new tokens (after the prompt)
    records: list[TokenRecord] = field(default_factory=list)  # one per token
    log_w: float = 0.0  # since the particles were last resampled
    done: bool = False  # it ended with an end token, or has no room left


@dataclass
class Population:
    """An SMC-SD generation's state: its particles (member i of its group of rows is particle i), how many cycles ran,
    how many tokens the lane has, and the output particle once chosen."""

    particles: list[Particle]
    cycle: int = 0
    committed: int = 0  # new tokens every particle shares, already in the generation's trace
    chosen: int | None = None  # the output particle, once every particle has ended: its tokens are handed over

    def copy(self) -> Population:
        """For a snapshot: particles copied (their rows are rebuilt from their tokens where it resumes)."""
        particles = [Particle(list(p.tokens), list(p.records), p.log_w, p.done) for p in self.particles]
        return Population(particles, self.cycle, self.committed, self.chosen)

    def log_w(self) -> torch.Tensor:
        return torch.tensor([p.log_w for p in self.particles], dtype=torch.float64)

    def agreed(self) -> int:
        """How many new tokens every particle shares (the chosen one's all, once it is chosen)."""
        if self.chosen is not None:
            return len(self.particles[self.chosen].tokens)
        shortest = min(len(p.tokens) for p in self.particles)
        first = self.particles[0].tokens
        return next((i for i in range(shortest) if any(p.tokens[i] != first[i] for p in self.particles)), shortest)

    @property
    def leading(self) -> Particle:
        """A particle whose records hold what the lane shows: the chosen one, or any (they agree up to `agreed`)."""
        return self.particles[self.chosen or 0]


@dataclass(frozen=True, kw_only=True)
class Sequential(Method):
    """SMC-SD: a population of particles, a group of rows of the batch, one cycle a step (the module's docstring)."""

    def at_sampling(self, settings, temperature, top_p):
        """Its draft and target at the protocol's temperature; it has no greedy form and no nucleus (its authors'
        sampling reads neither top-p nor top-k)."""
        if temperature == 0:
            raise ValueError("SMC-SD has no greedy form: compare it at a temperature above 0")
        if top_p < 1:
            raise ValueError("SMC-SD samples without a nucleus, as its authors' code: compare it at top-p 1")
        own = replace(self.own(settings), draft_temperature=temperature, target_temperature=temperature)
        return super().at_sampling(settings, temperature, top_p).with_own(self.name, own)

    def start(self, generation) -> Population:
        return Population([Particle() for _ in range(self.own(generation.settings).particles)])

    def copy_state(self, state: Population) -> Population:
        return state.copy()

    def width(self, generation) -> int:
        """A row of the batch per particle."""
        return len(generation.state.particles)

    def sequence(self, generation, member: int) -> list[int]:
        """The particle's row holds the prompt and its own tokens."""
        return generation.prompt_ids + generation.state.particles[member].tokens

    def plan_member(self, generation, member: int) -> tuple[int, bool]:
        """An unfinished particle drafts k tokens (fewer near its end: room for the bonus) and takes the target's pass;
        a finished one, or every one once the output is chosen, takes none."""
        population = generation.state
        particle = population.particles[member]
        if population.chosen is not None or particle.done:
            return 0, False
        return max(min(generation.settings.k, _limit(generation) - len(particle.tokens) - 1), 0), True

    def propose(self, plan, logits: torch.Tensor) -> Proposal:
        """y_j drawn from q̃ at the draft's temperature; its logits are kept (plan.q_logits) for the weight. Drafting
        stops at an end token: nothing after it is kept.  logits: [1, V]"""
        generation = plan.generation
        draft = acc.Sampling(self.own(generation.settings).draft_temperature)
        token = int(acc.draw(draft.probs(logits), generation.generator))
        plan.drafting_done = token in generation.pair.eos_ids
        return Proposal(token, None)

    def judge_group(self, plans: list) -> Block:
        """The cycle: every particle that drafted is weighed and takes its bonus; the weights may resample the
        population (its rows follow); when all have ended the output is chosen. The block is what every particle
        agrees on that the lane does not have yet (or, once chosen, the output's rest)."""
        generation, population = plans[0].generation, plans[0].generation.state
        own = self.own(generation.settings)
        cycled = [plan for plan in plans if plan.p_logits is not None]
        if cycled:
            texts = {plan.member: _extend(generation, population, plan, own) for plan in cycled}
            _weigh(generation, population, own, texts)
            population.cycle += 1
        if population.chosen is None and all(p.done for p in population.particles):
            population.chosen = choose(population.log_w(), own.final, generation.generator)
        agreed = population.agreed()
        records = population.leading.records[population.committed : agreed]
        population.committed = agreed
        end = records[-1].origin if records else SMC_DRAFT.name
        return Block(plans[0].block, [], records, end, generation)

    def ended(self, generation) -> str | None:
        """Ended when the output particle's tokens are all in the trace (an end token or the budget ends it first)."""
        population = generation.state
        return "max_new_tokens" if population.chosen is not None and population.committed >= population.agreed() else None

    def explains(self, record, settings) -> str:
        own, smc = self.own(settings), record.own
        if not isinstance(smc, SmcRecord):
            return "This row does not record its SMC-SD cycle."
        resampled = (
            f"below {own.ess:g} × {own.particles} = {own.ess * own.particles:g}, so the particles were resampled by weight "
            f"({own.resampling}) and their weights started again"
            if smc.smc_resampled
            else f"not below {own.ess:g} × {own.particles} = {own.ess * own.particles:g}, so the particles went on as they were"
        )
        return (
            f"Cycle {smc.smc_cycle}: {own.particles} particles each drafted up to k tokens at T = {own.draft_temperature:g}; "
            f"the target (T = {own.target_temperature:g}) weighed them, this text's particle holding "
            f"{smc.smc_weight:.3f} of the weight. The effective sample size was {smc.smc_sample_size:.2f}, {resampled}."
        )

    def lane_facts(self, trace, summary: dict) -> list[tuple[str, object]]:
        """Its cycles, how many ended in a resampling, the mean ESS as a share of N against the threshold that resamples,
        and its target passes (each scores every particle's block)."""
        own = self.own(trace.settings)
        cycles = _cycles([trace])
        facts: list[tuple[str, object]] = [("particles", own.particles), ("cycles", len(cycles))]
        if cycles:
            resampled = sum(c.smc_resampled for c in cycles.values())
            ess = sum(c.smc_sample_size for c in cycles.values()) / len(cycles) / own.particles
            facts += [("resampled after", resampled), ("mean ESS ÷ N", f"{ess:.2f} (resampling below {own.ess:g})")]
        return facts + [("target calls", summary["target_calls"])]

    def bench_line(self, traces: list) -> str:
        """Cycles, resamplings, the mean ESS share, and tokens per target pass (a pass scores every particle)."""
        cycles = _cycles(traces)
        if not cycles:
            return "no cycles"
        resampled = sum(c.smc_resampled for c in cycles.values())
        particles = self.own(traces[0].settings).particles
        ess = sum(c.smc_sample_size for c in cycles.values()) / len(cycles) / particles
        tokens, passes = sum(len(t.records) for t in traces), sum(t.stats.target_calls for t in traces)
        return f"cycles {len(cycles)}  resampled {resampled / len(cycles):.2f}  ESS/N {ess:.2f}  tokens/target pass {tokens / max(passes, 1):.2f}"


def _cycles(traces: list) -> dict:
    """Each run's cycles, by (run, cycle): the record of the cycle's first token (every token of a cycle holds it)."""
    return {(i, r.own.smc_cycle): r.own for i, t in enumerate(traces) for r in t.records if isinstance(r.own, SmcRecord)}


def _extend(generation, population: Population, plan, own: SmcSettings) -> str:
    """One particle's cycle after the passes: its drafts weighed by p̃ / q̃ in log space, kept up to an end token, and
    the target's bonus after them; its row's sequence grows by them (`plan.keep`). -> the text it added"""
    pair, particle = generation.pair, population.particles[plan.member]
    draft, target = acc.Sampling(own.draft_temperature), acc.Sampling(own.target_temperature)
    p_logits = plan.p_logits  # [k + 1, V]
    kept = _until_end(plan.drafted, pair.eos_ids)
    q_rows = torch.cat(plan.q_logits[:kept]) if kept else None  # [kept, V]
    if kept:
        tokens = torch.tensor(plan.drafted[:kept], dtype=torch.long, device=p_logits.device)
        particle.log_w += float(weigh(target.log_probs(p_logits[:kept]), draft.log_probs(q_rows), tokens))
    new = plan.drafted[:kept]
    origins = [SMC_DRAFT.name] * kept
    if kept == len(plan.drafted):  # no end token among the drafts: the target's bonus follows
        new.append(int(acc.draw(target.probs(p_logits[kept : kept + 1]), generator=generation.generator)))
        origins.append(SMC_BONUS.name)
    particle.records += _records(generation, population.cycle, particle, new, origins, q_rows, p_logits)
    particle.tokens += new
    particle.done = new[-1] in pair.eos_ids or len(particle.tokens) >= _limit(generation)
    plan.keep = new
    return pair.tokenizer.decode(new)


def _weigh(generation, population: Population, own: SmcSettings, texts: dict[int, str]) -> None:
    """The cycle's weights, ESS and resampling, written on the records it made."""
    log_w = population.log_w()
    shares, ess = normalised(log_w).tolist(), effective_sample_size(log_w)
    n = len(population.particles)
    parents = after_cycle(log_w, own.ess, own.resampling, generation.generator)
    resampled = parents is not None
    listing = [(i, texts.get(i, "(finished)")[:200], shares[i]) for i in range(n)]
    for i, particle in enumerate(population.particles):
        for record in particle.records:
            if record.own is None:  # this cycle's
                record.own = SmcRecord(population.cycle, shares[i], ess, resampled, listing, smc_particle=i)
    if resampled:  # particle i becomes a copy of its ancestor, and its row too (the batch copies the caches)
        population.particles = [
            Particle(list(p.tokens), list(p.records), 0.0, p.done) for p in (population.particles[a] for a in parents)
        ]
        generation.parents = parents


def _records(generation, cycle, particle, tokens, origins, q_rows, p_logits) -> list[TokenRecord]:
    """The records of a particle's new tokens: their origin, both models' top candidates (temperature 1)."""
    recorder, start = generation.recorder, len(particle.tokens)
    p_top = recorder.top(acc.raw_probs(p_logits[: len(tokens)]))
    q_top = recorder.top(acc.raw_probs(q_rows)) if q_rows is not None else []
    return [
        TokenRecord(
            start + j,
            cycle,
            token,
            recorder.text(token),
            origin,
            draft_top=q_top[j] if j < len(q_top) else [],
            target_top=p_top[j],
        )
        for j, (token, origin) in enumerate(zip(tokens, origins))
    ]


def _limit(generation) -> int:
    """The most new tokens a particle may hold: the budget, within the context."""
    return min(generation.settings.max_new_tokens, generation.pair.context_length - generation.prompt_length)


def _until_end(tokens: list[int], eos_ids) -> int:
    """How many drafts a particle keeps: all, or up to and including the first end token."""
    return next((j + 1 for j, token in enumerate(tokens) if token in eos_ids), len(tokens))


SMC = Sequential(
    name="smc",
    title="SMC-SD",
    models="TM + DM",
    origins=(SMC_DRAFT, SMC_BONUS),
    grid=("smc_particles",),
    bench="smc_particles",
    settings=SmcSettings,
    record=SmcRecord,
    greedy_form=False,
    grouped=True,
)
