"""`python -m easd bench --suite spec-bench FILE`: Spec-Bench's speed measurement on our engine.

Spec-Bench (Xia et al., 2024) is the standard speed benchmark of speculative decoding: a question
file of 13 categories, some questions with two turns. We run target-only ("vanilla"), SD and EASD
greedily on N questions per category, turn by turn as Spec-Bench does (the second turn's prompt
holds the first turn's answer), and report, per category and overall, its metrics:
  tokens/s        the mean over questions of new tokens ÷ wall time (Spec-Bench's speed.py)
  speed-up        that mean ÷ target-only's
  mean accepted   new tokens ÷ target forward passes: tokens per target pass, bonus token included
and EASD's penalty rate (penalized tokens ÷ new tokens). Answer files follow Spec-Bench's schema,
one JSONL per method, so its own scripts read them.

Fairness, as in `easd.lab.speed.bench`: an untimed warm-up per method, then the methods take turns on
each question in an order that rotates from question to question.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from ...errors import EasdError, SettingsError
from ...method.generation import Generation
from ...method.pair import ModelPair
from ...method.references import PROPOSED, REFERENCE, SPEED_REFERENCE
from ...method.settings import DecodeSettings
from ...method.spec_metrics import refused
from ...method.trace import Trace
from ..grading.problems import read_records
from ..runs.evaluate import Variant

BASELINE = "vanilla"  # Spec-Bench's name for plain autoregressive decoding with the target
# MT-bench's categories, which Spec-Bench's leaderboard reports together as "Multi-turn Conversation"
MT_BENCH = frozenset({"writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"})
MT_BENCH_GROUP = "mt_bench (all)"


@dataclass(frozen=True)
class Question:
    question_id: int | str
    category: str  # any category is read as it is; Spec-Bench's 13 are not hard-coded
    turns: tuple[str, ...]
    line: int = 0  # its line in the file, from 1: the file's order, wherever questions are kept apart


@dataclass
class Answer:
    """One method's run on one question: per turn the text and counts, as Spec-Bench records them."""

    question: Question
    turns: list[str] = field(default_factory=list)
    decoding_steps: list[int] = field(default_factory=list)  # target forward passes per turn
    new_tokens: list[int] = field(default_factory=list)
    wall_time: list[float] = field(default_factory=list)  # seconds of decoding per turn
    accept_lengths: list[int] = field(default_factory=list)  # tokens emitted per target pass, all turns
    penalized: int = 0

    @property
    def speed(self) -> float:
        seconds = sum(self.wall_time)
        return sum(self.new_tokens) / seconds if seconds else 0.0


# --- the question file ----------------------------------------------------------------------------


def load_questions(path: Path, per_category: int | None, flag: str = "--suite") -> list[Question]:
    """The first `per_category` questions of each category, in file order. The file is read as every data file is
    (easd.lab.grading.problems.read_records: bounded, UTF-8, JSON Python can hold), and every line is checked before any
    question is returned; an error names `flag`, the option that gave the file."""
    questions = [_question(number, row, path, flag) for number, row in read_records(path, flag)]
    if not questions:
        raise EasdError(f"{flag}: {path} holds no questions")
    taken: dict[str, int] = defaultdict(int)
    chosen = []
    for question in questions:
        if per_category is None or taken[question.category] < per_category:
            taken[question.category] += 1
            chosen.append(question)
    return chosen


def _question(number: int, row: dict | str, path: Path, flag: str) -> Question:
    """One line's question, each field of the kind Spec-Bench gives it: anything else would be decoded, then fail
    where its id names a file or its text a prompt."""
    try:
        if not isinstance(row, dict):
            raise ValueError("not a JSON object")
        question_id, category, turns = row["question_id"], row["category"], row["turns"]
        if isinstance(question_id, bool) or not isinstance(question_id, int | str) or not str(question_id).strip():
            raise ValueError("question_id must be a string or an integer")
        if not isinstance(category, str) or not category.strip():
            raise ValueError("category must be a non-empty string")
        if not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t.strip() for t in turns):
            raise ValueError("turns must be a list of non-empty strings")
    except (KeyError, ValueError) as err:
        problem = f"missing field {err}" if isinstance(err, KeyError) else str(err)
        raise EasdError(f"{flag}: line {number + 1} of {path} is not a Spec-Bench question ({problem})") from None
    return Question(question_id, category, tuple(turns), number + 1)


# --- decoding -------------------------------------------------------------------------------------


def methods_for(k: int, tau_hs: list[float], max_new_tokens: int) -> list[Variant]:
    """Target-only, SD, and EASD at each τ_H; all greedy, as Spec-Bench measures."""
    sd = DecodeSettings(method=REFERENCE, k=k, max_new_tokens=max_new_tokens, temperature=0.0)
    easd = [Variant(f"easd-k{k}-tau{tau_h:g}", replace(sd, method=PROPOSED, tau_h=tau_h)) for tau_h in tau_hs]
    return [Variant(BASELINE, replace(sd, method=SPEED_REFERENCE)), Variant(f"sd-k{k}", sd), *easd]


