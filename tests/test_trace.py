"""Trace export and import: CSV and JSON round-trip exactly, and bad files get clear errors."""

import csv
import json
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from easd.errors import EasdError
from easd.method.methods import METHODS, knobs
from easd.method.settings import DecodeSettings
from easd.method.summary import summarize
from easd.method.trace import BlockInfo, RunStats, TokenRecord, Trace
from easd.traces import files as trace_io

TRICKY = [
    "a,b",
    'say "hi"',
    "line\nbreak",
    "cr\rreturn",
    "tab\there",
    "🙂",
    "\ufffd",
    " ",
    "nan",
    "None",
    "1e5",
    "",
    "#x",
    "\r\n",
    "=1+1",
    "+x",
    "-",
    "@a",
    "\tx",
    "'quoted",
    "''",
    '=HYPERLINK("http://x")',
]


def tricky_trace() -> Trace:
    records = []
    for i, text in enumerate(TRICKY):
        top = [(i, text, 0.5), (i + 1, TRICKY[-1 - i], 0.25), (7, ",", 0.125), (8, '"', 0.0625), (9, "\n", 1e-9)]
        records.append(
            TokenRecord(
                i,
                i // 3,
                i,
                text,
                "draft_accepted",
                i + 1,
                TRICKY[-1 - i],
                0.1 + 0.2,
                1 / 3,
                1.0,
                2.5,
                0.7,
                0.8,
                i % 2 == 0,
                draft_top=top,
                target_top=top[::-1],
            )
        )
    records.append(TokenRecord(len(TRICKY), 9, 5, "bonus text", "bonus", h_target=0.25, target_top=records[0].target_top))
    settings = DecodeSettings(method="easd", rule="no_overlap", tau_h=1.25, temperature=0.7, top_p=0.9, seed=11)
    stats = RunStats(prompt_tokens=3, seconds=1.5, target_calls=7, draft_calls=20, stop_reason="eos")
    blocks = [BlockInfo(0, [(1, "a"), (2, "=b")], "target_resample"), BlockInfo(9, [], "bonus")]
    return Trace(
        settings,
        '=draft, "quoted"',
        "target\nmodel",
        records,
        prompt="why?",
        system="Reason\nstep by step.",
        stats=stats,
        blocks=blocks,
    )


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_tricky_trace_round_trips_exactly(tmp_path, suffix):
    original = tricky_trace()
    trace_io.save([original], tmp_path / f"t{suffix}")
    (loaded,) = trace_io.load(tmp_path / f"t{suffix}")
    assert loaded.records == original.records
    assert loaded.settings == original.settings
    assert (loaded.draft_model, loaded.target_model) == (original.draft_model, original.target_model)
    if suffix == ".json":  # CSV rows cannot hold these
        assert (loaded.blocks, loaded.stats, loaded.prompt, loaded.system) == (
            original.blocks,
            original.stats,
            original.prompt,
            original.system,
        )


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_real_runs_round_trip_exactly(tmp_path, run, suffix):
    runs = [
        run(method="sd", max_new_tokens=30, temperature=1.0),
        run(method="easd", max_new_tokens=30, temperature=1.0, record_top=20),
    ]
    trace_io.save(runs, tmp_path / f"t{suffix}")
    loaded = trace_io.load(tmp_path / f"t{suffix}")
    assert [t.records for t in loaded] == [t.records for t in runs]
    assert [t.settings.method for t in loaded] == ["sd", "easd"]
    assert len(loaded[1].records[0].target_top) == 20


def test_json_keeps_header_and_summary(tmp_path, run):
    trace = run(method="easd", max_new_tokens=20)
    trace_io.write_json([trace], tmp_path / "t.json")
    data = json.loads((tmp_path / "t.json").read_text(encoding="utf-8"))
    header = data["runs"][0]
    assert header["summary"]["new_tokens"] == 20 and header["stats"]["target_calls"] > 0
    assert header["prompt"] == trace.prompt and header["target_model"] == "tiny-random-target"
    (loaded,) = trace_io.read_json(tmp_path / "t.json")
    assert loaded.stats == trace.stats and summarize(loaded) == summarize(trace)


