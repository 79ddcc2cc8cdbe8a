"""`bench --suite spec-bench`: reading a question file, the metrics, answer files in Spec-Bench's schema."""

import json
import time

import pytest

from easd.cli import main
from easd.errors import EasdError
from easd.lab.speed.specbench import BASELINE, MT_BENCH_GROUP, Answer, Question, chat_text, load_questions, table
from easd.method.generation import Generation
from easd.method.settings import DecodeSettings

# our own made-up questions: two categories (one of Spec-Bench's, one it does not have), one question with two turns
QUESTIONS = [
    {"question_id": 81, "category": "writing", "turns": ["Write a haiku about rain.", "Now make it about snow."]},
    {"question_id": 82, "category": "writing", "turns": ["Describe a cat."]},
    {"question_id": 83, "category": "writing", "turns": ["Describe a dog."]},
    {"question_id": "q-1", "category": "brand_new", "turns": ["What is 3+4?"], "reference": ["7"]},
]


def write_questions(path, rows):
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def test_the_first_n_of_each_category_in_file_order_unknown_categories_as_they_are(tmp_path):
    questions = load_questions(write_questions(tmp_path / "q.jsonl", QUESTIONS), per_category=2)
    assert [(q.question_id, q.category) for q in questions] == [(81, "writing"), (82, "writing"), ("q-1", "brand_new")]
    assert questions[0].turns == ("Write a haiku about rain.", "Now make it about snow.")


@pytest.mark.parametrize(
    "bad, message",
    [
        ("{oops", "line 2 .* not a Spec-Bench question"),
        ({"question_id": 9, "category": "qa"}, "line 2 .*missing field 'turns'"),
        ({"question_id": 9, "category": "qa", "turns": ["ok", " "]}, "line 2 .*turns must be a list of non-empty strings"),
        ({"question_id": 9, "turns": ["x"]}, "line 2 .*missing field 'category'"),
    ],
)
def test_a_bad_line_is_named(tmp_path, bad, message):
    with pytest.raises(EasdError, match=message):
        load_questions(write_questions(tmp_path / "q.jsonl", [QUESTIONS[0], bad]), per_category=1)


def answer(category: str, new_tokens: list[int], seconds: list[float], lengths: list[int], penalized: int = 0) -> Answer:
    steps = [len(lengths)] if len(new_tokens) == 1 else [len(lengths) - 1, 1]
    return Answer(
        Question(1, category, ("x",) * len(new_tokens)), ["t"] * len(new_tokens), steps, new_tokens, seconds, lengths, penalized
    )


def test_metrics_follow_spec_bench_definitions():
    answers = {
        BASELINE: [answer("writing", [10], [2.0], [1] * 10), answer("qa", [20], [2.0], [1] * 20)],
        "sd-k4": [answer("writing", [10], [1.0], [4, 4, 2]), answer("qa", [20], [0.5], [5] * 4)],
        "easd": [answer("writing", [10], [1.0], [3, 3, 3, 1], penalized=2), answer("qa", [20], [1.0], [5] * 4)],
    }
    rows = {(r["category"], r["method"]): r for r in table(answers)}
    assert [key[0] for key in rows][::3] == ["writing", "qa", MT_BENCH_GROUP, "overall"]
    overall = rows[("overall", "sd-k4")]
    # tokens/s: the mean over questions of tokens ÷ seconds; speed-up: that ÷ the baseline's (Spec-Bench's speed.py)
    assert overall["tokens/s"] == pytest.approx((10 / 1 + 20 / 0.5) / 2)
    assert overall["speed-up"] == pytest.approx(25 / ((10 / 2 + 20 / 2) / 2))
    assert overall["mean accepted"] == pytest.approx(30 / 7)  # new tokens ÷ target passes, bonus included
    assert rows[("writing", "easd")]["penalty rate"] == pytest.approx(0.2)
    assert rows[(MT_BENCH_GROUP, "easd")]["questions"] == 1  # writing is MT-bench's, qa is not
    assert rows[("qa", BASELINE)]["mean accepted"] == 1 and rows[("qa", BASELINE)]["speed-up"] == 1


