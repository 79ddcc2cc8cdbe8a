"""The command line: every bad input gets one line naming the flag, exit status 2, no traceback."""

import json
import subprocess
import sys
import time

import pytest

from easd.cli import build_parser, main
from easd.traces import files as trace_io

TINY = ["generate", "--pair", "tiny-random"]


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    try:
        code = main(list(args))
    except SystemExit as exit_:  # argparse's own errors
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    "args, flag, allowed",
    [
        (["--prompt", "  "], "--prompt", "empty"),
        (["--prompt", "x", "--k", "0"], "--k", "from 1 to 64"),
        (["--prompt", "x", "--top-n", "0"], "--top-n", "from 1 to 100"),
        (["--prompt", "x", "--tau-o", "1.5"], "--tau-o", "in [0, 1]"),
        (["--prompt", "x", "--tau-o", "-0.1"], "--tau-o", "in [0, 1]"),
        (["--prompt", "x", "--tau-h", "-1"], "--tau-h", "≥ 0"),
        (["--prompt", "x", "--temperature", "-0.5"], "--temperature", "≥ 0"),
        (["--prompt", "x", "--top-p", "0"], "--top-p", "from 0.001 to 1"),
        (["--prompt", "x", "--top-p", "1.5"], "--top-p", "from 0.001 to 1"),
        (["--prompt", "x", "--max-new-tokens", "0"], "--max-new-tokens", "≥ 1"),
        (["--prompt-file", "/no/such/prompt.txt"], "--prompt-file", "no such file"),
        (["--prompt", "x", "--trace", "/no/such/dir/t.csv"], "--trace", "does not exist"),
        (["--prompt", "apples " * 600], "--prompt", "context is 512 tokens"),
        (["--prompt", "x", "--k", "abc"], "--k", "invalid int value"),
        (["--prompt", "x", "--method", "beams"], "--method", "invalid choice"),
        (["--prompt", "x", "--method", "beam", "--beam-width", "0"], "--beam-width", "from 1 to 64"),
        (["--prompt", "x", "--method", "beam", "--beam-length-penalty", "-1"], "--beam-length-penalty", "from 0 to 10"),
        (["--prompt", "x", "--method", "mti", "--mti-tau", "-1"], "--mti-tau", "≥ 0"),
        (["--prompt", "x", "--method", "mti", "--mti-omega", "0.5"], "--mti-omega", "from 1 to 10"),
        (["--prompt", "x", "--method", "mti", "--mti-negative", " "], "--mti-negative", "1 to 1,000 characters"),
        (["--prompt", "apples " * 200, "--method", "mti", "--mti-negative", "ERROR " * 60], "--mti-negative", "no room left"),
    ],
)
def test_bad_input_is_one_line_with_exit_2(capsys, args, flag, allowed):
    code, out, err = run_cli(capsys, *TINY, *args)
    assert code == 2
    lines = err.strip().splitlines()
    assert lines[-1].count(flag) >= 1 and allowed in lines[-1], err
    assert "Traceback" not in err and not [line for line in lines if line.startswith("error") and line != lines[-1]]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--smc-particles", "nan"], "--smc-particles: must be finite numbers separated by commas ('nan' is not one)"),
        (["--smc-particles", "1,1e309"], "--smc-particles: must be finite numbers separated by commas ('1e309' is not one)"),
        (["--k", "4,inf"], "--k: must be finite numbers"),
        (["--batch-sizes", "1,nan"], "--batch-sizes: must be finite numbers separated by commas ('nan' is not one)"),
        (["--methods", ""], "--methods: names no method (got ''); give some of sd, easd"),
        (["--methods", " , "], "--methods: names no method"),
        (["--methods", "sd,smc", "--batch-sizes", "1,4"], "--methods: picks the timed comparison's rows; --batch-sizes runs"),
        (["--methods", "specguard", "--suite", "spec-bench", "q.jsonl"], "--methods: picks the timed comparison's rows; --suite"),
        (["--beside", "smc", "--batch-sizes", "1,4"], "--beside: is a benchmark of its own, as --batch-sizes is"),
        (["--beside", "smc,nonesuch"], "--beside: 'nonesuch' is not a method; give some of sd, easd"),
        (["--beside", " , "], "--beside: names no method"),
        (["--beside", "smc", "--row-allowance", "2,-1"], "--row-allowance: must be whole numbers ≥ 0"),
        (["--row-allowance", "2"], "--row-allowance: applies to --beside's lanes only"),
        (["--temperature", "0.7", "--batch-sizes", "1,4"], "--temperature: samples the timed comparison's rows; --batch-sizes"),
        (["--top-p", "0.9", "--beside", "smc"], "--top-p: samples the timed comparison's rows; --beside runs its own"),
        (["--temperature", "-1"], "--temperature: must be 0 (greedy) or a number ≥ 0.001"),
        (["--temperature", "0.7", "--top-p", "0.9", "--methods", "smc"], "--top-p: SMC-SD samples without a nucleus"),
        (
            ["--temperature", "0.7", "--methods", "specguard", "--specguard-temperature", "1"],
            "--specguard-temperature: is set apart from the comparison's one protocol",
        ),
    ],
)
def test_bench_refuses_a_list_flag_that_is_no_list_of_numbers_and_methods_it_would_drop(capsys, args, message):
    """Each was a ValueError or OverflowError traceback, SD alone (--methods ''), or --methods dropped unsaid (exit 0
    without the rows it names) beside --batch-sizes or --suite; now one line naming the flag, before any model loads."""
    code, out, err = run_cli(capsys, "bench", "--pair", "tiny-random", *args)
    assert code == 2 and err.startswith(f"error: {message}") and err.count("\n") == 1 and "models:" not in err, err


