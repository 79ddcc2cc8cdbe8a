"""`python -m easd site`: recorded runs, an evaluation and a study as one static site, opened from disk in Chromium
with the network off, on a laptop's screen and a phone's."""

import shutil
from html import unescape
from pathlib import Path

import pandas as pd
import pytest
from test_app_browser import CHROMEDRIVER, CHROMIUM
from test_app_render import nasty_trace
from test_export import HOSTILE_PROMPT
from test_study import problem_file, study

from easd.cli import main
from easd.method.compare import Comparison
from easd.method.settings import DecodeSettings
from easd.traces import files as trace_io
from tools.offline import chromium, requests_made

# slow: its sources are decoded (a comparison, a study) and the site opened in Chromium; about 40 s in all
pytestmark = pytest.mark.slow
browser_only = pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER), reason="needs Debian's chromium and chromium-driver")


@pytest.fixture(scope="module")
def sources(hf_tiny_pair, eval_folder, tmp_path_factory):
    """A trace file (SD beside a run of hostile token texts), an eval folder whose first problem's answers part, and
    a study folder: (trace file, eval folder, study folder)."""
    folder = tmp_path_factory.mktemp("site-sources")
    traces = Comparison(hf_tiny_pair, HOSTILE_PROMPT, DecodeSettings(max_new_tokens=32)).run()
    recorded = folder / "recorded.json"
    hostile = nasty_trace()  # every hostile token text the page is tested with (a file holds no lone surrogate)
    hostile.prompt = HOSTILE_PROMPT
    trace_io.save([traces["left"], hostile], recorded)
    evaluation = folder / "eval"
    shutil.copytree(eval_folder, evaluation)
    results = pd.read_csv(evaluation / "results.csv", dtype=str, keep_default_na=False)
    # the tiny pair's answers are gibberish: make the first problem's two answers part, so the site must list it
    first = results["problem_id"] == results["problem_id"].iloc[0]
    results.loc[first & (results["method"] == "easd"), "prediction"] = "<b>42</b>"
    results.to_csv(evaluation / "results.csv", index=False)
    study(hf_tiny_pair, problem_file(folder), folder / "study")
    return recorded, evaluation, folder / "study"


@pytest.fixture(scope="module")
def built(sources, tmp_path_factory):
    out = tmp_path_factory.mktemp("built") / "site"
    assert main(["site", *map(str, sources), "-o", str(out), "--title", "A class's runs"]) == 0
    return out


def test_the_site_lists_every_source_and_keeps_plotly_once(built, sources):
    pages = sorted(p.relative_to(built).as_posix() for p in built.rglob("*.html"))
    assert "index.html" in pages and "runs/recorded.html" in pages and "evals/eval.html" in pages
    assert "studies/study.html" in pages
    home = (built / "index.html").read_text()
    for href in ("runs/recorded.html", "evals/eval.html", "studies/study.html"):
        assert f'href="{href}' in home
    plotly = (built / "assets" / "plotly.min.js").read_text()
    assert len(plotly) > 1_000_000
    for page in built.rglob("*.html"):
        html = page.read_text()
        assert plotly[:2000] not in html  # loaded from assets/, never carried
        assert "script-src 'self'\"" in unescape(html) and "<script>" not in html  # no inline script may run
    readme = (built / "README.md").read_text()
    assert readme.startswith('---\ntitle: "A class\'s runs"\n') and "sdk: static" in readme
    # the evaluation lists the problem whose answers part, linked to both runs at the token where they part
    evaluation = (built / "evals" / "eval.html").read_text()
    assert "&lt;b&gt;42&lt;/b&gt;" in evaluation and "<b>42</b>" not in evaluation
    assert 'href="../runs/eval-' in evaluation


def test_the_spaces_front_matter_reads_back_whatever_the_title_holds():
    """Read by huggingface_hub's own parser of a Space's README; unquoted, "EASD Lab: gsm8k" (the Evaluation tab's
    title) was a YAML error there."""
    from huggingface_hub import SpaceCard

    from easd.lab.site import space_readme

    for title in ("EASD Lab: gsm8k", "#1 run", 'a "quoted" title\nover two lines', "Ünïcode — 🔎", "- [x]: {y}"):
        front = SpaceCard(space_readme(title)).data
        assert front.title == " ".join(title.split()) and front.sdk == "static" and front.app_file == "index.html"