def test_spec_bench_suite_on_the_tiny_pair_writes_spec_bench_answer_files(tmp_path, capsys, tiny_pair):
    data = write_questions(tmp_path / "question.jsonl", QUESTIONS)
    out = tmp_path / "answers"
    args = [
        "bench",
        "--pair",
        "tiny-random",
        "--backend",
        tiny_pair.backend,
        "--suite",
        "spec-bench",
        str(data),
        "--per-category",
        "2",
    ]
    assert main([*args, "--max-new-tokens", "8", "--k", "3", "--tau-h", "0.5", "--answers", str(out)]) == 0
    printed = capsys.readouterr().out
    for category in ("writing", "brand_new", MT_BENCH_GROUP, "overall"):
        assert f"\n{category} " in printed
    files = {path.stem: [json.loads(line) for line in path.read_text().splitlines()] for path in out.glob("*.jsonl")}
    assert set(files) == {"tiny-random-target-vanilla", "tiny-random-target-sd-k3", "tiny-random-target-easd-k3-tau0.5"}
    for name, records in files.items():
        assert [r["question_id"] for r in records] == [81, 82, "q-1"]
        for record in records:
            assert set(record) == {"question_id", "category", "answer_id", "model_id", "choices", "tstamp"}
            assert record["model_id"] == name
            [choice] = record["choices"]
            turns = 2 if record["question_id"] == 81 else 1
            assert all(len(choice[key]) == turns for key in ("turns", "decoding_steps", "new_tokens", "wall_time"))
            assert sum(choice["accept_lengths"]) == sum(choice["new_tokens"])  # every token, bonus included
            assert len(choice["accept_lengths"]) == sum(choice["decoding_steps"])  # one entry per target pass
    vanilla, sd = files["tiny-random-target-vanilla"], files["tiny-random-target-sd-k3"]
    assert all(set(r["choices"][0]["accept_lengths"]) == {1} for r in vanilla)
    assert [r["choices"][0]["turns"] for r in sd] == [r["choices"][0]["turns"] for r in vanilla]  # greedy SD is lossless
    # the second turn is asked with the first turn's answer in the conversation
    first, second = vanilla[0]["choices"][0]["turns"]
    history = [
        {"role": "user", "content": QUESTIONS[0]["turns"][0]},
        {"role": "assistant", "content": first},
        {"role": "user", "content": QUESTIONS[0]["turns"][1]},
    ]
    trace = Generation(
        tiny_pair, chat_text(tiny_pair, history), DecodeSettings(method="target", max_new_tokens=8), chat=False
    ).run()
    assert second == tiny_pair.tokenizer.decode(trace.token_ids).strip()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--suite", "mt-bench", "{data}"], "--suite: must be spec-bench followed by its question file"),
        (["--suite", "spec-bench", "{data}", "--per-category", "0"], "--per-category: must be ≥ 1"),
        (["--suite", "spec-bench", "{missing}"], "--suite: no such file"),
        (["--suite", "spec-bench", "{bad}"], "--suite: line 2 of"),
        (["--suite", "spec-bench", "{data}", "--answers", "{missing}/sub"], "--answers: the folder"),
    ],
)
def test_bad_suite_input_is_one_line_before_models_load(tmp_path, capsys, extra, message):
    paths = {
        "data": write_questions(tmp_path / "q.jsonl", QUESTIONS),
        "bad": write_questions(tmp_path / "bad.jsonl", [QUESTIONS[0], "{"]),
        "missing": tmp_path / "missing",
    }
    code = main(["bench", "--pair", "tiny-random", *[a.format(**paths) for a in extra]])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"error: {message}") and "models:" not in err, err


def test_questions_that_may_not_fit_are_named_before_anything_is_decoded(tmp_path, capsys):
    questions = [
        {"question_id": 1, "category": "qa", "turns": ["How many apples?"]},
        {"question_id": 7, "category": "rag", "turns": ["apples " * 600]},  # too long from the start
        {
            "question_id": 131,
            "category": "writing",
            "turns": ["Tell a story. " * 20, "Now shorter. " * 20],
        },  # turn 2 holds turn 1's answer
    ]
    data = write_questions(tmp_path / "q.jsonl", questions)
    args = ["bench", "--pair", "tiny-random", "--suite", "spec-bench", str(data), "--max-new-tokens", "200"]
    started = time.monotonic()
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(
        "error: --suite: 2 question(s) may not fit the pair's context of 512 tokens with 200 new tokens per turn: 7 ("
    )
    assert "131 (" in err and "--skip-long" in err and time.monotonic() - started < 30
    assert main([*args, "--skip-long"]) == 0
    printed = capsys.readouterr().out
    assert "skipped (--skip-long): 2 question(s) too long for the context: 7, 131" in printed
    assert "1 questions in 1 categories" in printed
