"""The Evaluation tab's loading and rendering, without a browser: handlers called as the page calls them."""

import functools
import shutil
from pathlib import Path

import gradio as gr
import pandas as pd
import pytest

from components import evaluation
from easd.errors import EasdError
from easd.lab.runs.results_table import load_results


@pytest.fixture(scope="module")
def tab():
    with gr.Blocks():
        return evaluation.build_evaluation_tab([])


def test_only_allowed_folders_open(tab, eval_folder, tmp_path):
    for forged in (str(tmp_path), "1", "-1", "../etc", 3):
        with pytest.raises(EasdError, match="That folder is not one"):
            evaluation.load_folder(tab, [str(eval_folder)], {tab.folder: forged})
    shown = evaluation.load_folder(tab, [str(eval_folder)], {tab.folder: "0"})
    assert shown[tab.message].startswith("<p>Opened")
    assert isinstance(shown[tab.summary], pd.DataFrame) and list(shown[tab.summary]["method"]) == ["sd", "easd"]


def test_uploads_need_results_and_bad_files_get_a_message(tab, eval_folder, tmp_path):
    with pytest.raises(EasdError, match="results.csv is needed"):
        evaluation.load_uploads(tab, {tab.uploads: [str(eval_folder / "summary.csv")]})
    (tmp_path / "results.csv").write_text("not,our,columns\n1,2,3\n")
    with pytest.raises(EasdError, match="^Could not read") as caught:
        evaluation.load_uploads(tab, {tab.uploads: [str(tmp_path / "results.csv")]})
    assert str(tmp_path) not in str(caught.value)  # no server path in the message
    header_only = tmp_path / "header" / "results.csv"
    header_only.parent.mkdir()
    header_only.write_text((eval_folder / "results.csv").read_text().splitlines()[0] + "\n")
    with pytest.raises(EasdError, match="^Could not read"):
        evaluation.load_uploads(tab, {tab.uploads: [str(header_only)]})
    shown = evaluation.load_uploads(tab, {tab.uploads: [str(eval_folder / "results.csv")]})  # summary and paired computed
    assert "mcnemar_p" in shown[tab.paired].columns


def test_answers_side_by_side_are_escaped(eval_folder):
    results = load_results(eval_folder / "results.csv")
    results.loc[0, "text"] = "<script>alert(1)</script>"
    results.loc[0, "prediction"] = '"><img src=x onerror=alert(1)>'
    table = evaluation.problem_table(results)
    assert list(table.columns[:3]) == ["problem_id", "sample", "gold"] and len(table) == 3
    html = evaluation.answer_html(results, results.loc[0, "problem_id"], results.loc[0, "sample"], results.loc[0, "method"])
    assert "<script>" not in html and "&lt;script&gt;" in html and "<img" not in html


def test_header_only_or_nan_results_get_one_line(tab, eval_folder, tmp_path):
    lines = (eval_folder / "results.csv").read_text(encoding="utf-8").splitlines(keepends=True)
    (tmp_path / "results.csv").write_text(lines[0], encoding="utf-8")
    with pytest.raises(EasdError, match="results.csv: holds no results yet, only its header"):
        evaluation.load_uploads(tab, {tab.uploads: [str(tmp_path / "results.csv")]})
    results = pd.read_csv(eval_folder / "results.csv", dtype=str, keep_default_na=False)
    results.loc[1, "new_tokens"] = "nan"
    results.to_csv(tmp_path / "results.csv", index=False)
    with pytest.raises(EasdError, match="results.csv: row 3, column new_tokens: 'nan' is not a number"):
        evaluation.load_uploads(tab, {tab.uploads: [str(tmp_path / "results.csv")]})


def test_the_differences_are_the_problems_where_answers_or_verdicts_part(eval_folder):
    results = load_results(eval_folder / "results.csv")
    table = evaluation.differences_table(results, "sd", "easd")
    sd, easd = (results[results["method"] == m].set_index("problem_id") for m in ("sd", "easd"))
    parted = [
        p
        for p in sd.index
        if sd.loc[p, "prediction"] != easd.loc[p, "prediction"] or sd.loc[p, "correct"] != easd.loc[p, "correct"]
    ]
    assert sorted(table["problem_id"]) == sorted(parted) and parted, "the tiny pair's SD and EASD answer differently"
    for _, row in table.iterrows():
        a, b = sd.loc[row["problem_id"], "text"], easd.loc[row["problem_id"], "text"]
        at = row["texts differ at character"]
        assert a[:at] == b[:at] and a[at : at + 1] != b[at : at + 1]
        assert row["easd: first penalty"] == int(easd.loc[row["problem_id"], "first_penalty_position"])
    assert evaluation.differences_table(results, "sd", "sd").empty  # a method against itself differs nowhere
    # verdicts that differ come first
    results.loc[(results["method"] == "easd") & (results["problem_id"] == parted[-1]), "correct"] = True
    assert evaluation.differences_table(results, "sd", "easd")["problem_id"].iloc[0] == parted[-1]