def decode_turn(pair: ModelPair, prompt: str, settings: DecodeSettings) -> Trace:
    """One turn through the engine, alone: Spec-Bench measures single-sequence latency. The prompt is already chat-formatted."""
    return Generation(pair, prompt, settings, chat=False).run()


def decode_turns(
    pair: ModelPair, question: Question, settings: DecodeSettings, flag: str = "--suite"
) -> Iterator[tuple[str, Trace]]:
    """Every turn of one question, decoded in order: (the answer's text, its trace). Each turn's prompt holds the
    earlier turns and this method's answers to them."""
    messages = []
    for number, turn in enumerate(question.turns, 1):
        messages.append({"role": "user", "content": turn})
        try:
            trace = decode_turn(pair, chat_text(pair, messages), settings)
        except SettingsError as err:  # a prompt longer than the pair's context: name the question, not --prompt
            problem = str(err).removeprefix(f"{err.flag}: ")
            raise EasdError(f"{flag}: question {question.question_id}, turn {number} does not fit the pair ({problem})") from None
        text = pair.tokenizer.decode(trace.token_ids).strip()
        messages.append({"role": "assistant", "content": text})
        yield text, trace


def answer_question(pair: ModelPair, question: Question, settings: DecodeSettings) -> Answer:
    """Every turn of one question, counted as Spec-Bench counts them."""
    answer = Answer(question)
    for text, trace in decode_turns(pair, question, settings):
        answer.turns.append(text)
        answer.decoding_steps.append(trace.stats.target_calls)
        answer.new_tokens.append(len(trace.records))
        answer.wall_time.append(trace.stats.seconds)
        answer.accept_lengths.extend(_tokens_per_block(trace))
        answer.penalized += sum(refused(r) for r in trace.records)
    return answer


def chat_text(pair: ModelPair, messages: list[dict]) -> str:
    """The conversation so far, through the tokenizer's chat template (plain text when it has none)."""
    tokenizer = pair.tokenizer
    if tokenizer.chat_template:
        return tokenizer.render_chat(messages)
    return "".join(f"{m['role'].capitalize()}: {m['content']}\n" for m in messages) + "Assistant:"


def _tokens_per_block(trace: Trace) -> list[int]:
    """Tokens each target pass emitted (accepted drafts plus the target's own token); 1 per step without a draft."""
    counts: dict[int, int] = defaultdict(int)
    for record in trace.records:
        counts[record.block] += 1
    return list(counts.values())


def run_suite(
    pair: ModelPair, questions: list[Question], methods: list[Variant], progress: bool = True
) -> dict[str, list[Answer]]:
    """Every method on every question, methods taking turns in a rotating order; answers per method label."""
    for method in methods:  # untimed warm-up, so one-off costs land on no method
        decode_turn(pair, chat_text(pair, [{"role": "user", "content": "Hello"}]), replace(method.settings, max_new_tokens=8))
    answers: dict[str, list[Answer]] = {m.label: [] for m in methods}
    for turn, question in enumerate(questions):
        for i in range(len(methods)):
            method = methods[(turn + i) % len(methods)]
            answers[method.label].append(answer_question(pair, question, method.settings))
        if progress:
            print(f"  question {turn + 1}/{len(questions)} ({question.category}) done", flush=True)
    return answers  # each method's answers in question order


TURN_SLACK = 8  # tokens an answer may gain when its text is tokenized again inside the next turn's prompt


def longest_prompt(pair: ModelPair, question: Question, max_new_tokens: int) -> int:
    """At most how many tokens the question's last turn holds: every turn's text, the template, and each earlier
    answer at its longest (answers are not known before decoding), plus the last answer's new tokens."""
    messages = []
    for turn in question.turns:
        messages += [{"role": "user", "content": turn}, {"role": "assistant", "content": ""}]
    template = len(pair.tokenizer.encode(chat_text(pair, messages[:-1])))
    return template + len(question.turns) * (max_new_tokens + TURN_SLACK)


def too_long(pair: ModelPair, questions: list[Question], max_new_tokens: int) -> list[tuple[Question, int]]:
    """The questions that may not fit the pair's context, each with its longest prompt: checked before decoding anything."""
    sizes = [(q, longest_prompt(pair, q, max_new_tokens)) for q in questions]
    return [(q, size) for q, size in sizes if size > pair.context_length]