def test_csv_reads_with_plain_pandas(tmp_path):
    trace_io.write_csv([tricky_trace()], tmp_path / "t.csv")
    frame = pd.read_csv(tmp_path / "t.csv", keep_default_na=False)
    texts = frame["token_text"].str.replace(r"^'", "", regex=True)  # the README's rule: strip one leading '
    assert list(texts[: len(TRICKY)]) == TRICKY
    assert list(frame.columns[:7]) == ["method", "rule", "position", "block", "token_id", "token_text", "origin"]
    assert frame.loc[len(TRICKY), "draft_token_id"] == ""  # absent values are empty cells, not zeros
    assert list(frame.columns[-2:]) == ["draft_model", "target_model"]


def test_csv_column_order_follows_the_design():
    assert "rsd_step" not in trace_io.columns(5, ["sd", "easd"])  # a file has the columns of its own methods
    names = trace_io.columns(5, ["mti", "rsd"])
    assert names[18:24] == [
        "draft_top1_id",
        "draft_top1_text",
        "draft_top1_prob",
        "target_top1_id",
        "target_top1_text",
        "target_top1_prob",
    ]
    assert names[16:18] == ["rsd_step", "rsd_reward"]
    assert names[24:27] == ["guided_top1_id", "guided_top1_text", "guided_top1_prob"]
    # every setting is a column: those every method reads as declared, then each method's own, then the models
    settings = ["tau_h", "tau_o", "top_n", "k", "temperature", "top_p", "max_new_tokens", "seed", "record_top", "signals"]
    settings += ["entropy", "mti_tau", "mti_omega", "mti_negative", "rsd_delta", "rsd_delimiter"]
    own = [name for name in knobs() if name not in settings and name not in ("method", "rule")]  # the methods added since
    assert own[-2:] == ["beam_width", "beam_length_penalty"]
    settings += own
    end = len(settings) + 2
    assert names[:2] == ["method", "rule"] and names[-end:] == [*settings, "draft_model", "target_model"]
    margins = ["h_draft_margin", "h_target_margin", "draft_gap", "target_gap", "overlap_swap"]
    margins += ["h_draft_tol", "h_target_tol", "overlap_low", "overlap_high", "fragile"]
    assert names[-end - 10 : -end] == margins


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("t.txt", "hello", "ends in .csv or .json"),
        ("t.csv", "a,b\n1,2\n", "missing columns"),
        ("t.json", "{not json", "not a readable trace JSON"),
        ("t.json", '{"format": "other"}', "not an EASD trace"),
        (
            "t.json",
            '{"format": "easd-trace", "version": 1, "runs": [{"rows": []}]}',
            "runs\\[0\\]: a run needs settings and rows",
        ),
    ],
)
def test_bad_files_get_clear_errors(tmp_path, name, content, message):
    (tmp_path / name).write_text(content)
    with pytest.raises(EasdError, match=message):
        trace_io.load(tmp_path / name)


def test_huge_and_missing_files_are_refused(tmp_path, monkeypatch):
    with pytest.raises(EasdError, match="no such file"):
        trace_io.load(tmp_path / "absent.csv")
    monkeypatch.setattr(trace_io, "MAX_TRACE_BYTES", 10)
    (tmp_path / "big.csv").write_text("x" * 11)
    with pytest.raises(EasdError, match="larger than"):
        trace_io.load(tmp_path / "big.csv")


# --- the schema: every violation refused with one line naming where -----------------------------


def refusal(path) -> str:
    """The one-line message loading `path` gives; it names the file by its base name only."""
    with pytest.raises(EasdError) as caught:
        trace_io.load(path)
    message = str(caught.value)
    assert "\n" not in message and str(path.parent) not in message and message.startswith(f"{path.name}: ")
    return message