def test_a_difference_opens_both_traces_and_a_folder_without_them_says_so_in_one_line(tab, eval_folder, tmp_path):
    from types import SimpleNamespace

    shown = evaluation.load_folder(tab, [str(eval_folder)], {tab.folder: "0"})
    values = {tab.results: shown[tab.results], tab.traces: shown[tab.traces], tab.left_method: "sd", tab.right_method: "easd"}
    traces, (problem, sample) = evaluation.chosen_runs(tab, values, SimpleNamespace(index=[0, 0]))
    first = shown[tab.differences].iloc[0]
    assert [t.settings.method for t in traces.values()] == ["sd", "easd"] and (problem, sample) == (first["problem_id"], 0)
    assert evaluation.chosen_runs(tab, values, SimpleNamespace(index=[99, 0])) is None  # a click past the rows
    uploaded = evaluation.load_uploads(tab, {tab.uploads: [str(eval_folder / "results.csv")]})
    with pytest.raises(EasdError, match="holds no traces: run `python -m easd eval … --traces`"):
        evaluation.chosen_runs(tab, values | {tab.traces: uploaded[tab.traces]}, SimpleNamespace(index=[0, 0]))
    forged = shown[tab.results].copy()
    forged["problem_id"] = "../../" + forged["problem_id"].astype(str)  # a results.csv whose ids lead out of traces/
    with pytest.raises(EasdError, match="traces/ holds no trace of 'sd' on problem '../../"):
        evaluation.chosen_runs(tab, values | {tab.results: forged}, SimpleNamespace(index=[0, 0]))


@pytest.mark.slow  # a process of its own is started (spawn) to build the site
def test_the_tab_makes_a_static_site_of_an_allowed_folder_only(tab, eval_folder, tmp_path):
    import zipfile

    with pytest.raises(EasdError, match="Open an evaluation folder"):
        evaluation.make_site(tab, [str(eval_folder)], tmp_path, {tab.folder: None})
    with pytest.raises(EasdError, match="not one this app was allowed"):
        evaluation.make_site(tab, [str(eval_folder)], tmp_path, {tab.folder: "7"})
    made = evaluation.make_site(tab, [str(eval_folder)], tmp_path, {tab.folder: "0"})
    update = made[tab.site_file]
    archive = Path(update["value"]["path"] if isinstance(update, dict) else update.value["path"])
    names = set(zipfile.ZipFile(archive).namelist())
    assert {"index.html", "README.md", "assets/plotly.min.js", "assets/site.js", "evals/" + eval_folder.name + ".html"} <= names
    [made_in] = tmp_path.iterdir()  # the zip alone, in a folder of its own: no scratch site left beside it
    assert [p.name for p in made_in.iterdir()] == [archive.name]


def test_a_folder_gone_since_the_app_started_is_one_line_without_its_path(tab, eval_folder, tmp_path):
    """The operator deleted (or moved) an --eval-dir while the app ran: opening it, or making its site, says so by
    the folder's name; its path on the server is none of the browser's business."""
    gone = tmp_path / "evals" / "gsm8k-100"
    shutil.copytree(eval_folder, gone)
    opened = evaluation.load_folder(tab, [str(gone)], {tab.folder: "0"})
    shutil.rmtree(gone)
    for handler in (evaluation.load_folder, functools.partial(evaluation.make_site, downloads=tmp_path / "downloads")):
        with pytest.raises(EasdError) as caught:
            handler(tab, [str(gone)], values={tab.folder: "0", tab.results: opened[tab.results]})
        assert str(caught.value) == "gsm8k-100 holds no results.csv any more: it was moved or deleted since the app started."


@pytest.mark.slow  # a process of its own is started (spawn) to build the site
def test_a_folder_with_an_id_too_long_for_a_file_name_makes_its_site(tab, eval_folder, tmp_path):
    """A folder `eval` wrote before ids were named by their file_stem: a 300-character id's row is there, its trace
    could not be written. Its site is made (that problem listed without its runs), where it was "Something went
    wrong" (File name too long)."""
    import zipfile

    folder = tmp_path / "long-ids"
    shutil.copytree(eval_folder, folder)
    results = pd.read_csv(folder / "results.csv", dtype=str, keep_default_na=False)
    first = results[results["problem_id"] == results["problem_id"].iloc[0]]
    results = pd.concat([results, first.assign(problem_id="x" * 300, prediction=["1", "2"])])
    results.to_csv(folder / "results.csv", index=False)
    made = evaluation.make_site(tab, [str(folder)], tmp_path / "downloads", {tab.folder: "0"})
    update = made[tab.site_file]
    archive = zipfile.ZipFile(update["value"]["path"] if isinstance(update, dict) else update.value["path"])
    assert "traces not kept" in archive.read("evals/long-ids.html").decode()


@pytest.mark.slow  # app.py is started in a process of its own, and its files' process beside it
def test_after_sigterm_the_apps_files_process_ends_too(eval_folder):
    """The static site (and the one-file export) is made in a process the app starts (with multiprocessing's resource
    tracker beside it); stopped by SIGTERM, as a Space or systemd stops it, the app ran no exit handler and both
    stayed, serving nobody."""
    import signal
    import subprocess
    import sys
    import time
    import uuid

    import psutil
    from test_app_isolation import page_event
    from test_app_launch import ROOT, free_port, wait_for_page

    def running(process: psutil.Process) -> bool:
        try:
            return process.status() != psutil.STATUS_ZOMBIE  # ended, where nobody has reaped it yet
        except psutil.NoSuchProcess:
            return False

    port = free_port()
    command = [sys.executable, "app.py", "--pair", "none", "--port", str(port), "--eval-dir", str(eval_folder)]
    server = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    children = []
    try:
        url = f"http://127.0.0.1:{port}/"
        wait_for_page(url + "config", server)
        output = page_event(url, uuid.uuid4().hex, "eval_make_site", {"eval_folder": "0"})
        assert output["data"][0]["visible"] is True
        children = psutil.Process(server.pid).children()
        assert len(children) == 2  # the files' process and the resource tracker
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
        deadline = time.monotonic() + 10
        while any(map(running, children)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(map(running, children))
    finally:
        server.kill()
        server.wait(timeout=30)
        for child in filter(running, children):  # what the test started, should it have failed
            child.kill()
