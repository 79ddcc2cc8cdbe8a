"""EASD as an lm-evaluation-harness model, run offline on the tiny pair through lm-eval's own API and CLI.

Skipped when lm-eval (requirements-research.txt) is not installed, unless EASD_REQUIRE_RESEARCH=1,
as .ci/run sets: then a missing lm-eval fails.
"""

import importlib
import json
import os
import re
import textwrap

import pytest

if os.environ.get("EASD_REQUIRE_RESEARCH") == "1":
    importlib.import_module("lm_eval")
else:
    pytest.importorskip("lm_eval", reason="lm_eval is not installed: pip install -r requirements-research.txt")

from lm_eval import simple_evaluate  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

from easd.cli import main  # noqa: E402
from easd.errors import EasdError  # noqa: E402
from easd.lab.runs.harness import EasdLM, cut_at_stops
from easd.method.generation import Generation  # noqa: E402
from easd.method.methods import METHODS  # noqa: E402
from easd.method.settings import DecodeSettings  # noqa: E402

QUESTIONS = ["What is 2+2?", "Name a colour.", "Count to three."]
MAX_GEN_TOKS = 12
TASK = "easd_tiny_qa"


def prompt(question: str) -> str:
    return f"Question: {question}\nAnswer:"


def greedy_target_answer(pair, question: str) -> str:
    """What target-only greedy decoding writes, straight from the engine, cut at the task's stop string."""
    settings = DecodeSettings(method="target", max_new_tokens=MAX_GEN_TOKS)
    trace = Generation(pair, prompt(question), settings, chat=False).run()
    return cut_at_stops(pair.tokenizer.decode(trace.token_ids), ["\n"])


@pytest.fixture(scope="module")
def task_folder(tmp_path_factory, tiny_pair):
    """A local generate_until task over a local JSONL file; the first answer is the target's own greedy text,
    so exact_match must come out at exactly 1/3 for every lossless method."""
    folder = tmp_path_factory.mktemp("lm_eval_task")
    answers = [greedy_target_answer(tiny_pair, QUESTIONS[0]), "never", "never"]
    rows = [{"question": q, "answer": a} for q, a in zip(QUESTIONS, answers)]
    (folder / "data.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (folder / "task.yaml").write_text(
        textwrap.dedent(f"""\
        task: {TASK}
        dataset_path: json
        dataset_kwargs:
          data_files:
            test: {folder / "data.jsonl"}
        test_split: test
        output_type: generate_until
        doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
        doc_to_target: "{{{{answer}}}}"
        generation_kwargs:
          until: ["\\n"]
          max_gen_toks: {MAX_GEN_TOKS}
          do_sample: false
        metric_list:
          - metric: exact_match
            aggregation: mean
            higher_is_better: true
        """)
    )
    return folder


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def evaluate(task_folder, backend: str, **model_args):
    model = EasdLM(pair="tiny-random", backend=backend, **model_args)
    results = simple_evaluate(
        model=model,
        tasks=[TASK],
        task_manager=TaskManager(include_path=str(task_folder), include_defaults=False),
        log_samples=True,
    )
    samples = sorted(results["samples"][TASK], key=lambda s: s["doc_id"])
    return results["results"][TASK]["exact_match,none"], [s["resps"][0][0] for s in samples]


def test_greedy_sd_and_easd_give_target_only_answers_through_lm_eval(task_folder, tiny_pair):
    accuracy, target = evaluate(task_folder, tiny_pair.backend, method="target")
    assert target == [greedy_target_answer(tiny_pair, q) for q in QUESTIONS]  # the engine's text, cut at "\n"
    assert not any("\n" in answer for answer in target)
    assert accuracy == pytest.approx(1 / 3)
    sd_accuracy, sd = evaluate(task_folder, tiny_pair.backend, method="sd", k=3)
    assert sd == target and sd_accuracy == accuracy  # lossless: per sample, not just on average
    _, unguided = evaluate(task_folder, tiny_pair.backend, method="mti", mti_tau=100.0)
    _, guided = evaluate(task_folder, tiny_pair.backend, method="mti", mti_tau=0.0, mti_omega=4.0)
    assert unguided == target and guided != target  # MTI through lm-eval: target-only above every entropy, else guided


