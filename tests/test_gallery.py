"""The gallery of recorded comparisons (assets/gallery): real recordings of the embedded pair, opened without a model."""

import html
from dataclasses import replace

import pytest

from components.gallery import Gallery
from easd.errors import SettingsError
from easd.lab.grading.answers import extract_answer
from easd.method.compare import DEFAULT_METHODS
from easd.method.summary import summarize


@pytest.fixture(scope="module")
def opened():
    gallery = Gallery()
    return {key: gallery.open(key) for key in gallery.recordings}


def test_every_recording_opens_as_an_sd_and_an_easd_run_with_its_prompt_and_settings(opened):
    assert len(opened) >= 4
    for key, (recording, traces) in opened.items():
        assert [t.settings.method for t in traces] == list(DEFAULT_METHODS.values()), key
        wanted = recording.decode_settings()
        for trace in traces:
            assert trace.prompt == recording.prompt and "Qwen2.5-Coder" in trace.target_model, key
            assert trace.settings == replace(wanted, method=trace.settings.method), key
            assert trace.records and trace.stats.stop_reason != "stopped", key


def test_each_recording_forks_early_and_together_they_show_different_things(opened):
    answers_differ = []
    for key, (_, (sd, easd)) in opened.items():
        fork = summarize(easd)["first_penalty_position"]
        assert fork is not None and fork < 64, (key, fork)  # a fork on the first screen of tokens
        assert sd.token_ids[:fork] == easd.token_ids[:fork], key  # identical up to the penalty
        answers_differ.append(extract_answer(sd.text)[0] != extract_answer(easd.text)[0])
    settings = [r.decode_settings() for r, _ in opened.values()]
    assert any(s.rule != "full" for s in settings)  # an ablation
    assert any(s.temperature > 0 for s in settings)  # sampling
    assert any(answers_differ) and not all(answers_differ)  # a penalty that changes the answer, and one that does not


def test_only_a_listed_key_opens_a_file():
    gallery = Gallery()
    for key in ("../../etc/passwd", "assets/gallery/index.json", None, 3):
        with pytest.raises(SettingsError, match="recorded run: must be one of the gallery's runs"):
            gallery.open(key)


def test_the_viewer_opens_a_recording_with_no_model_and_refuses_other_keys():
    """`python app.py --pair none`: no pair is allowed, yet a recorded run opens with its prompt and settings."""
    import gradio as gr

    from components import handlers, views
    from components.failures import wire
    from components.page import build_page
    from components.session import Session
    from easd.serving.host import ModelHost

    viewer, gallery = ModelHost({}, None), Gallery()
    with gr.Blocks():
        page = build_page(viewer, [], gallery)
    session = Session()
    opened = wire(handlers.open_recorded, page, viewer, gallery, show=lambda text: {page.message: views.say(text)})
    key, recording = next(iter(gallery.recordings.items()))
    shown = opened({page.recorded: key, page.state: session})
    assert session.traces["left"] is not None and session.traces["right"].prompt == recording.prompt
    assert shown[page.prompt] == recording.prompt and html.escape(recording.shows) in str(shown[page.message])
    refused = opened({page.recorded: "../secrets.json", page.state: Session()})
    assert "recorded run: must be one of the gallery&#x27;s runs" in str(refused[page.message])
