"""The HTML helpers (escaping by construction) and the page's handlers given bad input."""

import time

import gradio as gr
import pytest

from components import gradio_internals, handlers, views
from components.controls import page_knobs, page_words, read_settings
from components.failures import wire
from components.gallery import Gallery
from components.page import build_page
from components.session import Session
from easd.errors import Busy, SettingsError
from easd.method.methods import METHODS, knobs, settings_values
from easd.method.settings import DecodeSettings
from easd.method.whatif import RuleView
from easd.render.html import Html, join, number, tag, text
from easd.serving.host import Client, ModelHost


def test_text_and_attributes_are_escaped():
    payload = '"><img src=x onerror=alert(1)>'
    assert text(payload) == "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"
    built = tag("span", payload, class_=["tok", payload], data_pos=payload, title=None, hidden=True)
    assert built == (
        '<span class="tok &quot;&gt;&lt;img src=x onerror=alert(1)&gt;" data-pos="&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"'
        " hidden>&quot;&gt;&lt;img src=x onerror=alert(1)&gt;</span>"
    )
    assert tag("p", tag("b", "x"), "<i>") == "<p><b>x</b>&lt;i&gt;</p>"  # fragments pass, text is escaped
    assert isinstance(join(["a", tag("b", "c")]), Html) and join(["<", ">"], " & ") == "&lt; &amp; &gt;"


def test_names_come_from_code_only():
    for bad in ("img src=x", "", "1a"):
        with pytest.raises(ValueError):
            tag(bad)
    with pytest.raises(ValueError):
        tag("span", **{"on click": "x"})


def test_numbers_never_crash_the_page():
    assert number(None) == "–" and number(0.12345) == "0.123" and number(3, "d") == "3"
    assert number("<b>") == "<b>" and number(float("nan")) == "nan" and number(2.5, "d") == "2.5"


@pytest.fixture(scope="module")
def page():
    with gr.Blocks():
        return build_page(ModelHost({}, None, max_new_tokens_cap=64), [], Gallery())


BAD_SETTINGS = [
    ("k", "abc", "k: must be a whole number from 1 to 12"),
    ("k", float("nan"), "k: must be a whole number from 1 to 12"),
    ("top_n", 0, "n: must be a whole number from 1 to 20"),
    ("tau_o", None, "τ_O: must be a number from 0 to 1"),
    ("tau_h", float("inf"), "τ_H: must be a number from 0 to 4"),
    ("max_new_tokens", 65, "max new tokens: must be a whole number from 1 to 64"),
    ("seed", 2**64, "seed: must be a whole number from 0 to 2^63 − 1"),
    ("seed", 1.5, "seed: must be a whole number"),
    ("temperature", "0.5", "temperature: must be a number from 0 to 1.5"),
    ("top_p", 0, "top-p: must be a number from 0.05 to 1"),
    ("rule", "any", "EASD rule: must be one of full"),
]


@pytest.mark.parametrize("name, value, message", BAD_SETTINGS)
def test_each_bad_setting_is_named_as_the_page_names_it(name, value, message):
    with pytest.raises(SettingsError) as caught:
        read_settings({name: value}, 64)
    assert page_words(caught.value).startswith(message)
    assert not page_words(caught.value).startswith("--")


def test_generate_answers_bad_input_in_the_page_words(page, hf_tiny_pair):
    host = ModelHost({}, None)
    defaults = settings_values(DecodeSettings(max_new_tokens=16))
    values = {component: defaults[name] for name, component in page.controls.settings().items()}
    values |= {page.pair: None, page.prompt: "x", page.controls.chat: True, page.state: Session()}
    values |= {page.methods["left"]: "sd", page.methods["right"]: "mti"}
    run = wire(handlers.generate, page, host, gradio_internals.Outbox(None), show=lambda t: {page.message: views.say(t)})
    messages = [str(next(iter(u.values()))) for u in run(values | {page.methods["left"]: "<beam>"}, None)]
    assert messages == [f"<p>⚠️ left lane: must be one of {', '.join(METHODS)} (got &#x27;&lt;beam&gt;&#x27;)</p>"]
    messages = [str(next(iter(u.values()))) for u in run(values | {page.controls["k"]: "abc"}, None)]
    assert messages == ["<p>⚠️ k: must be a whole number from 1 to 12 (got &#x27;abc&#x27;)</p>"]
    messages = [str(next(iter(u.values()))) for u in run(values | {page.controls["seed"]: float("inf")}, None)]
    assert "seed: must be a whole number" in messages[0]
    messages = [str(next(iter(u.values()))) for u in run(values, None)]
    assert "no model pair is served here" in messages[0]


