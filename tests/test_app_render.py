"""The app's rendering of traces: escaping, lanes, inspector, figures and the step-through."""

from html import unescape

import pytest

from components.session import Session
from easd.method.settings import DecodeSettings
from easd.method.summary import summarize
from easd.method.trace import TokenRecord, Trace
from easd.method.whatif import RuleView
from easd.render import figures
from easd.render.inspector import inspector_html
from easd.render.lanes import lane_html, tooltip
from easd.render.stats import comparison_html
from easd.render.stepper import block_views, stepper_html
from easd.traces import files as trace_io

NASTY = ['<img src=x onerror="window.__xss=1">', '"><script>window.__xss=2</script>', "${window.__xss=3}", "{{value}}", "a&b"]


def nasty_trace() -> Trace:
    records = []
    for i, text in enumerate(NASTY):
        top = [(i, text, 0.5), (9, NASTY[-1 - i], 0.2)] + [(10 + j, "x", 0.05) for j in range(3)]
        records.append(TokenRecord(i, i, i, text, "easd_penalty", 99, text, 0.3, 0.4, 1.0, 1.5, 1.6, 0.8, True, top, top))
    return Trace(DecodeSettings(method="easd"), "d", "t", records)


def test_token_text_is_escaped_in_lanes_and_tooltips():
    html = lane_html("easd", nasty_trace())
    for raw in ("<img", "<script", 'onerror="'):
        assert raw not in html
    assert "&lt;img src=x onerror=&quot;window.__xss=1&quot;&gt;" in html
    assert html.count('class="tok ') == len(NASTY)


def test_inspector_and_stepper_escape_too():
    trace = nasty_trace()
    for record in trace.records:
        html = inspector_html("right", trace, record, RuleView())
        assert "<img" not in html and "<script" not in html
    stepper = stepper_html("EASD", block_views(trace), 0)
    assert "<img" not in stepper and "<script" not in stepper


def test_invisible_characters_are_shown():
    record = TokenRecord(0, 0, 1, "a\tb\x16\n", "target")
    html = lane_html("sd", Trace(DecodeSettings(method="target"), records=[record]))
    assert "⇥" in html and "\\x16" in html and "↵" in html
    assert "\n" in tooltip(record)


def test_lanes_mark_selection_fork_penalties_and_what_if(run):
    sd, easd = run(method="sd", max_new_tokens=40, record_top=20), run(method="easd", max_new_tokens=40, record_top=20)
    session = Session(traces={"left": sd, "right": easd})
    fork = session.fork
    assert fork is not None and fork == summarize(easd)["first_penalty_position"]
    html = lane_html("easd", easd, selected=3, fork=fork)
    assert f'class="tok o-easd_penalty fork" data-lane="easd" data-pos="{fork}"' in html
    assert 'data-pos="3"' in html and " sel" in html


@pytest.mark.parametrize("origin", ["draft_accepted", "target_resample", "easd_penalty", "bonus"])
def test_inspector_explains_every_origin(run, origin):
    runs = [run(method="easd", seed=seed, max_new_tokens=48, temperature=1.0, record_top=20) for seed in range(3)]
    trace, record = next((t, r) for t in runs for r in t.records if r.origin == origin)
    html = inspector_html("right", trace, record, RuleView())
    assert f"Token #{record.position}" in html and "rank" in html
    if origin == "easd_penalty":
        assert "refused" in html and "Rule <code>full</code> at these settings: <b>fires</b>" in html
    if origin == "bonus":
        assert "bonus" in html and "Rule" not in html


def test_figures_build_from_live_and_loaded_traces(run, tmp_path):
    sd, easd = run(method="sd", max_new_tokens=30, record_top=20), run(method="easd", max_new_tokens=30, record_top=20)
    trace_io.write_csv([sd, easd], tmp_path / "t.csv")
    for trace in (easd, trace_io.load(tmp_path / "t.csv")[1]):
        assert len(figures.signal_timeline(trace, RuleView(), selected=4).data) >= 3
        assert len(figures.topk_heatmap(trace, selected=4).data) == 2
    grid = figures.whatif_map(sd, RuleView())
    assert grid.data[0].z.shape == (len(figures.TAU_H_GRID), len(figures.TAU_O_GRID))
    assert figures.whatif_map(None, RuleView()).data == ()


