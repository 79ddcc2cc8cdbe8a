"""Every method of the spec table (easd.method.methods) through the loop, the trace files, the page's lanes and eval:
a method added to the table is tested here without a line more."""

import json

import pandas as pd
import pytest
from conftest import PROMPTS

from components.lanes import lane_html, lane_title
from easd.cli import main
from easd.method import trace as trace_io
from easd.method.decoding import Batch, Generation
from easd.method.methods import METHODS
from easd.method.settings import DecodeSettings
from easd.pairs.loading import with_prm
from easd.pairs.tiny import write_tiny_prm

# thresholds at which every method that can intervene does: EASD's rule fires at any entropy, MTI guides every
# token, RSD's reward model (rewards near 0.5) refuses every step of the draft at δ = 0.7
EAGER = dict(max_new_tokens=16, tau_h=0.0, tau_o=0.0, mti_tau=0.0, rsd_delimiter=" ")


@pytest.fixture(scope="module")
def prm_folder(tmp_path_factory):
    return write_tiny_prm(tmp_path_factory.mktemp("prm"), bias=0.0)


def test_every_method_of_the_table_decodes_in_one_batch_as_its_entry_says(tiny_pair, prm_folder, tmp_path):
    pair = with_prm(tiny_pair, str(prm_folder))
    traces = Batch(pair, [Generation(pair, PROMPTS[0], DecodeSettings(method=name, **EAGER)) for name in METHODS]).run()
    for (name, method), trace in zip(METHODS.items(), traces):
        origins = {r.origin for r in trace.records}
        assert trace.settings.method == name and origins <= set(method.origins), name
        assert (trace.stats.draft_calls > 0, trace.stats.target_calls > 0) == (method.uses_draft, method.uses_target), name
        assert bool(origins & set(method.intervention_origins)) == method.intervenes, name  # each intervening one did
        assert trace.summary()["interventions"] == sum(r.origin in method.intervention_origins for r in trace.records)
    trace_io.write_json(traces, tmp_path / "all.json")  # the trace files hold every method
    for trace, loaded in zip(traces, trace_io.read_json(tmp_path / "all.json")):
        assert (loaded.settings, loaded.records) == (trace.settings, trace.records)
    for (name, method), trace in zip(METHODS.items(), traces):  # and the page draws each
        assert lane_title("left", trace).startswith(method.title)
        assert str(lane_html("left", trace)).count('data-pos="') == len(trace.records), name


def test_eval_runs_every_method_of_the_table_and_the_papers_table_names_its_models(prm_folder, tmp_path, capsys):
    data = tmp_path / "problems.jsonl"
    data.write_text("\n".join(json.dumps({"question": f"{i} + 2?", "answer": f"#### {i + 2}"}) for i in range(2)))
    arguments = ["eval", "--pair", "tiny-random", "--data", str(data), "--methods", ",".join(METHODS), "--prm", str(prm_folder)]
    assert main([*arguments, "--max-new-tokens", "8", "--rsd-delimiter", " ", "--out", str(tmp_path / "out")]) == 0
    summary = pd.read_csv(tmp_path / "out" / "summary.csv")
    assert sorted(summary["method"]) == sorted(METHODS)
    table = (tmp_path / "out" / "paper.md").read_text(encoding="utf-8")
    for name, method in METHODS.items():
        assert f"| {name} | {method.models} |" in table


def test_the_docs_table_of_methods_is_the_code_s():
    from pathlib import Path

    page = (Path(__file__).resolve().parent.parent / "docs" / "method.md").read_text(encoding="utf-8")
    yes = lambda flag: "yes" if flag else "—"  # noqa: E731
    for name, method in METHODS.items():
        interventions = f"{', '.join(method.intervention_origins)} ({method.intervention[1]})" if method.intervenes else "—"
        grid = ", ".join(f"`{name}`" for name in method.grid) or "—"
        row = (
            f"| `{name}` | {method.title} | {yes(method.uses_draft)} | {yes(method.uses_target)} | {yes(method.verifies)} | "
            f"{', '.join(method.origins)} | {interventions} | {method.models} | {yes(method.guides)} | {grid} |"
        )
        assert row in page, name