def fitting(
    pair: ModelPair, questions: list[Question], max_new_tokens: int, skip_long: bool, flag: str = "--suite"
) -> tuple[list[Question], list[Question]]:
    """(the questions that fit the pair's context, those left out): those that may not fit are refused, naming them
    and `flag`, the option that gave them, unless `skip_long` leaves them out."""
    long = too_long(pair, questions, max_new_tokens)
    if long and not skip_long:
        named = ", ".join(f"{q.question_id} ({size:,} tokens)" for q, size in long[:5]) + (" …" if len(long) > 5 else "")
        raise EasdError(
            f"{flag}: {len(long)} question(s) may not fit the pair's context of {pair.context_length:,} tokens with "
            f"{max_new_tokens} new tokens per turn: {named}; ask for fewer --max-new-tokens, or --skip-long to leave them out"
        )
    skipped = {id(q) for q, _ in long}
    kept = [q for q in questions if id(q) not in skipped]
    if not kept:
        raise EasdError("--skip-long: every question was too long for the pair's context; ask for fewer --max-new-tokens")
    return kept, [q for q, _ in long]


def run_spec_bench(
    pair: ModelPair, questions: list[Question], methods: list[Variant], answers_dir: Path | None, skip_long: bool = False
) -> int:
    """The whole command: check every question fits, decode, print the table, write the answer files."""
    import torch

    settings = methods[0].settings
    questions, long = fitting(pair, questions, settings.max_new_tokens, skip_long)
    categories = len({q.category for q in questions})
    print(
        f"spec-bench: {pair.describe()}, {len(questions)} questions in {categories} categories, "
        f"{settings.max_new_tokens} new tokens per turn, greedy, {torch.get_num_threads()} threads"
    )
    if long:
        print(
            f"skipped (--skip-long): {len(long)} question(s) too long for the context: {', '.join(str(q.question_id) for q in long)}"
        )
    answers = run_suite(pair, questions, methods)
    print(format_table(table(answers)))
    if answers_dir is not None:
        for path in write_answers(answers_dir, pair, answers):
            print(f"answers: {path}")
    return 0


# --- the table and the answer files ---------------------------------------------------------------


def table(answers: dict[str, list[Answer]]) -> list[dict]:
    """Rows per category (in file order), for MT-bench's categories together, and overall, per method."""
    categories = list(dict.fromkeys(a.question.category for a in answers[BASELINE]))
    groups = {category: {category} for category in categories}
    if set(categories) & MT_BENCH:  # the leaderboard's "Multi-turn Conversation" column
        groups[MT_BENCH_GROUP] = MT_BENCH
    groups["overall"] = set(categories)
    rows = []
    for group, members in groups.items():
        chosen = {label: [a for a in runs if a.question.category in members] for label, runs in answers.items()}
        baseline = _mean_speed(chosen[BASELINE])
        for label, runs in chosen.items():
            tokens = sum(sum(a.new_tokens) for a in runs)
            lengths = [n for a in runs for n in a.accept_lengths]  # one per target pass
            speed = _mean_speed(runs)
            rows.append(
                {
                    "category": group,
                    "method": label,
                    "questions": len(runs),
                    "tokens/s": speed,
                    "speed-up": speed / baseline if baseline else float("nan"),
                    "mean accepted": sum(lengths) / len(lengths) if lengths else float("nan"),
                    "penalty rate": sum(a.penalized for a in runs) / tokens if tokens else float("nan"),
                }
            )
    return rows


def _mean_speed(runs: list[Answer]) -> float:
    return sum(a.speed for a in runs) / len(runs) if runs else 0.0


def model_id(pair: ModelPair, label: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", f"{pair.target_name}-{label}").strip("-")


def write_answers(folder: Path, pair: ModelPair, answers: dict[str, list[Answer]]) -> list[Path]:
    """One Spec-Bench answer file per method: `folder/<model_id>.jsonl`."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for label, runs in answers.items():
        name = model_id(pair, label)
        path = folder / f"{name}.jsonl"
        with path.open("w", encoding="utf-8") as file:
            for answer in runs:
                file.write(json.dumps(answer_record(answer, name), ensure_ascii=False) + "\n")
        paths.append(path)
    return paths


def answer_record(answer: Answer, name: str) -> dict:
    """One line of a Spec-Bench answer file (the schema of its evaluation scripts)."""
    choice = {
        "index": 0,
        "turns": answer.turns,
        "decoding_steps": answer.decoding_steps,
        "new_tokens": answer.new_tokens,
        "wall_time": [round(t, 6) for t in answer.wall_time],
        "accept_lengths": answer.accept_lengths,
    }
    return {
        "question_id": answer.question.question_id,
        "category": answer.question.category,
        "answer_id": uuid.uuid4().hex,
        "model_id": name,
        "choices": [choice],
        "tstamp": time.time(),
    }


def format_table(rows: list[dict]) -> str:
    header = f"{'category':<16} {'method':<20} {'questions':>9} {'tokens/s':>9} {'speed-up':>9} {'mean accepted':>14} {'penalty rate':>13}"
    lines = [header]
    for row in rows:
        lines.append(
            f"{row['category']:<16} {row['method']:<20} {row['questions']:>9} {row['tokens/s']:>9.2f} "
            f"{row['speed-up']:>8.3f}× {row['mean accepted']:>14.2f} {row['penalty rate']:>13.4f}"
        )
    return "\n".join(lines)