def write_raw_csv(path, lines):
    with path.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle, lineterminator="\r\n").writerows(lines)


def raw_csv(path) -> list[list[str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle))


@pytest.mark.parametrize(
    "row, column, cell, message",
    [
        (0, "origin", "x", "'x' does not occur in easd runs (only draft_accepted, target_resample, easd_penalty, bonus)"),
        (0, "origin", '"><img src=x>', "does not occur in easd runs"),
        (0, "origin", "target", "'target' does not occur in easd runs"),
        (0, "method", "foo", f"must be one of {', '.join(METHODS)} (got 'foo')"),
        (0, "rule", "any", "'any' is not one of full, no_overlap"),
        (3, "position", "100000000000000000000", "is not an integer from 0 to 65535"),
        (3, "position", "7", "is 7, but this is token 3 of its run"),
        (3, "position", "", "is empty, but every row needs it"),
        (0, "position", "1", "the first row must start a run, with position 0"),
        (2, "block", "-1", "-1 is not an integer from 0 to 65535"),
        (5, "block", "0", "is 0, but the token before is in block 1"),
        (2, "block", "<b>", "'<b>' is not an integer"),
        (1, "token_id", "1.5", "'1.5' is not an integer"),
        (1, "token_id", "-3", "-3 is not an integer from 0"),
        (1, "p_draft", "1.5", "1.5 is not a finite number from 0 to 1"),
        (1, "p_target", "abc", "'abc' is not a finite number"),
        (1, "accept_prob", "nan", "nan is not a finite number from 0 to 1"),
        (3, "h_draft", "lots", "'lots' is not a finite number ≥ 0"),
        (3, "h_draft", "", "is empty, but a draft_accepted row needs it"),
        (3, "h_target", "-inf", "-inf is not a finite number ≥ 0"),
        (1, "overlap", "-inf", "-inf is not a finite number from 0 to 1"),
        (1, "triggered", "yes", "'yes' is not True or False"),
        (1, "draft_token_id", "", "draft_token_id: is empty, but a draft_accepted row needs it"),
        (len(TRICKY), "draft_token_text", "x", "draft_token_text: is given without draft_token_id"),
        (1, "draft_top1_prob", "2", "2.0 is not a finite number from 0 to 1"),
        (1, "draft_top2_id", "", "draft_top2_text: is given without draft_top2_id"),
        (0, "top_n", "200000", "column top_n: must be an integer from 1 to 100 (got 200000)"),
        (0, "k", "0", "column k: must be an integer from 1 to 64"),
        (0, "seed", "18446744073709551616", "is not an integer from 0 to 18446744073709551615"),
        (0, "tau_o", "inf", "inf is not a finite number"),
        (4, "tau_h", "2.0", "is 2.0, but 1.25 on the run's first row"),
    ],
)
def test_csv_schema_violations_are_named(tmp_path, row, column, cell, message):
    path = tmp_path / "t.csv"
    trace_io.write_csv([tricky_trace()], path)
    lines = raw_csv(path)
    lines[1 + row][lines[0].index(column)] = cell
    write_raw_csv(path, lines)
    found = refusal(path)
    assert found.startswith(f"t.csv: row {row + 2}, column ") and message in found


def test_csv_short_rows_and_bad_headers_are_named(tmp_path):
    path = tmp_path / "t.csv"
    trace_io.write_csv([tricky_trace()], path)
    lines = raw_csv(path)
    write_raw_csv(path, [*lines[:3], lines[3][:-2], *lines[4:]])
    assert refusal(path) == f"t.csv: row 4: has {len(lines[0]) - 2} cells, but the header has {len(lines[0])} columns"
    write_raw_csv(path, [[*lines[0], "extra"], *[[*line, ""] for line in lines[1:]]])
    assert refusal(path) == "t.csv: header: 'extra' is not a column of the trace format"
    write_raw_csv(path, [trace_io.columns(101)])
    assert "101 candidates per token is more than the 100" in refusal(path)


