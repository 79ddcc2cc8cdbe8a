"""Every field of both trace formats carrying XSS payloads, through the page's own handlers.

For each CSV column and each JSON key a trace is loaded with payloads in that field and every
HTML fragment the page would show for it (lanes, titles, stats, the inspector at every token, the
stepper at every block) is parsed: it may hold only the tags and attributes the helpers write, with
values from fixed sets. The fields whose text reaches a figure also go through the handlers as a
user drives them (load, click, step, move a slider), figures included. A file may be refused (a
one-line message) or shown escaped; never injected.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

import gradio as gr
import pytest
from hostile import PAYLOADS, csv_fields, hostile_csv, hostile_json, json_fields

from components import handlers, views
from components.controls import DEFAULTS
from components.failures import wire
from components.gallery import Gallery
from components.page import build_page
from components.session import Session
from easd.method.compare import LANES
from easd.method.methods import origins, settings_values
from easd.method.whatif import RuleView
from easd.render.html import Html
from easd.render.inspector import inspector_html
from easd.render.lanes import origin_class
from easd.render.stepper import block_views, stepper_html
from easd.serving.host import ModelHost

TAGS = {"span", "div", "p", "h3", "h4", "code", "b", "table", "tr", "td", "th", "pre", "button"}
CLASSES = {origin_class(name) for name in origins()} | {
    "o-unknown",
    "tok",
    "sel",
    "fork",
    "whatif",
    "empty",
    "inspector",
    "stepper",
}
CLASSES |= {"conditions", "candidates", "used", "unused", "shared", "hint", "draft", "drafts", "kept", "rejected", "refused"}
CLASSES |= {"unseen", "unknown", "stats", "comparison", "margins", "fragile", "close", "own"}
CLASSES |= {
    "legend",
    "fork-mark",
    "found",
    "whatif-kept",
    "lane-summary",
    "stale",
    "greedy",
    "own-list",
    "mine",
}  # the page follows its lanes
# attributes the helpers write, each with the only values they may take
FIXED = {"role": {"button"}, "tabindex": {"0", "-1"}, "aria-pressed": {"true", "false"}, "type": {"button"}}
FIXED |= {"aria-label": {"Close the token details"}}


class Checker(HTMLParser):
    """Fails on any tag, attribute or class the helpers never write."""

    def handle_starttag(self, tag, attrs):
        assert tag in TAGS, f"injected <{tag}>"
        for name, value in attrs:
            if name == "class":
                assert set(value.split()) <= CLASSES, f"class {value!r}"
            elif name == "data-lane":
                assert value in LANES
            elif name == "data-pos":
                assert value.isdigit()
            elif name in FIXED:
                assert value in FIXED[name], f"{name}={value!r}"
            else:
                assert name == "title", f"injected attribute {name}"


VIEWER = ModelHost({}, None)  # the --pair none viewer


def check(fragment) -> None:
    checker = Checker()
    checker.feed(str(fragment))
    checker.close()


@pytest.fixture(scope="module")
def page():
    with gr.Blocks():
        return build_page(VIEWER, [], Gallery())


def poke(page, path) -> list:
    """Load `path` and do what a user would: click tokens (first, last, and a penalty if there is one),
    step through blocks, move a slider."""
    session = Session()
    whatif = {c: settings_values(DEFAULTS)[name] for name, c in page.controls.whatif().items()}
    values = whatif | {page.state: session}
    say = lambda text: {page.message: views.say(text)}  # noqa: E731
    outputs = [wire(handlers.load_file, page, VIEWER, show=say)(values | {page.upload: str(path)})]
    for lane in LANES:
        trace = session.traces.get(lane)
        records = trace.records if trace else []
        penalties = [i for i, r in enumerate(records) if r.origin == "easd_penalty"][:1]
        for index in (penalties or [len(records) - 1])[: len(records)]:
            event = gr.EventData(None, {"lane": lane, "pos": index})
            outputs.append(wire(handlers.select_token, page, show=say)(values, event))
        for delta in (0, 1, -1):
            outputs.append(wire(handlers.step, page, delta, show=say)(values | {page.step_lane: lane}))
    outputs.append(wire(handlers.rerender, page, show=say)(whatif | {page.controls["tau_h"]: 0.0, page.state: session}))
    return outputs


def assert_nothing_injected(outputs: list, plain_text=()) -> None:
    """Every HTML fragment holds only the helpers' tags; `plain_text` components (the prompt box) are text, not HTML."""
    for output in outputs:
        for component, value in output.items():
            if component in plain_text:
                continue
            if isinstance(value, (Html, str)):
                check(value)
            elif hasattr(value, "to_json"):  # a Plotly figure: its text must be escaped too
                assert not re.search(r"<(img|script|svg|input)", value.to_json()), "raw HTML in a figure"


