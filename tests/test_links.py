"""Links to a token of a recorded run (components.links): what a page's address may name, each refusal in one line."""

import pytest

from components.evaluation import NO_TRACES, problem_runs
from components.links import Link, eval_folder, link_html
from easd.errors import EasdError, SettingsError
from easd.files import file_stem
from easd.lab.runs.evaluate import trace_name
from easd.traces import files as trace_io


def test_a_link_names_a_gallery_run_or_an_allowed_eval_problem_and_a_token():
    assert Link.read({}) is None and Link.read({"room": "ABC"}) is None  # a room, or nothing: not a link
    gallery = Link.read({"run": "shirt", "lane": "left", "token": "24"})
    assert (gallery.source, gallery.lane, gallery.token) == ({"run": "shirt"}, "left", 24)
    assert gallery.to("right", 3) == "?run=shirt&lane=right&token=3"
    problem = Link.read({"eval": "gsm8k-100", "problem": "7", "token": "5"})
    assert problem.source == {"eval": "gsm8k-100", "problem": "7", "sample": "0", "left": "sd", "right": "easd"}
    assert (problem.lane, problem.token) == ("right", 5)  # a token without a lane is the right lane's


@pytest.mark.parametrize(
    "query, line",
    [
        ({"run": "x", "lane": "middle"}, "lane: must be left or right"),
        ({"run": "x", "token": "-1"}, "token: must be a whole number from 0"),
        ({"run": "x", "token": "<script>"}, "token: must be a whole number from 0"),
        ({"eval": "x"}, "problem: a link to an evaluation folder names a problem"),
        ({"eval": "x", "problem": "1", "sample": "one"}, "sample: must be a whole number"),
        # str.isdigit() takes these, int() does not (or takes what the message does not promise)
        ({"run": "shirt", "token": "\u00b2"}, "token: must be a whole number from 0 to 999,999,999"),
        ({"run": "shirt", "token": "\u0661"}, "token: must be a whole number"),
        ({"eval": "x", "problem": "1", "sample": "\u00b3"}, "sample: must be a whole number"),
        ({"eval": "x", "problem": "0\x00"}, "problem: must be a problem id of that folder, as text without control"),
        ({"run": "shirt\x00"}, "run: must be the key of a recording in the gallery"),
        ({"eval": "x\n", "problem": "1"}, "eval: must be the name of an evaluation folder"),
    ],
)
def test_a_bad_link_is_one_line(query, line):
    with pytest.raises(SettingsError) as caught:
        Link.read(query)
    assert line in f"{caught.value.setting}: {caught.value.message}"


def test_a_long_value_is_echoed_short():
    with pytest.raises(SettingsError) as caught:
        Link.read({"run": "shirt", "token": "9" * 200})
    assert len(caught.value.message) < 120 and "9" * 41 not in caught.value.message


def test_a_problem_the_folder_lacks_or_cannot_name_is_one_line_that_does_not_deny_its_traces(tmp_path):
    traces = tmp_path / "traces"
    traces.mkdir()
    for problem in ("7", "0\x00", "../../etc/passwd", "x" * 300):
        with pytest.raises(EasdError) as caught:
            problem_runs(traces, problem, "0", {"left": "sd", "right": "easd"})
        assert "holds no trace of 'sd' on problem" in str(caught.value) and NO_TRACES not in str(caught.value)
    with pytest.raises(EasdError, match="run `python -m easd eval … --traces`"):
        problem_runs(None, "7", "0", {"left": "sd"})


def test_only_an_allowed_folder_can_be_named_and_the_link_is_escaped(tmp_path):
    allowed = [str(tmp_path / "gsm8k-100")]
    assert eval_folder("gsm8k-100", allowed) == tmp_path / "gsm8k-100"
    for forged in ("../gsm8k-100", str(tmp_path / "gsm8k-100"), "other", ""):
        with pytest.raises(SettingsError, match="must be the name of an evaluation folder this app may open"):
            eval_folder(forged, allowed)
    hostile = Link({"run": '"><img src=x onerror=alert(1)>'})
    html = link_html(hostile, ("right", 2))
    assert "<img" not in html and "run=%22%3E%3Cimg" in html
    assert link_html(None, ("right", 2)) == "" and link_html(hostile, None) == ""


def test_a_problem_id_with_slashes_names_one_file_in_traces(tmp_path, trace_sources):
    """MATH-500's ids are paths ("test/algebra/1.json"): `eval --traces` writes one file in traces/, a link opens it."""
    traces = tmp_path / "traces"
    traces.mkdir()
    sd, easd = trace_io.load(trace_sources / "t.json")
    for method, trace in (("sd", sd), ("easd", easd)):
        name = trace_name({"problem_id": "test/algebra/1.json", "method": method, "sample": 0})
        assert "/" not in name
        trace_io.write_json([trace], traces / name)
    runs = problem_runs(traces, "test/algebra/1.json", "0", {"left": "sd", "right": "easd"})
    assert [runs[lane].settings.method for lane in ("left", "right")] == ["sd", "easd"]
    assert trace_name({"problem_id": "1003", "method": "easd", "sample": 0}) == f"{file_stem('1003')}-easd-s0.json"