def set_at(data, path, value):
    for key in path[:-1]:
        data = data[key]
    data[path[-1]] = value


@pytest.mark.parametrize(
    "where, value, message",
    [
        (("runs", 0, "rows", 3, "h_draft"), "lots", "runs[0].rows[3].h_draft: 'lots' is not a finite number ≥ 0"),
        (("runs", 0, "rows", 0, "origin"), "<x>", "runs[0].rows[0].origin: '<x>' does not occur in"),
        (("runs", 0, "rows", 1, "position"), 10**20, "runs[0].rows[1].position: 100000000000000000000 is not an integer"),
        (("runs", 0, "rows", 1, "block"), "<input autofocus>", "runs[0].rows[1].block: '<input autofocus>' is not an integer"),
        (("runs", 0, "rows", 1, "block"), True, "runs[0].rows[1].block: True is not an integer"),
        (("runs", 0, "rows", 1, "overlap"), float("-inf"), "runs[0].rows[1].overlap: -inf is not a finite number"),
        (("runs", 0, "rows", 1, "p_target"), "0.5", "runs[0].rows[1].p_target: '0.5' is not a finite number from 0 to 1"),
        (("runs", 0, "rows", 1, "triggered"), 1, "runs[0].rows[1].triggered: 1 is not True or False"),
        (("runs", 0, "rows", 1, "token_text"), 12345, "runs[0].rows[1].token_text: 12345 is not text"),
        (("runs", 0, "rows", 1, "token_text"), "\ud800", "runs[0].rows[1].token_text: '\\ud800' holds a lone surrogate"),
        (("runs", 0, "rows", 1, "draft_top1_id"), "5", "runs[0].rows[1].draft_top1_id: '5' is not an integer"),
        (("runs", 0, "rows", 1, "draft_top2_id"), None, "runs[0].rows[1].draft_top2_text: is given without draft_top2_id"),
        (("runs", 0, "rows", 1, "draft_top9_id"), 3, "runs[0].rows[1].draft_top9_text: is missing"),
        (("runs", 0, "rows", 2, "easd"), 1, "runs[0].rows[2].easd: not a field of the trace format"),
        (("runs", 0, "rows", 2), [1, 2], "runs[0].rows[2]: must be an object"),
        (("runs", 0, "rows", 2, "h_target"), None, "runs[0].rows[2].h_target: is empty, but a draft_accepted row needs it"),
        (("runs", 0, "rows"), "abc", "runs[0].rows: must be a list"),
        (("runs", 0, "settings", "top_n"), 200000, "runs[0].settings.top_n: must be an integer from 1 to 100"),
        (("runs", 0, "settings", "record_top"), 10**9, "runs[0].settings.record_top: must be an integer from 0 to 100"),
        (("runs", 0, "settings", "k"), "abc", "runs[0].settings.k: 'abc' is not an integer"),
        (("runs", 0, "settings", "seed"), 2**64, "runs[0].settings.seed: 18446744073709551616 is not an integer"),
        (("runs", 0, "settings", "max_new_tokens"), "64", "runs[0].settings.max_new_tokens: '64' is not an integer"),
        (
            ("runs", 0, "settings", "method"),
            "x",
            f"runs[0].settings.method: must be one of {', '.join(METHODS)}",
        ),
        (
            ("runs", 0, "blocks", 0, "end"),
            "<b>",
            "runs[0].blocks[0].end: '<b>' is not one of target_resample, easd_penalty, bonus",
        ),
        (("runs", 0, "blocks", 0, "drafted"), [[1, "a"]] * 5, "runs[0].blocks[0].drafted: must be a list of at most k = 4"),
        (("runs", 0, "blocks", 0, "drafted"), [["1", "a"]], "runs[0].blocks[0].drafted[0][0]: '1' is not an integer"),
        (("runs", 0, "blocks", 0, "index"), -1, "runs[0].blocks[0].index: -1 is not an integer from 0"),
        (("runs", 0, "stats", "stop_reason"), "x", "runs[0].stats.stop_reason: 'x' is not one of eos, max_new_tokens"),
        (("runs", 0, "stats", "seconds"), -1, "runs[0].stats.seconds: -1 is not a finite number ≥ 0"),
        (("runs", 0, "stats", "when"), 1, "runs[0].stats.when: not a field of the trace format"),
        (("runs", 0, "info", "dtype"), [1], "runs[0].info.dtype: must be text, a number, true, false or null"),
        (("runs", 0, "prompt"), 12345, "runs[0].prompt: 12345 is not text"),
        (("version",), 3, "version: 3 is not 1 or 2, the versions this easd reads"),
        (("version",), True, "version: True is not 1 or 2, the versions this easd reads"),
        (("runs",), {}, "runs: must be a list"),
    ],
)
def test_json_schema_violations_are_named(tmp_path, where, value, message):
    path = tmp_path / "t.json"
    trace_io.write_json([tricky_trace()], path)
    data = json.loads(path.read_text(encoding="utf-8"))
    set_at(data, where, value)
    path.write_text(json.dumps(data), encoding="utf-8")
    assert refusal(path).startswith(f"t.json: {message}")


