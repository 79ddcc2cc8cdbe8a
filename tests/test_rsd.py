"""RSD (method `rsd`): the draft writes a step, a process reward model scores it, the target writes a refused step
again; on both backends, with tiny random PRMs in Skywork's layout (easd.pairs.tiny.write_tiny_prm)."""

import json

import pytest
from conftest import PROMPTS

from easd.errors import ModelLoadError, SettingsError
from easd.lab.grading.problems import INSTRUCTION, load_problems
from easd.method.generation import Generation
from easd.method.methods import make_settings, settings_values, with_values
from easd.method.methods import rsd as rsd_module
from easd.method.settings import DecodeSettings
from easd.method.summary import summarize
from easd.pairs.loading import load_prm, with_prm
from easd.pairs.tiny import write_tiny_prm
from easd.traces import files as trace_io

# The tiny models never write "\n\n"; a space ends their steps often enough to give several steps a run.
RSD = dict(method="rsd", rsd_delimiter=" ", max_new_tokens=40)


@pytest.fixture(scope="module")
def prm_folder(tmp_path_factory):
    return write_tiny_prm(tmp_path_factory.mktemp("prm"), bias=0.0)  # rewards near 0.5, each step its own


@pytest.fixture(scope="module")
def rsd_pair(tiny_pair, prm_folder):
    return with_prm(tiny_pair, str(prm_folder))


def run(pair, **settings):
    return Generation(pair, PROMPTS[0], make_settings(settings)).run()


def steps_of(trace):
    return sorted({r.own.rsd_step for r in trace.records})


def test_delta_zero_keeps_every_draft_step_and_is_draft_only(rsd_pair):
    draft = run(rsd_pair, method="draft", max_new_tokens=40)
    rsd = run(rsd_pair, **RSD, rsd_delta=0.0)
    assert rsd.token_ids == draft.token_ids and {r.origin for r in rsd.records} == {"draft"}
    assert len(steps_of(rsd)) > 2 and rsd.stats.target_calls == 0  # several steps, none asked of the target


def test_delta_above_one_keeps_no_draft_step_and_is_target_only(rsd_pair):
    target = run(rsd_pair, method="target", max_new_tokens=40)
    rsd = run(rsd_pair, **RSD, rsd_delta=1.5)
    assert rsd.token_ids == target.token_ids and {r.origin for r in rsd.records} == {"target"}
    assert rsd.stats.draft_calls > 0 and summarize(rsd)["interventions"] == len(rsd.records)  # each step tried, refused


def test_a_step_below_delta_is_written_again_by_the_target_and_one_above_is_kept(rsd_pair):
    rewards = [r.own.rsd_reward for r in run(rsd_pair, **RSD, rsd_delta=0.0).records]
    delta = (min(rewards) + max(rewards)) / 2
    rsd = run(rsd_pair, **RSD, rsd_delta=delta)
    for record in rsd.records:  # every token says whose step it is, and the reward that decided it
        assert (record.origin == "draft") == (record.own.rsd_reward >= delta)
    assert {r.origin for r in rsd.records} == {"draft", "target"}  # this δ splits the steps, so the test can fail


def test_each_reward_is_the_prms_for_the_question_and_every_step_so_far(rsd_pair):
    rsd = run(rsd_pair, **RSD, rsd_delta=0.0)
    tokenizer, steps = rsd_pair.tokenizer, []
    for step in steps_of(rsd):
        records = [r for r in rsd.records if r.own.rsd_step == step]
        steps.append(tokenizer.decode([r.token_id for r in records]).strip())
        assert records[0].own.rsd_reward == pytest.approx(rsd_pair.prm.reward(PROMPTS[0], steps), abs=1e-6)


def test_the_prms_input_for_a_two_step_answer(prm_folder):
    """As Skywork's inference code (which RSD's calls) builds it: BOS, question and "\\n" encoded as one text, each
    step alone with the step tag's id after it (the last id of "\\n\\n"; the tiny tokenizer spells it in several).
    Encoded apart, a question's last "." and the "\\n" are two tokens where Qwen2.5's vocabulary has one (".\\n",
    624, checked on the embedded pair's), so the PRM read a text unlike the one it was trained on."""
    prm = load_prm(str(prm_folder))
    tokenizer = prm.tokenizer  # the PRM reads the text with its own tokenizer
    encode = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    bos, tag = tokenizer.convert_tokens_to_ids("<|endoftext|>"), encode("\n\n")[-1]  # the reference's step tag id
    question = "Tom has 3 apples."
    head = encode("<|endoftext|>" + question + "\n")
    assert head[0] == bos
    expected = [*head, *encode("He buys 5."), tag, *encode("3 + 5 = 8."), tag]
    assert prm.input_ids(question, ["He buys 5.", "3 + 5 = 8."]) == expected