def test_bad_sources_are_one_line_and_leave_the_site_as_it_was(built, sources, tmp_path, capsys):
    before = {p: p.stat().st_mtime_ns for p in built.rglob("*")}
    broken = tmp_path / "broken.json"
    broken.write_text('{"not": "a trace"')
    assert main(["site", str(sources[0]), str(broken), "-o", str(built)]) == 2
    assert "broken.json" in capsys.readouterr().err
    assert {p: p.stat().st_mtime_ns for p in built.rglob("*")} == before  # untouched, nothing half-written
    assert not [p for p in built.parent.iterdir() if p.name.startswith(".site-")]  # nor anything left beside it
    assert main(["site", str(tmp_path / "missing"), "-o", str(tmp_path / "a")]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    assert main(["site", str(sources[0]), "-o", str(built), "--max-trace-mb", "0.001"]) == 2
    assert "raise --max-trace-mb" in capsys.readouterr().err
    other = tmp_path / "other"
    other.mkdir()
    (other / "thesis.tex").write_text("mine")
    assert main(["site", str(sources[0]), "-o", str(other)]) == 2
    assert "holds other files" in capsys.readouterr().err and (other / "thesis.tex").read_text() == "mine"


def open_page(path: Path, size: str, fragment: str = ""):
    driver = chromium(network_log=True, size=size)
    driver.execute_cdp_cmd("Network.enable", {})
    offline = {"offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1}
    driver.execute_cdp_cmd("Network.emulateNetworkConditions", offline)
    driver.get(path.resolve().as_uri() + fragment)
    return driver


@browser_only
@pytest.mark.parametrize("size", ["1280,720", "390,844"])  # a laptop; a phone, where the details are a sheet
def test_the_site_opens_offline_a_run_and_a_link_to_a_token(built, size):
    driver = open_page(built / "index.html", size)
    try:
        driver.find_element("css selector", 'a[href^="runs/recorded.html"]').click()
        inspector = driver.find_element("id", "inspector")
        driver.find_element("css selector", 'span[data-lane="left"][data-pos="5"]').click()
        assert "Token #5 in SD" in inspector.text and driver.execute_script("return location.hash") == "#left-5"
        assert driver.execute_script("return window.__xss") is None  # the hostile texts and prompt stayed text
        driver.get((built / "evals" / "eval.html").resolve().as_uri())
        driver.find_element("css selector", 'a[href^="../runs/eval-"]').click()
        wanted = driver.execute_script("return location.hash")
        assert wanted.startswith("#right-") and f"Token #{wanted.split('-')[1]} in" in driver.find_element("id", "inspector").text
        if size == "390,844":
            assert driver.execute_script("return getComputedStyle(document.getElementById('inspector')).position") == "fixed"
        driver.get((built / "studies" / "study.html").resolve().as_uri())
        assert driver.execute_script("return document.querySelectorAll('.figure.js-plotly-plot').length") > 0
        errors = [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
        assert errors == []  # the policy refused nothing: only the site's own scripts were there to run
        folder = built.resolve().as_uri()
        assert all(url.startswith((folder, "data:")) for url in requests_made(driver)), requests_made(driver)
    finally:
        driver.quit()


@browser_only
def test_a_script_that_slipped_into_a_page_would_not_run(built, tmp_path):
    site = tmp_path / "site"
    shutil.copytree(built, site)
    page = site / "runs" / "recorded.html"
    page.write_text(page.read_text().replace("</body>", '<script>window.__xss = "slipped in"</script></body>'))
    driver = open_page(page, "1280,720")
    try:
        assert driver.execute_script("return window.__xss") is None
        assert [e for e in driver.get_log("browser") if "Content Security Policy" in e["message"]]
    finally:
        driver.quit()