def every_fragment(page, path) -> list:
    """Load `path` as the page does, and render every fragment of it (no figures: see the test below)."""
    session = Session()
    loaded = wire(handlers.load_file, page, VIEWER, show=lambda text: {page.message: views.say(text)})
    fragments = [
        loaded(
            {page.state: session, page.upload: str(path)}
            | {c: settings_values(DEFAULTS)[n] for n, c in page.controls.whatif().items()}
        )[page.message]
    ]
    for lane, trace in session.traces.items():
        if trace is None:
            continue
        session.selected = (lane, 0)
        fragments += views.render_lanes(page, session, RuleView()).values()
        fragments += [inspector_html(lane, trace, record, RuleView()) for record in trace.records]
        steps = block_views(trace)
        fragments += [stepper_html(lane, steps, step) for step in range(len(steps))]
    return fragments


@pytest.mark.slow  # every field of both formats spoiled in a browser page, 10 s: the full suite's, not the quick tier's
@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_every_field_of_both_formats(page, trace_sources, tmp_path, fmt):
    source = trace_sources / f"t.{fmt}"
    fields = csv_fields(source) if fmt == "csv" else json_fields(source)
    assert len(fields) > 20
    for field in fields:
        target = tmp_path / f"{re.sub(r'[^a-z0-9_]', '_', field)}.{fmt}"
        path = hostile_csv(source, [field], target) if fmt == "csv" else hostile_json(source, [field], target)
        try:
            fragments = every_fragment(page, path)
        except Exception:  # a field that breaks rendering is answered by the page in one line (components.failures.wire)
            continue
        for fragment in fragments:
            check(fragment)
        assert str(tmp_path) not in str(fragments[0]), field  # a refusal names the file, not the server's path


FIGURE_FIELDS = {  # the fields whose text reaches a figure or an attribute, driven through the handlers
    "csv": ["draft_top1_text", "origin"],
    "json": ["rows[].target_top1_text", "blocks[].end"],
}


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_fields_driven_through_the_handlers(page, trace_sources, tmp_path, fmt):
    source = trace_sources / f"t.{fmt}"
    for field in FIGURE_FIELDS[fmt]:
        target = tmp_path / f"{re.sub(r'[^a-z0-9_]', '_', field)}.{fmt}"
        path = hostile_csv(source, [field], target) if fmt == "csv" else hostile_json(source, [field], target)
        assert_nothing_injected(poke(page, path), plain_text={page.prompt})


def test_payloads_reach_the_page_only_escaped(page, trace_sources):
    shown = poke(page, hostile_csv(trace_sources / "t.csv", ["token_text"], trace_sources / "token_text.csv"))
    lanes = "".join(str(o.get(page.lanes["left"], "")) for o in shown)
    assert "&lt;input autofocus" in lanes and "&quot; onmouseover=&quot;" in lanes
    assert_nothing_injected(shown, plain_text={page.prompt})


def test_payloads_cover_attribute_breaking_and_autofocus():
    assert any(p.startswith('" on') for p in PAYLOADS) and any("autofocus" in p for p in PAYLOADS)