def test_the_prm_reads_the_bare_question_not_our_instruction(rsd_pair, tmp_path):
    """RSD's code gives its PRM the problem as the data states it; the model is asked it with our instruction."""
    data = tmp_path / "one.jsonl"
    data.write_text(json.dumps({"question": " Tom has 3 apples. How many? ", "answer": "3\n#### 3"}) + "\n")
    [problem] = load_problems(data, "gsm8k", style="easd")
    assert (problem.question, problem.prompt) == ("Tom has 3 apples. How many?", f"{problem.question}\n\n{INSTRUCTION}")
    settings = make_settings(**RSD, rsd_delta=0.0)
    rsd = Generation(rsd_pair, problem.prompt, settings, question=problem.question).run()
    first = [r for r in rsd.records if r.own.rsd_step == steps_of(rsd)[0]]
    step = rsd_pair.tokenizer.decode([r.token_id for r in first]).strip()
    assert first[0].own.rsd_reward == pytest.approx(rsd_pair.prm.reward(problem.question, [step]), abs=1e-6)
    assert first[0].own.rsd_reward != pytest.approx(rsd_pair.prm.reward(problem.prompt, [step]), abs=1e-6)


def test_a_prm_that_keeps_everything_and_one_that_keeps_nothing(tiny_pair, tmp_path):
    keep, refuse = (with_prm(tiny_pair, str(write_tiny_prm(tmp_path / name, bias))) for name, bias in (("k", 20), ("r", -20)))
    assert {r.origin for r in run(keep, **RSD, rsd_delta=0.99).records} == {"draft"}
    assert {r.origin for r in run(refuse, **RSD, rsd_delta=0.01).records} == {"target"}


def test_rsd_stops_after_its_segment_cap(rsd_pair, monkeypatch):
    monkeypatch.setattr(rsd_module, "MAX_SEGMENTS", 2)
    rsd = run(rsd_pair, **RSD, rsd_delta=0.0)
    assert rsd.stats.stop_reason == "max_steps" and steps_of(rsd) == [0, 1]


def test_an_rsd_run_round_trips_through_csv_and_json(rsd_pair, tmp_path):
    rewards = [r.own.rsd_reward for r in run(rsd_pair, **RSD, rsd_delta=0.0).records]
    trace = run(rsd_pair, **RSD, rsd_delta=(min(rewards) + max(rewards)) / 2)
    for name in ("t.csv", "t.json"):
        trace_io.save([trace], tmp_path / name)
        [back] = trace_io.load(tmp_path / name)
        assert back.records == trace.records and back.settings == trace.settings
        assert settings_values(back.settings)["rsd_delimiter"] == " "


def test_rsd_without_a_prm_is_refused(tiny_pair):
    with pytest.raises(SettingsError) as err:
        Generation(tiny_pair, PROMPTS[0], DecodeSettings(method="rsd"))
    assert err.value.flag == "--prm" and "none is loaded" in err.value.message


def test_a_folder_that_is_not_a_prm_and_a_prm_without_a_bos_are_refused(tmp_path, hf_tiny_pair):
    plain = tmp_path / "plain"
    hf_tiny_pair.target.module.save_pretrained(plain)  # a causal LM, but no value head
    with pytest.raises(ModelLoadError, match="is not a process reward model: its safetensors hold no value head"):
        load_prm(str(plain))
    with pytest.raises(ModelLoadError, match="tokenizer has no BOS token"):
        load_prm(str(write_tiny_prm(tmp_path / "nobos", bos=False)))
    with pytest.raises(ModelLoadError, match="is not a folder"):
        load_prm(str(tmp_path / "missing" / "x"))


