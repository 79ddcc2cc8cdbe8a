"""Trace export and import: CSV and JSON round-trip exactly, and bad files get clear errors."""

import json

import pandas as pd
import pytest

from easd.core import trace as trace_io
from easd.core.settings import DecodeSettings
from easd.core.trace import TokenRecord, Trace
from easd.errors import EasdError

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
    return Trace(settings, 'draft, "quoted"', "target\nmodel", records, prompt="why?")


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_tricky_trace_round_trips_exactly(tmp_path, suffix):
    original = tricky_trace()
    trace_io.save([original], tmp_path / f"t{suffix}")
    (loaded,) = trace_io.load(tmp_path / f"t{suffix}")
    assert loaded.records == original.records
    assert loaded.settings == original.settings
    assert (loaded.draft_model, loaded.target_model) == (original.draft_model, original.target_model)


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
    assert loaded.stats == trace.stats and loaded.summary() == trace.summary()


def test_csv_reads_with_plain_pandas(tmp_path):
    trace_io.write_csv([tricky_trace()], tmp_path / "t.csv")
    frame = pd.read_csv(tmp_path / "t.csv", keep_default_na=False)
    assert list(frame["token_text"][: len(TRICKY)]) == TRICKY
    assert list(frame.columns[:7]) == ["method", "rule", "position", "block", "token_id", "token_text", "origin"]
    assert frame.loc[len(TRICKY), "draft_token_id"] == ""  # absent values are empty cells, not zeros
    assert list(frame.columns[-2:]) == ["draft_model", "target_model"]


def test_csv_column_order_follows_the_design():
    names = trace_io.columns(5)
    assert names[16:22] == [
        "draft_top1_id",
        "draft_top1_text",
        "draft_top1_prob",
        "target_top1_id",
        "target_top1_text",
        "target_top1_prob",
    ]
    assert names[-9:] == ["tau_h", "tau_o", "top_n", "k", "temperature", "top_p", "seed", "draft_model", "target_model"]


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("t.txt", "hello", "ends in .csv or .json"),
        ("t.csv", "a,b\n1,2\n", "missing columns"),
        ("t.json", "{not json", "not a readable trace JSON"),
        ("t.json", '{"format": "other"}', "not an EASD trace"),
        ("t.json", '{"format": "easd-trace", "runs": [{"rows": []}]}', "malformed"),
    ],
)
def test_bad_files_get_clear_errors(tmp_path, name, content, message):
    (tmp_path / name).write_text(content)
    with pytest.raises(EasdError, match=message):
        trace_io.load(tmp_path / name)


def test_bad_cell_is_named(tmp_path):
    trace_io.write_csv([tricky_trace()], tmp_path / "t.csv")
    frame = pd.read_csv(tmp_path / "t.csv", dtype=str, keep_default_na=False)
    frame.loc[0, "h_draft"] = "lots"
    frame.to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(EasdError, match="'h_draft' holds 'lots'"):
        trace_io.load(tmp_path / "t.csv")


def test_huge_and_missing_files_are_refused(tmp_path, monkeypatch):
    with pytest.raises(EasdError, match="no such file"):
        trace_io.load(tmp_path / "absent.csv")
    monkeypatch.setattr(trace_io, "MAX_TRACE_BYTES", 10)
    (tmp_path / "big.csv").write_text("x" * 11)
    with pytest.raises(EasdError, match="larger than"):
        trace_io.load(tmp_path / "big.csv")