def test_what_if_and_step_handlers_refuse_forged_values(page):
    say = lambda t: {page.message: views.say(t)}  # noqa: E731
    values = {c: getattr(RuleView(), n) for n, c in page.controls.whatif().items()} | {page.state: Session()}
    answer = wire(handlers.rerender, page, show=say)(values | {page.controls["top_n"]: 10**9})
    assert list(answer) == [page.message] and "n: must be a whole number from 1 to 20" in answer[page.message]
    assert wire(handlers.step, page, 1, show=say)({page.step_lane: "<img>", page.state: Session()}) == gr.skip()
    event = gr.EventData(None, {"lane": "left", "pos": "1; alert(1)"})
    assert page.inspector in wire(handlers.select_token, page, show=say)(values, event)  # ignored, page redrawn


def test_unexpected_failures_are_one_generic_line(page, caplog):
    def broken(page, values):
        raise RuntimeError("/srv/secret/path exploded")

    answer = wire(broken, page, show=lambda t: {page.message: t})({})
    assert "Something went wrong" in answer[page.message] and "/srv" not in answer[page.message]
    assert "exploded" in caplog.text  # the traceback goes to the server log


def test_one_client_gets_its_share_of_the_line_and_a_closed_tab_stops_its_runs(hf_tiny_pair):
    from dataclasses import replace

    from easd.method.generation import Generation
    from easd.method.settings import DecodeSettings

    host = ModelHost({"tiny": lambda: hf_tiny_pair}, "tiny", max_queued_per_client=2, max_batch=8)
    host.ensure_loading("tiny")
    while host.pair("tiny") is None:
        time.sleep(0.05)
    me, other = Client("me", "10.0.0.1"), Client("other", "10.0.0.1")

    def rows(prompt):
        return [Generation(hf_tiny_pair, prompt, replace(DecodeSettings(max_new_tokens=400), method=m)) for m in ("sd", "easd")]

    with host.stream("tiny", rows("a"), me) as a, host.stream("tiny", rows("b"), me) as b:
        with pytest.raises(Busy, match=r"busy: you already have 2 run\(s\) going or waiting \(at most 2\); try again when"):
            with host.stream("tiny", rows("c"), me):
                pass
        with host.stream("tiny", rows("d"), other) as d:
            assert host.cancel(me) == 2  # my tab closed: both of mine stop, the other user's run goes on
            assert a.join(30) and b.join(30) and not d.done
            assert all(t.stats.stop_reason == "left" for t in a.traces() + b.traces())
    assert sum(host.states["tiny"].worker.holding(owner=c.session) for c in (me, other)) == 0  # everyone left the line


def test_session_folder_is_removed_on_clear_and_close(run, tmp_path):
    session = Session()
    session.load_traces([run(method="easd", max_new_tokens=4)], "t.json")
    csv, _ = session.export(tmp_path)
    folder = session.downloads.folder
    assert folder.is_dir() and folder.parent == tmp_path and session.export(tmp_path)[0] == csv  # replaces, not adds
    session.clear()
    assert not folder.exists() and session.traces == {"left": None, "right": None}
    session.load_traces([run(method="easd", max_new_tokens=4)], "t.json")
    session.export(tmp_path)
    folder = session.downloads.folder
    session.close()
    assert not folder.exists() and session.traces == {"left": None, "right": None}  # closed: the traces are dropped too


def test_every_control_offers_only_what_its_setting_allows():
    """The page's controls are made from the settings' declarations: a slider never reaches past its setting's range,
    so nothing the page offers is refused when the run starts (and the API takes what the page offers)."""
    declared = knobs()
    for name, knob in page_knobs(10_000).items():
        control = knob.control
        if control.kind in ("slider", "number"):
            for value in (control.low, control.high):
                declared[name].check(name, int(value) if knob.kind == "int" else value)
    assert set(settings_values(read_settings({}, 64))) == set(declared)


def test_an_rsd_lane_without_a_prm_says_why_in_one_line(page, hf_tiny_pair):
    host = ModelHost({"tiny": lambda: hf_tiny_pair}, "tiny")
    host.ensure_loading("tiny")
    while host.pair("tiny") is None:
        time.sleep(0.05)
    defaults = settings_values(DecodeSettings(max_new_tokens=16))
    values = {component: defaults[name] for name, component in page.controls.settings().items()}
    values |= {page.pair: "tiny", page.prompt: "x", page.controls.chat: True, page.state: Session()}
    values |= {page.methods["left"]: "easd", page.methods["right"]: "rsd"}
    run = wire(handlers.generate, page, host, gradio_internals.Outbox(None), show=lambda t: {page.message: views.say(t)})
    [message] = [str(u[page.message]) for u in run(values, None) if page.message in u]
    assert "the right lane&#x27;s RSD asks a process reward model" in message and "python app.py --prm FOLDER" in message