@pytest.mark.parametrize("delta", [-0.1, float("nan")])
def test_delta_out_of_range_names_itself(delta):
    with pytest.raises(SettingsError) as err:
        with_values(make_settings(method="rsd"), rsd_delta=delta).validate()
    assert err.value.setting == "rsd_delta"


def test_the_command_line_runs_rsd_with_a_prm_and_refuses_it_without(prm_folder, tmp_path, capsys):
    from easd.cli import main

    generate = ["generate", "--pair", "tiny-random", "--method", "rsd", "--prompt", "Tom has 3 apples.", "--max-new-tokens", "12"]
    assert main(generate) == 2 and "--prm: RSD asks a process reward model" in capsys.readouterr().err
    assert main([*generate, "--prm", str(prm_folder), "--rsd-delimiter", " "]) == 0
    assert "rewritten tokens " in capsys.readouterr().out  # its interventions, in its own words
    data = tmp_path / "problems.jsonl"
    data.write_text('{"question": "Tom has 3 apples and buys 5 more.", "answer": "#### 8"}\n')
    evaluate = ["eval", "--pair", "tiny-random", "--data", str(data), "--methods", "target,rsd", "--max-new-tokens", "12"]
    assert main([*evaluate, "--prm", str(prm_folder), "--rsd-delta", "0", "--out", str(tmp_path / "out")]) == 0
    assert "| rsd |" in (tmp_path / "out" / "paper.md").read_text()
    sweep = ["sweep", "--grid", "rsd", "--pair", "tiny-random", "--data", str(data), "--max-new-tokens", "12"]
    assert main([*sweep, "--rsd-deltas", "0,1.5", "--out", str(tmp_path / "s")]) == 2  # no --prm
    assert main([*sweep, "--rsd-deltas", "0,1.5", "--prm", str(prm_folder), "--out", str(tmp_path / "s")]) == 0
    cells = (tmp_path / "s" / "sweep.csv").read_text().splitlines()
    assert cells[0].startswith("rsd_delta,") and [line.split(",")[0] for line in cells[1:]] == ["0.0000", "1.5000"]
    assert [float(line.split(",")[-2]) for line in cells[1:]] == [0.0, 1000.0]  # δ = 0 rewrites nothing; 1.5 everything


def test_rsd_decoded_in_chunks_equals_its_continuous_run(rsd_pair):
    """ZeroGPU decodes in chunks, each a fresh start from a snapshot: the steps so far travel with it."""
    from easd.serving.chunks import GenerationSnapshot, decode_chunk

    rewards = [r.own.rsd_reward for r in run(rsd_pair, **RSD, rsd_delta=0.0).records]
    settings = make_settings(**RSD, rsd_delta=(min(rewards) + max(rewards)) / 2)
    snapshot, records = GenerationSnapshot.of(Generation(rsd_pair, PROMPTS[0], settings)), []
    while snapshot is not None:
        [progress] = decode_chunk(rsd_pair, [snapshot], max_steps=2)
        records += [r for block in progress.blocks for r in block.records]
        snapshot = None if progress.stop_reason else progress.snapshot
    continuous = run(rsd_pair, **settings_values(settings))
    assert [(r.token_id, r.origin, r.own.rsd_step) for r in records] == [
        (r.token_id, r.origin, r.own.rsd_step) for r in continuous.records
    ]


def test_bench_times_rsd_beside_draft_only_with_its_cost_per_step(prm_folder, capsys):
    from easd.cli import main

    bench = ["bench", "--pair", "tiny-random", "--prompts", "1", "--max-new-tokens", "12", "--repeats", "1", "--rsd-delta", "0,2"]
    assert main(bench) == 2 and "--rsd-delta: RSD's rows need a process reward model" in capsys.readouterr().err
    assert main([*bench, "--prm", str(prm_folder)]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {
        name: next(line for line in lines if f" {name} " in line and "tokens/s" in line) for name in ("RSD (δ=0)", "RSD (δ=2)")
    }
    # the tiny models never write "\n\n": each answer is one step, kept whole at δ = 0, written again at δ = 2
    assert "steps 1  kept 1.00" in rows["RSD (δ=0)"] and "target 0.0" in rows["RSD (δ=0)"]
    assert "steps 1  kept 0.00" in rows["RSD (δ=2)"] and "target 12.0" in rows["RSD (δ=2)"]
    assert any("RSD (δ=0) ÷ draft-only" in line for line in lines)