# lm-eval's command line picks the backend itself (auto: transformers for the tiny pair), so its tests run once, on
# the task folder made on that backend, not once for each backend of tiny_pair
ONCE = pytest.mark.parametrize("tiny_pair", ["transformers"], indirect=True)


@pytest.mark.slow  # lm-eval's own command line runs a task on our model
@ONCE
def test_the_cli_registers_the_model_and_hands_over_to_lm_eval(task_folder, tmp_path, capsys):
    out = tmp_path / "out"
    args = ["lm-eval", "--model_args", "pair=tiny-random,method=easd,tau_h=1.5,k=2", "--tasks", TASK]
    code = main([*args, "--include_path", str(task_folder), "--output_path", str(out), "--log_samples"])
    printed = capsys.readouterr().out
    assert code == 0 and "exact_match" in printed and TASK in printed  # lm-eval's own table
    [samples] = out.rglob(f"samples_{TASK}_*.jsonl")
    assert len(samples.read_text().splitlines()) == len(QUESTIONS)  # its per-sample log


@pytest.mark.parametrize(
    "model_args, message",
    [
        ("pair=tiny-random,tau_h=-1", "--model_args tau_h: must be a number of nats ≥ 0"),
        ("pair=tiny-random,method=nonesuch", f"--model_args method: must be one of {', '.join(METHODS)}"),
        ("pair=tiny-random,temprature=1", "--model_args: unknown temprature; the easd model takes pair, dtype"),
        ("pair=no-such-pair", "--model_args pair: unknown pair 'no-such-pair'"),
    ],
)
def test_bad_model_args_are_named_in_lm_eval_words(model_args, message):
    with pytest.raises(EasdError, match=f"^{re.escape(message)}"):
        EasdLM.create_from_arg_string(model_args)  # how lm-eval builds the model from --model_args


@pytest.mark.slow  # lm-eval's command line in a process of its own: a bad model_arg is one line
@ONCE
def test_a_bad_model_arg_on_the_command_line_is_one_line_with_exit_2(task_folder, capsys):
    code = main(["lm-eval", "--model_args", "pair=tiny-random,k=0", "--tasks", TASK, "--include_path", str(task_folder)])
    err = capsys.readouterr().err
    assert code == 2 and err.strip().splitlines()[-1] == "error: --model_args k: must be an integer from 1 to 64 (got 0)", err


def test_scoring_requests_refuse_clearly(tiny_pair):
    model = EasdLM(pair="tiny-random", backend=tiny_pair.backend, method="sd")
    for score in (model.loglikelihood, model.loglikelihood_rolling):
        with pytest.raises(EasdError, match="EASD is a decoding method; choose generate_until tasks"):
            score([])


def test_generation_kwargs_map_to_settings():
    model = EasdLM(pair="tiny-random", method="easd", tau_h=2, top_n=4)
    greedy, until = model.request_settings({"until": "END", "max_gen_toks": 7, "do_sample": False, "temperature": 0.7})
    assert (greedy.max_new_tokens, greedy.temperature, greedy.tau_h, greedy.top_n, until) == (7, 0.0, 2.0, 4, ["END"])
    sampled, _ = model.request_settings({"do_sample": True, "temperature": 0.7, "top_p": 0.9})
    assert (sampled.temperature, sampled.top_p, sampled.max_new_tokens) == (0.7, 0.9, 256)


def test_chat_template_formats_the_history_as_the_tokenizer_does(tiny_pair, hf_tiny_pair):
    model = EasdLM(pair="tiny-random", backend=tiny_pair.backend)
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}, {"role": "user", "content": "2+2?"}]
    reference = hf_tiny_pair.tokenizer.tokenizer  # transformers' own tokenizer renders the reference
    assert model.apply_chat_template(chat) == reference.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)


@pytest.mark.parametrize(
    "text, until, cut", [("a\nb", ["\n"], "a"), ("abc", ["x"], "abc"), ("1 STOP 2 END", ["END", "STOP"], "1 "), ("", [], "")]
)
def test_cut_at_the_earliest_stop(text, until, cut):
    assert cut_at_stops(text, until) == cut
