"""Every method of the spec table (easd.method.methods) through the loop, the trace files, the page's lanes and eval:
a method added to the table is tested here without a line more."""

import json
from dataclasses import dataclass

import gradio as gr
import pandas as pd
import pytest
from conftest import PROMPTS

from easd.cli import main
from easd.method.generation import Generation
from easd.method.knobs import Control, knob
from easd.method.methods import METHODS, in_batch, make_settings, register
from easd.method.methods.sd import SD, Speculative
from easd.method.step import Batch
from easd.method.summary import summarize
from easd.pairs.loading import with_prm
from easd.pairs.tiny import write_tiny_prm
from easd.render.lanes import lane_html, lane_title
from easd.traces import files as trace_io

# thresholds at which every method that can intervene does: EASD's rule fires at any entropy, MTI guides every
# token, RSD's reward model (rewards near 0.5) refuses every step of the draft at δ = 0.7
EAGER = dict(max_new_tokens=16, tau_h=0.0, tau_o=0.0, mti_tau=0.0, rsd_delimiter=" ")


@pytest.fixture(scope="module")
def prm_folder(tmp_path_factory):
    return write_tiny_prm(tmp_path_factory.mktemp("prm"), bias=0.0)


def test_every_method_of_the_table_decodes_as_its_entry_says(tiny_pair, prm_folder, tmp_path):
    """Those the batch decodes in one batch, beam search alone."""
    pair = with_prm(tiny_pair, str(prm_folder))
    alone = {name: method for name, method in METHODS.items() if not method.in_batch}
    batched = Batch(pair, [Generation(pair, PROMPTS[0], make_settings(method=name, **EAGER)) for name in in_batch()]).run()
    traces = [*batched, *(m.decode(pair, PROMPTS[0], make_settings(method=name, **EAGER)) for name, m in alone.items())]
    every = [*in_batch().items(), *alone.items()]  # in the order of `traces`
    for (name, method), trace in zip(every, traces):
        origins = {r.origin for r in trace.records}
        assert trace.settings.method == name and origins <= set(method.origins), name
        assert (trace.stats.draft_calls > 0, trace.stats.target_calls > 0) == (method.uses_draft, method.uses_target), name
        assert bool(origins & set(method.intervention_origins)) == method.intervenes, name  # each intervening one did
        assert summarize(trace)["interventions"] == sum(r.origin in method.intervention_origins for r in trace.records)
    trace_io.write_json(traces, tmp_path / "all.json")  # the trace files hold every method
    for trace, loaded in zip(traces, trace_io.read_json(tmp_path / "all.json")):
        assert (loaded.settings, loaded.records) == (trace.settings, trace.records)
    for (name, method), trace in zip(every, traces):
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

    from easd.cli.methods import methods_table

    page = (Path(__file__).resolve().parent.parent / "docs" / "method.md").read_text(encoding="utf-8")
    assert methods_table() in page


# --- a method added in one module: the one below, with a setting of its own, and nothing else edited -------------


@dataclass(frozen=True)
class CappedSettings:
    drafts: int = knob(
        2,
        "the most tokens the draft proposes per block, whatever k says",
        low=1,
        high=8,
        label="capped drafts",
        short="drafts per block at most",
        control=Control("slider", 1, 8, 1),
    )


@dataclass(frozen=True, kw_only=True)
class Capped(Speculative):
    """SD whose blocks draft at most `drafts` tokens: a researcher's variant of the kind the table is for."""

    def plan(self, generation) -> tuple[int, bool]:
        k, verifies = super().plan(generation)
        return min(k, self.own(generation.settings).drafts), verifies


@pytest.fixture
def capped():
    method = register(Capped(name="capped", title="SD, capped", models="TM + DM", origins=SD.origins, settings=CappedSettings))
    try:
        yield method
    finally:
        METHODS.pop(method.name)


def test_a_method_defined_in_one_module_is_offered_everywhere(capped, hf_tiny_pair, tmp_path, capsys):
    """The command line, the decoding loop, the trace files, the page's pickers and controls, the API's and the MCP
    tool's parameters and descriptions, eval and the docs' table all know it from its one module."""
    from components import api
    from components.gallery import Gallery
    from components.page import build_page
    from easd.cli import build_parser
    from easd.cli.flags import settings_from_args
    from easd.cli.methods import methods_table
    from easd.serving.host import ModelHost

    arguments = ["generate", "--method", "capped", "--capped-drafts", "1", "--max-new-tokens", "12", "--prompt", "x"]
    args = build_parser().parse_args(arguments)
    settings = settings_from_args(args)
    assert settings.method == "capped" and capped.own(settings).drafts == 1
    trace = Generation(hf_tiny_pair, PROMPTS[0], settings).run()
    assert len(trace.records) == 12 and max(len(block.drafted) for block in trace.blocks) == 1  # its hook ran
    for name in ("t.csv", "t.json"):  # its setting is a column, read back as it ran
        trace_io.save([trace], tmp_path / name)
        [back] = trace_io.load(tmp_path / name)
        assert (back.settings, back.records) == (trace.settings, trace.records)
    with gr.Blocks():
        page = build_page(ModelHost({}, None, max_new_tokens_cap=64), [], Gallery())
    assert ("SD, capped", "capped") in page.methods["left"].choices and "capped_drafts" in page.controls.settings()
    assert "capped_drafts" in [name for name, *_ in api.parameters()]
    described = api.endpoint(api.compare_briefly).__doc__
    assert "capped_drafts: the most tokens the draft proposes per block" in described and "capped" in described
    data = tmp_path / "problems.jsonl"
    data.write_text("\n".join(json.dumps({"question": f"{i} + 2?", "answer": f"#### {i + 2}"}) for i in range(2)))
    arguments = ["eval", "--pair", "tiny-random", "--data", str(data), "--methods", "sd,capped", "--capped-drafts", "1"]
    assert main([*arguments, "--max-new-tokens", "8", "--out", str(tmp_path / "out")]) == 0
    assert sorted(pd.read_csv(tmp_path / "out" / "summary.csv")["method"]) == ["capped", "sd"]
    assert "| `capped` | SD, capped | yes | yes | yes |" in methods_table() and "`--capped-drafts`" in methods_table()
