"""Speculative decoding's figures under vLLM's names (easd.method.spec_metrics), against counts made by hand."""

import pytest

from easd.method.settings import DecodeSettings
from easd.method.spec_metrics import SpecMetrics
from easd.method.summary import summarize
from easd.method.trace import BlockInfo, TokenRecord, Trace
from easd.traces import files as trace_io


def drafted(position: int, block: int, origin: str) -> TokenRecord:
    """A token at a drafted position that the target judged (accepted, resampled or refused by EASD's rule)."""
    return TokenRecord(position, block, 7, "x", origin, 7, "x", 0.3, 0.4, 1.0, 1.5, 1.6, 0.8, origin == "easd_penalty")


def hand_made() -> Trace:
    """Four drafts of k = 3 and one block with no room to draft (EASD, greedy):
    block 0: accepted, accepted, accepted, bonus        -> emits 4, accepts 3, reaches positions 1-3
    block 1: accepted, resampled                        -> emits 2, accepts 1, reaches 1-2
    block 2: penalty (EASD refused the first draft)     -> emits 1, accepts 0, reaches 1
    block 3: accepted, accepted, penalty                -> emits 3, accepts 2, reaches 1-3
    block 4: no room left to draft, the target's token  -> not a draft
    """
    origins = [
        ["draft_accepted", "draft_accepted", "draft_accepted", "bonus"],
        ["draft_accepted", "target_resample"],
        ["easd_penalty"],
        ["draft_accepted", "draft_accepted", "easd_penalty"],
    ]
    records, position = [], 0
    for block, row in enumerate(origins):
        for origin in row:
            record = drafted(position, block, origin)
            if origin == "bonus":  # a bonus token has no drafted token behind it
                record = TokenRecord(position, block, 8, "y", "bonus", h_target=0.25)
            records.append(record)
            position += 1
    records.append(TokenRecord(position, 4, 9, "z", "bonus", h_target=0.25))  # k = 0: a bonus with no draft
    trace = Trace(DecodeSettings(method="easd", k=3), "d", "t")
    trace.records = records
    trace.blocks = [BlockInfo(b, [(7, "x")] * 3, row[-1]) for b, row in enumerate(origins)]
    return trace


def test_the_figures_equal_a_hand_count():
    metrics = SpecMetrics.of([hand_made()])
    assert (metrics.num_drafts, metrics.num_draft_tokens, metrics.num_accepted_tokens) == (4, 12, 6)
    assert metrics.mean_acceptance_length == 1 + 6 / 4
    assert metrics.draft_acceptance_rate == 6 / 12
    # position 1: reached by 4 drafts, accepted in 3 (blocks 0, 1, 3); position 2: reached by 3 (0, 1, 3), accepted in
    # 2 (0, 3); position 3: reached by 2 (0, 3), accepted in 1 (0)
    assert metrics.conditional_acceptance == [3 / 4, 2 / 3, 1 / 2]
    assert metrics.histogram == {1: 1, 2: 1, 3: 1, 4: 1}
    assert metrics.penalties == 2


def test_a_penalty_ends_a_verification_so_easd_accepts_less_than_sd_would_have():
    """The same drafts, SD's verdicts: blocks 2 and 3's penalized tokens would have been accepted."""
    easd = hand_made()
    sd = hand_made()
    for record in sd.records:
        if record.origin == "easd_penalty":
            record.origin = "draft_accepted"
    assert SpecMetrics.of([sd]).num_accepted_tokens == SpecMetrics.of([easd]).num_accepted_tokens + 2


def test_summaries_and_files_carry_them_and_a_csv_trace_counts_its_k(tmp_path):
    trace = hand_made()
    summary = summarize(trace)
    assert summary["mean_acceptance_length"] == 2.5 and summary["draft_acceptance_rate"] == 0.5
    assert summary["conditional_acceptance"] == pytest.approx([0.75, 2 / 3, 0.5])
    assert summary["acceptance_length_histogram"] == [1, 1, 1, 1]  # drafts that emitted 1, 2, 3, 4 tokens
    trace.stats.stop_reason = "max_new_tokens"
    trace_io.save([trace], tmp_path / "t.csv")
    [from_csv] = trace_io.load(tmp_path / "t.csv")
    assert from_csv.blocks == []  # a CSV keeps no drafts: each counts the k it ran with
    assert summarize(from_csv)["num_draft_tokens"] == 12 and summarize(from_csv)["mean_acceptance_length"] == 2.5


def test_runs_that_do_not_verify_have_no_drafts(run):
    for method in ("target", "draft", "mti"):
        summary = summarize(run(method=method, max_new_tokens=8))
        assert summary["num_drafts"] == 0 and summary["mean_acceptance_length"] is None, method
        assert SpecMetrics.of([run(method=method, max_new_tokens=8)]).line() == ""


def test_a_real_run_counts_what_its_blocks_say(run):
    """On a live run the counts agree with the trace's own blocks: every drafted block is a draft of its k tokens, and
    the tokens emitted per draft sum to the tokens of the drafted blocks."""
    trace = run(method="easd", k=4, max_new_tokens=40, tau_h=0.3)
    metrics = SpecMetrics.of([trace])
    drafts = [b for b in trace.blocks if b.drafted]
    assert metrics.num_drafts == len(drafts) and metrics.num_draft_tokens == sum(len(b.drafted) for b in drafts)
    in_drafts = sum(1 for r in trace.records if r.block in {b.index for b in drafts})
    assert sum(length * count for length, count in metrics.histogram.items()) == in_drafts
    assert metrics.num_accepted_tokens == sum(r.origin == "draft_accepted" for r in trace.records)
    assert metrics.penalties == sum(r.origin == "easd_penalty" for r in trace.records)
    assert "mean acceptance length" in metrics.line()