def test_a_version_1_file_reads_with_its_block_ends_renamed(tmp_path):
    path = tmp_path / "t.json"
    trace_io.write_json([tricky_trace()], path)
    data = json.loads(path.read_text(encoding="utf-8"))
    data["version"] = 1
    data["runs"][0]["blocks"][0]["end"] = "rejected"  # version 1's word for target_resample
    path.write_text(json.dumps(data), encoding="utf-8")
    assert [b.end for b in trace_io.load(path)[0].blocks] == ["target_resample", "bonus"]
    data["version"] = 2
    path.write_text(json.dumps(data), encoding="utf-8")
    assert "'rejected' is not one of target_resample" in refusal(path)  # version 2 has one word per outcome


def test_size_limits_are_enforced(tmp_path, monkeypatch):
    two = [tricky_trace(), tricky_trace()]
    for suffix in (".csv", ".json"):
        trace_io.save(two, tmp_path / f"t{suffix}")
    assert [len(t.records) for t in trace_io.load(tmp_path / "t.csv")] == [len(TRICKY) + 1] * 2
    monkeypatch.setattr(trace_io, "MAX_RUNS", 1)
    assert refusal(tmp_path / "t.csv").endswith("a file may hold at most 1 runs")
    assert refusal(tmp_path / "t.json") == "t.json: runs: holds 2 items, more than the 1 a trace may have"
    monkeypatch.setattr(trace_io, "MAX_RUNS", 100)
    monkeypatch.setattr(trace_io, "MAX_ROWS", 10)
    assert refusal(tmp_path / "t.json").startswith(f"t.json: runs[0].rows: holds {len(TRICKY) + 1} items, more than the 10")
    monkeypatch.setattr(trace_io, "MAX_CELLS", 500)
    assert "more than the 500 cells a trace may have" in refusal(tmp_path / "t.csv")
    assert "more than the 500 a trace may have" in refusal(tmp_path / "t.json")