def test_figures_are_legible_at_a_laptops_width(run):
    """Issue 74: the heatmap opens at the fork (not the last positions), its cells hold a few characters, a glyph a font
    may lack shown as its escape; titles sit top left, clear of Plotly's toolbar; the timeline's legend is under the
    plot; the speed map says why it is empty for a run whose pass costs were not measured here."""
    easd = run(method="easd", max_new_tokens=60, record_top=20)
    heatmap = figures.topk_heatmap(easd, fork=40)
    assert 40 in heatmap.data[0].x and len(heatmap.data[0].x) == figures.HEATMAP_WINDOW
    assert list(figures.topk_heatmap(easd).data[0].x)[0] == 0  # no fork, no selection: the start
    assert figures.cell_text("\ufffd") == "\\ufffd" and figures.cell_text("你") == "\\u4f60" and figures.cell_text("a\n") == "a↵"
    assert len(figures.cell_text("a-very-long-token")) == figures.CELL_CHARS
    assert figures.signal_timeline(easd, RuleView()).layout.legend.y < 0
    assert figures.whatif_map(easd, RuleView()).layout.title.xanchor == "left"
    easd.info.clear()  # a run as a file from elsewhere holds it: no pass costs
    said = figures.speed_map(easd).layout.annotations[0].text
    assert "does not record this machine's pass costs" in said


def test_stepper_shows_every_draft_from_json_and_the_examined_ones_from_csv(run, tmp_path):
    easd = run(method="easd", max_new_tokens=40)
    trace_io.save([easd], tmp_path / "t.json")
    trace_io.save([easd], tmp_path / "t.csv")
    from_json, from_csv = trace_io.load(tmp_path / "t.json")[0], trace_io.load(tmp_path / "t.csv")[0]
    json_views, csv_views = block_views(from_json), block_views(from_csv)
    assert len(json_views) == len(csv_views) == len({r.block for r in easd.records})
    rejected = next(
        i for i, v in enumerate(json_views) if v.end in ("target_resample", "easd_penalty") and len(v.records) < len(v.drafted)
    )
    assert len(json_views[0].drafted) == 4 and all(len(v.records) <= len(v.drafted) + 1 for v in json_views)
    assert len(csv_views[rejected].drafted) == len(csv_views[rejected].records)
    assert "never examined" in stepper_html("EASD", json_views, rejected)
    assert "not kept in CSV traces" in stepper_html("EASD", csv_views, rejected)


def test_session_places_loaded_runs_in_their_lanes(run):
    session = Session()
    easd, sd = run(method="easd", max_new_tokens=5), run(method="sd", max_new_tokens=5)
    note = session.load_traces([easd, sd], "both.json")
    assert session.traces == {"left": sd, "right": easd} and "Loaded 2 run(s)" in note
    target = run(method="target", max_new_tokens=5)
    session.load_traces([target], "t.csv")
    assert session.traces["left"] is target and session.traces["right"] is None


def test_the_comparison_line_shows_a_speed_only_when_the_work_differed(run):
    sd = run(method="sd", max_new_tokens=40)
    never = run(method="easd", tau_h=1e9, max_new_tokens=40)  # the same work as SD
    easd = run(method="easd", max_new_tokens=40)
    assert never.token_ids == sd.token_ids
    identical = str(comparison_html(sd, never, None))
    assert "identical" in identical and "tokens/s" not in identical and "passes per token" not in identical
    forked = unescape(str(comparison_html(sd, easd, summarize(easd)["first_penalty_position"])))
    assert "target passes per token" in forked and "SD's tokens/s" in forked


def test_inspector_explains_mtis_guidance_with_both_candidate_lists(run):
    trace = run(method="mti", mti_tau=2.0, mti_negative="<b>WRONG</b>", max_new_tokens=32)
    guided = next(r for r in trace.records if r.origin == "mti_guided")
    html = unescape(str(inspector_html("right", trace, guided, RuleView())))
    assert "Token #" in html and "in MTI" in html and "> τ = 2" in html and "ω = 1.5" in html
    assert "target token, unguided" in html and "guided token" in html and "p̃" in html
    assert "&lt;b&gt;WRONG&lt;/b&gt;" in str(inspector_html("right", trace, guided, RuleView()))  # the negative prompt, escaped
    plain = next(r for r in trace.records if r.origin == "target")
    html = unescape(str(inspector_html("right", trace, plain, RuleView())))
    assert "≤ τ = 2" in html and "did not intervene" in html and "guided token" not in html


def test_the_comparison_line_names_each_lanes_interventions(run):
    easd, mti = run(method="easd", max_new_tokens=40), run(method="mti", mti_tau=1.0, max_new_tokens=40)
    line = unescape(str(comparison_html(easd, mti, 0)))
    assert "EASD: " in line and " penalt" in line and "MTI: " in line and "guided token" in line
    assert "MTI's first guided token is at token" in line