NOT_UTF8 = b"\xff\xfe".decode("utf-8", "surrogateescape")  # the bytes $'\xff\xfe' as Python reads them from argv


@pytest.mark.parametrize("flag", ["--specguard-delimiter", "--rsd-delimiter", "--mti-negative"])
def test_a_text_setting_that_is_not_utf8_is_refused_by_every_command_before_loading_models(tmp_path, capsys, flag):
    """It was taken and decoded with, then writing --json or run.json raised: the run lost, --out left empty."""
    data = tmp_path / "problems.jsonl"
    data.write_text(json.dumps({"question": "How many?", "answer": "#### 4"}) + "\n")
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"question_id": 1, "category": "math", "turns": ["1+1?"]}) + "\n")
    out, written = tmp_path / "out", tmp_path / "run.json"
    commands = [
        [*TINY, "--prompt", "hi", "--max-new-tokens", "2", "--json", str(written)],
        ["eval", "--pair", "tiny-random", "--data", str(data), "--methods", "sd", "--out", str(out)],
        ["study", "--pair", "tiny-random", "--data", str(data), "--out", str(out)],
        ["acceptance", "--pair", "tiny-random", "--data", str(questions), "--out", str(out)],
    ]
    for command in commands:
        code, _, err = run_cli(capsys, *command, flag, NOT_UTF8)
        assert code == 2 and err.startswith(f"error: {flag}: must be UTF-8 text (got {NOT_UTF8!r}") and err.count("\n") == 1
        assert not out.exists() and not written.exists(), command  # refused before a model loads or a file is made


def test_empty_prompt_file(capsys, tmp_path):
    (tmp_path / "p.txt").write_text("\n\n")
    code, _, err = run_cli(capsys, *TINY, "--prompt-file", str(tmp_path / "p.txt"))
    assert code == 2 and "--prompt-file: is empty" in err


def test_missing_model_folder(capsys):
    code, _, err = run_cli(capsys, "generate", "--draft", "./no-such-model", "--target", "./also-not", "--prompt", "x")
    assert code == 2 and "--draft: ./no-such-model does not exist" in err


def test_draft_without_target(capsys):
    code, _, err = run_cli(capsys, "generate", "--draft", "./a", "--prompt", "x")
    assert code == 2 and "--target: is needed too" in err


