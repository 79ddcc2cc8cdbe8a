"""Links to a token of a recorded run (components.links): what a page's address may name, each refusal in one line."""

import pytest

from components.links import Link, eval_folder, link_html
from easd.errors import SettingsError


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
    ],
)
def test_a_bad_link_is_one_line(query, line):
    with pytest.raises(SettingsError) as caught:
        Link.read(query)
    assert line in f"{caught.value.setting}: {caught.value.message}"


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
