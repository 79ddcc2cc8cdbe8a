"""Search in a run (easd.render.search): each kind of condition against hand-made tokens, and each filter it cannot
read in one line saying what was expected."""

import pytest

from easd.errors import SettingsError
from easd.method.settings import DecodeSettings
from easd.method.trace import TokenRecord, Trace
from easd.render.lanes import lane_html
from easd.render.search import MAX_QUERY, Search


def token(position, text, origin, h_draft=None, h_target=None, overlap=None, fragile=None) -> TokenRecord:
    return TokenRecord(
        position, position, position, text, origin, h_draft=h_draft, h_target=h_target, overlap=overlap, fragile=fragile
    )


RUN = Trace(
    DecodeSettings(method="easd"),
    records=[
        token(0, " Tom", "draft_accepted", 0.2, 0.1, 1.0, False),
        token(1, " has", "easd_penalty", 1.8, 1.6, 0.8, True),
        token(2, " apples", "easd_penalty", 1.7, 1.2, 0.6, False),
        token(3, " a=b", "bonus", h_target=2.0),  # a bonus token: no draft, so no H_draft or overlap
        token(4, " APPLES", "target_resample", 1.6, 1.9, 0.4, False),
    ],
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("h_draft>1.5 h_target>1.5", [1, 4]),
        ("h_draft>=1.7", [1, 2]),
        ("overlap<0.8", [2, 4]),
        ("overlap=0.8", [1]),
        ("h_target>1.5", [1, 3, 4]),  # the bonus has H_target, and nothing else
        ("origin=easd_penalty", [1, 2]),
        ("fragile", [1]),
        ("apples", [2, 4]),  # text, in any case
        ('"a=b"', [3]),  # quoted: text, even with an operator in it
        ('" has"', [1]),
        ("origin=easd_penalty overlap<0.7", [2]),  # every condition holds
        ("apples h_draft<1", []),
    ],
)
def test_each_condition_matches_what_the_trace_says(text, expected):
    assert Search.read(text).positions(RUN) == expected


@pytest.mark.parametrize(
    "text, line",
    [
        ("h_draft>high", "h_draft> needs a number, as in h_draft>1.5"),
        ("overlap<nan", "overlap< needs a number"),
        ("origin=penalty", "origin=NAME takes one of draft_accepted, target_resample, bonus, easd_penalty"),
        ("origin>bonus", "origin=NAME takes one of"),
        ("entropy>1", "entropy is not something to compare: use h_draft, h_target, overlap"),
        ('"apples', "a quoted text needs its closing quote"),
    ],
)
def test_a_filter_that_cannot_be_read_is_one_line_saying_what_was_expected(text, line):
    with pytest.raises(SettingsError) as caught:
        Search.read(text)
    assert caught.value.setting == "search" and line in caught.value.message and "\n" not in caught.value.message


def test_a_filter_is_read_whole_up_to_its_limit_and_a_longer_one_refused_naming_the_limit():
    """A filter was cut at 500 characters without a word: 50 × h_target>=0 matched nothing (its last word cut to
    "h_tar", a text), and a condition past the cut was dropped."""
    from components.controls import page_words

    last = "origin=bonus"
    whole = "h_target>1.5" + " " * (MAX_QUERY - 12 - len(last)) + last
    assert len(whole) == MAX_QUERY and Search.read(whole).positions(RUN) == [3]  # its last condition read too
    with pytest.raises(SettingsError) as caught:
        Search.read(" ".join(["h_target>=0"] * 50))
    assert page_words(caught.value) == (
        f"Find tokens: a filter may hold at most {MAX_QUERY} characters (this one holds 599): drop some conditions"
    )


def test_an_empty_filter_is_none_and_matches_are_marked_in_the_lane():
    assert Search.read("") is None and Search.read("   ") is None and Search.read(None) is None
    html = lane_html("right", RUN, found={1, 2})
    assert html.count("found") == 2 and 'data-pos="1"' in html


def test_a_hostile_filter_is_shown_as_text():
    from components.views import found_html

    search = Search.read('"<img src=x onerror=alert(1)>" "\udc80"')
    html = found_html(search, {"left": set(), "right": {1}})
    assert "<img" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html and "1 token(s) match" in html