def test_unreachable_hub_fails_fast_and_suggests_the_offline_pair(capsys, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # a closed port: like a machine without network
    started = time.monotonic()
    code, _, err = run_cli(capsys, "generate", "--draft", "Qwen/not-cached-a", "--target", "Qwen/not-cached-b", "--prompt", "x")
    assert code == 2 and time.monotonic() - started < 10
    assert "cannot be reached" in err and "--pair qwen-coder" in err


def test_generate_prints_text_then_summary_and_writes_traces(capsys, tmp_path):
    code, out, err = run_cli(
        capsys,
        *TINY,
        "--prompt",
        "Tom has 3 apples.",
        "--method",
        "easd",
        "--max-new-tokens",
        "24",
        "--trace",
        str(tmp_path / "t.csv"),
        "--json",
        str(tmp_path / "t.json"),
    )
    assert code == 0, err
    summary = out.rstrip("\n").splitlines()[-1]
    assert summary.startswith("24 tokens |") and "tokens/s" in summary and "acceptance" in summary and "penalized" in summary
    assert "gibberish" in err
    (from_csv,), (from_json,) = trace_io.load(tmp_path / "t.csv"), trace_io.load(tmp_path / "t.json")
    assert from_csv.records == from_json.records and len(from_csv.records) == 24
    assert out.startswith(from_csv.text)


def test_help_documents_every_flag():
    parser = build_parser()
    generate_help = parser._subparsers._group_actions[0].choices["generate"].format_help()
    for option in [
        "--pair",
        "--draft",
        "--target",
        "--method",
        "--rule",
        "--prompt",
        "--prompt-file",
        "--k",
        "--tau-h",
        "--tau-o",
        "--top-n",
        "--temperature",
        "--top-p",
        "--max-new-tokens",
        "--seed",
        "--dtype",
        "--no-chat",
        "--trace",
        "--json",
    ]:
        assert option in generate_help
    assert "bench" in parser.format_help() and "generate" in parser.format_help()
    assert "(default: \\n\\n)" in generate_help  # RSD's delimiter shown as typed, not as two blank lines


@pytest.mark.parametrize(
    "typed, delimiter", [([], "\n\n"), (["--rsd-delimiter", "\\n"], "\n"), (["--rsd-delimiter", "Step"], "Step")]
)
def test_rsd_delimiter_is_typed_with_backslash_n(typed, delimiter):
    assert build_parser().parse_args(["generate", "--prompt", "x", *typed]).rsd_delimiter == delimiter


@pytest.mark.slow  # `python -m easd` in a process of its own
def test_module_entry_point_runs():
    result = subprocess.run(
        [sys.executable, "-m", "easd", *TINY, "--prompt", "hi", "--max-new-tokens", "5", "--no-chat"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].startswith("5 tokens |")


def test_pairs_lists_every_named_pair(capsys):
    code, out, _ = run_cli(capsys, "pairs")
    assert code == 0
    for name in ("qwen-coder", "tiny-random", "qwen2.5", "qwen2.5-7b", "r1-distill"):
        assert f"\n{name}" in "\n" + out
    assert out.count("available here:") == 5 and "memory:" in out


def test_a_seed_past_torchs_range_is_one_line_and_the_largest_seed_decodes(capsys, tmp_path):
    """A seed of 2**64 was taken, and the run died in torch with "Overflow when unpacking long long" after the pair
    had loaded; the range now says so first, with the bound written whole (2^63 − 1, not 9.22337e+18)."""
    code, out, err = run_cli(capsys, *TINY, "--prompt", "hi", "--max-new-tokens", "4", "--seed", str(2**64))
    assert code == 2 and err == f"error: --seed: must be an integer from 0 to {2**63 - 1} (got {2**64})\n", err
    out_file = tmp_path / "t.json"
    code, _, _ = run_cli(
        capsys, *TINY, "--prompt", "hi", "--max-new-tokens", "4", "--seed", str(2**63 - 1), "--json", str(out_file)
    )
    assert code == 0 and trace_io.load(out_file)[0].settings.seed == 2**63 - 1


def test_eval_batch_size_below_one_is_refused(capsys, tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text('{"question": "1 + 1?", "answer": "#### 2"}\n' * 3)
    code, _, err = run_cli(
        capsys, "eval", "--pair", "tiny-random", "--data", str(data), "--out", str(tmp_path), "--batch-size", "0"
    )
    assert code == 2 and "--batch-size: must be an integer ≥ 1 (got 0)" in err


def test_a_batch_larger_than_memory_is_refused_with_the_figures(tiny_pair):
    from easd.errors import SettingsError
    from easd.lab.runs.evaluate import check_batch_fits

    check_batch_fits(tiny_pair, 16, 600)
    with pytest.raises(
        SettingsError, match=r"--batch-size: 100,000,000 rows of up to 600 tokens need about .* GB .* use at most \d+"
    ):
        check_batch_fits(tiny_pair, 100_000_000, 600)


def test_generate_with_beams_writes_the_best_beams_trace(capsys, tmp_path):
    args = ["--prompt", "Tom has 3 apples.", "--method", "beam", "--beam-width", "3", "--max-new-tokens", "10"]
    code, out, _ = run_cli(capsys, *TINY, *args, "--json", str(tmp_path / "b.json"))
    [trace] = trace_io.load(tmp_path / "b.json")
    assert code == 0 and trace.info["beams"] == 3 and trace.text in out and len(trace.records) == 10


def test_bench_beside_times_an_sd_lane_beside_each_neighbour_at_each_allowance(capsys):
    """`bench --beside smc`: the SD lane beside SD, beside SMC-SD with no allowance and with the class's, each with its
    ratio to beside SD and the rows its target passes served (5 with SMC-SD's 4 particles beside it every step; fewer
    on average under the allowance, when the particles sit steps out)."""
    code, out, _ = run_cli(
        capsys, "bench", "--pair", "tiny-random", "--beside", "smc", "--prompts", "1", "--repeats", "1", "--max-new-tokens", "12"
    )
    assert code == 0
    rows = {line.split("  ")[1].strip(): line.split() for line in out.splitlines() if line.startswith("  SD beside")}
    assert list(rows) == ["SD beside SD", "SD beside SMC-SD", "SD beside SMC-SD, allowance 2"]
    assert rows["SD beside SD"][4] == "1.00×" and float(rows["SD beside SMC-SD"][-3]) == 5.0
    assert 1.0 < float(rows["SD beside SMC-SD, allowance 2"][-3]) < 5.0


def test_tau_h_reads_the_same_in_every_commands_help(capsys):
    """Issue 71: one declaration (easd.method.knobs) gives τ_H's every flag, a value (generate), a value or a
    calibration (eval, study, acceptance), a row each (bench), the grid's points (study, sweep): each help says what it
    is and what a value must be in the same words."""
    import re

    from easd.method.methods import knobs

    knob, seen = knobs()["tau_h"], {}
    for command in ("generate", "eval", "study", "acceptance", "bench", "sweep"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        seen[command] = re.findall(r"--tau-hs? TAU_HS? (.*?)(?= --|$)", text)
        assert seen[command], command
        for help in seen[command]:
            assert help.startswith(knob.help) and knob.describe() in help and "(default: None)" not in help, (command, help)
    assert len({help for helps in seen.values() for help in helps}) >= 4  # the shapes differ in what they add, only