def test_deeply_nested_json_gives_one_line(tmp_path):
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    assert refusal(tmp_path / "deep.json") == "deep.json: not a readable trace JSON (nested too deeply)"
    (tmp_path / "deep2.json").write_text('{"format": "easd-trace", "version": 1, "runs": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert "nested too deeply" in refusal(tmp_path / "deep2.json")


def test_messages_name_files_without_server_paths(tmp_path):
    (tmp_path / "t.txt").write_text("x")
    (tmp_path / "e.csv").write_text("")
    (tmp_path / "b.csv").write_bytes(b"\xff\xfe\x00")
    (tmp_path / "b.json").write_bytes(b"\xff\xfe\x00")
    for name in ("absent.csv", "t.txt", "e.csv", "b.csv", "b.json"):
        refusal(tmp_path / name)
    with pytest.raises(EasdError) as caught:
        trace_io.save([tricky_trace()], tmp_path / "t.txt")
    assert str(tmp_path) not in str(caught.value)


def test_formula_cells_are_neutralised_in_the_csv(tmp_path):
    path = tmp_path / "t.csv"
    trace_io.write_csv([tricky_trace()], path)
    header, *lines = raw_csv(path)
    text_columns = [
        i
        for i, name in enumerate(header)
        if name.endswith(("_text", "_model"))
        or name in ("origin", *(setting for setting, knob in knobs().items() if knob.kind == "text"))
    ]
    for line in lines:
        for i, cell in enumerate(line):
            if i in text_columns:
                assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")), (header[i], cell)
            else:  # numbers and booleans are written as they are, never prefixed
                assert cell in ("", "True", "False") or float(cell) == float(cell), (header[i], cell)
    token_texts = [line[header.index("token_text")] for line in lines]
    assert token_texts[TRICKY.index("=1+1")] == "'=1+1" and token_texts[TRICKY.index("\tx")] == "'\tx"
    assert token_texts[TRICKY.index("'quoted")] == "''quoted" and token_texts[TRICKY.index("''")] == "'" + "''"
    assert token_texts[TRICKY.index("#x")] == "#x"  # only formula starts and quotes are touched
    assert lines[0][header.index("draft_model")] == "'" + '=draft, "quoted"'
    assert lines[0][header.index("p_draft")] == "0.30000000000000004"


def test_ordinary_run_with_formula_tokens_round_trips(tmp_path, run):
    trace = run(method="easd", max_new_tokens=40, temperature=1.0)
    trace.records[0].token_text, trace.records[1].token_text = "-", "=SUM(A1)"
    trace_io.write_csv([trace], tmp_path / "t.csv")
    (loaded,) = trace_io.load(tmp_path / "t.csv")
    assert loaded.records == trace.records


def test_summary_counts_acceptance_once(run):
    trace = run(method="easd", max_new_tokens=40, temperature=1.0, tau_h=0.5)
    summary, records = summarize(trace), trace.records
    assert summary["examined"] == sum(r.draft_token_id is not None for r in records) > 0
    assert summary["accepted"] == sum(r.origin == "draft_accepted" for r in records)
    assert summary["blocks"] == len({r.block for r in records})
    assert summary["penalized"] == sum(r.origin == "easd_penalty" for r in records)
    assert summary["num_accepted_tokens"] == summary["accepted"]  # vLLM's name for the same count (spec_metrics)


def test_the_margin_columns_are_the_fields_of_margins_named_alike_in_the_record():
    """One list: acceptance.Margins' fields are the trace's margin columns, and a record holds each under that name."""
    from dataclasses import fields

    from easd.method.acceptance import Margins
    from easd.method.trace import MARGIN_COLUMNS, TokenRecord

    assert MARGIN_COLUMNS == [f.name for f in fields(Margins)]
    names = [f.name for f in fields(TokenRecord)]
    assert names[names.index(MARGIN_COLUMNS[0]) :][: len(MARGIN_COLUMNS)] == MARGIN_COLUMNS


def test_trace_files_written_before_methods_owned_their_records_still_load(tmp_path):
    """tests/data/before-method-records: every in-batch method's run, written by the code before origins and record
    fields were declared by their methods (every file then had the rsd_* and guided_top* columns, empty where unused).
    Both files load, the same runs, with MTI's guided candidates and RSD's steps on their methods' own records."""
    folder = Path(__file__).parent / "data" / "before-method-records"
    from_csv, from_json = trace_io.load(folder / "every-method.csv"), trace_io.load(folder / "every-method.json")
    assert [t.settings.method for t in from_csv] == ["sd", "easd", "mti", "rsd", "target", "draft"]
    assert [t.records for t in from_csv] == [t.records for t in from_json]
    mti, rsd = from_csv[2], from_csv[3]
    assert all(len(r.own.guided_top) == 5 for r in mti.records if r.origin == "mti_guided")
    assert [r.own.rsd_step for r in rsd.records] == sorted(r.own.rsd_step for r in rsd.records)
    assert all(r.own is None for t in from_csv[:2] for r in t.records)
    trace_io.save(from_json, tmp_path / "again.csv")  # and they write back as they read
    assert [t.records for t in trace_io.load(tmp_path / "again.csv")] == [t.records for t in from_json]


@pytest.fixture(scope="module")
def field_runs(tmp_path_factory, hf_tiny_pair):
    """A SpecGuard run by confidence alone (its grounding score empty on every row) and an SMC-SD run, as CSV and
    JSON: the methods whose inspectors read their own record's fields."""
    from easd.method.generation import Generation
    from easd.method.methods import make_settings

    folder = tmp_path_factory.mktemp("field-runs")
    settings = make_settings(max_new_tokens=8, record_top=3, specguard_grounding="none", specguard_delimiter=" ")
    for method in ("specguard", "smc"):
        run = Generation(hf_tiny_pair, "Tom has 3 apples.", replace(settings, method=method)).run()
        trace_io.save([run], folder / f"{method}.csv")
        trace_io.save([run], folder / f"{method}.json")
    return folder


@pytest.mark.parametrize(
    "method, column",
    [
        ("specguard", "specguard_score"),
        ("specguard", "specguard_confidence"),
        ("specguard", "specguard_step"),
        ("specguard", "specguard_drafts_top1_id"),
        ("smc", "smc_weight"),
        ("smc", "smc_sample_size"),
        ("smc", "smc_resampled"),
        ("smc", "smc_cycle"),
    ],
)
def test_a_trace_without_a_field_its_methods_inspector_reads_is_refused_naming_it(field_runs, tmp_path, capsys, method, column):
    """It loaded, then export-html, site and every token's inspector in the app raised TypeError in explains()."""
    from easd.cli import main

    assert all(r.own.specguard_grounding_score is None for r in trace_io.load(field_runs / "specguard.csv")[0].records)
    lines = raw_csv(field_runs / f"{method}.csv")  # the column gone from the header
    at = lines[0].index(column)
    write_raw_csv(tmp_path / "t.csv", [line[:at] + line[at + 1 :] for line in lines])
    data = json.loads((field_runs / f"{method}.json").read_text(encoding="utf-8"))
    for row in data["runs"][0]["rows"]:
        del row[column]
    (tmp_path / "t.json").write_text(json.dumps(data), encoding="utf-8")
    for name, where in (("t.csv", "row 2, column "), ("t.json", "runs[0].rows[0].")):
        assert refusal(tmp_path / name).startswith(f"{name}: {where}{column}: is empty, but a "), name
        assert main(["export-html", str(tmp_path / name), "--out", str(tmp_path / "t.html")]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {name}: {where}{column}: is empty") and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "t.html").exists()


def test_a_seed_past_a_floats_precision_reads_back_exactly_and_a_setting_past_its_range_is_one_line(tmp_path):
    """Settings were read through a float: a seed of 2**60 + 1 came back as 2**60, and a tau_h of 10**400 (JSON) was an
    OverflowError and its traceback."""
    trace = tricky_trace()
    trace.settings = replace(trace.settings, seed=2**60 + 1)
    for name in ("t.csv", "t.json"):
        trace_io.save([trace], tmp_path / name)
        assert trace_io.load(tmp_path / name)[0].settings.seed == 2**60 + 1, name
    data = json.loads((tmp_path / "t.json").read_text(encoding="utf-8"))
    data["runs"][0]["settings"]["tau_h"] = 10**400
    (tmp_path / "t.json").write_text(json.dumps(data), encoding="utf-8")
    assert refusal(tmp_path / "t.json").startswith(
        "t.json: runs[0].settings.tau_h: must be a number of nats ≥ 0 (got 1000000000000000000000000000000000000…, past"
    )
