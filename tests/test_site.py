"""`python -m easd site`: recorded runs, an evaluation and a study as one static site, opened from disk in Chromium
with the network off, on a laptop's screen and a phone's; problem ids of every kind, the site's folder and what
the user keeps in it, and links that resolve as a browser reads them."""

import json
import os
import re
import shutil
import stat
import threading
import time
from html import escape, unescape
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import pandas as pd
import pytest
from test_app_browser import CHROMEDRIVER, CHROMIUM
from test_app_render import nasty_trace
from test_export import HOSTILE_PROMPT
from test_study import problem_file, study

from easd.cli import main
from easd.errors import SettingsError
from easd.lab.grading.problems import load_problems
from easd.lab.runs.evaluate import LocalRunner, parse_methods, run_evaluation
from easd.lab.site import build_site
from easd.lab.study.findings import analyse
from easd.lab.study.report import write_report
from easd.method.compare import Comparison
from easd.method.settings import DecodeSettings
from easd.traces import files as trace_io
from tools.offline import chromium, requests_made

browser_only = pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER), reason="needs Debian's chromium and chromium-driver")
ROOT = Path(__file__).resolve().parent.parent


# slow, the tests that take these: their sources are decoded (a comparison, a study), the site opened in Chromium
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


@pytest.mark.slow
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
    assert 'href="../runs/eval/' in evaluation


def test_the_spaces_front_matter_reads_back_whatever_the_title_holds():
    """Read by huggingface_hub's own parser of a Space's README; unquoted, "EASD Lab: gsm8k" (the Evaluation tab's
    title) was a YAML error there."""
    from huggingface_hub import SpaceCard

    from easd.lab.site import space_readme

    for title in ("EASD Lab: gsm8k", "#1 run", 'a "quoted" title\nover two lines', "Ünïcode — 🔎", "- [x]: {y}"):
        front = SpaceCard(space_readme(title)).data
        assert front.title == " ".join(title.split()) and front.sdk == "static" and front.app_file == "index.html"


@pytest.mark.slow
def test_bad_sources_are_one_line_and_leave_the_site_as_it_was(built, sources, tmp_path, capsys):
    before = {p: p.stat().st_mtime_ns for p in built.rglob("*")}
    broken = tmp_path / "broken.json"
    broken.write_text('{"not": "a trace"')
    assert main(["site", str(sources[0]), str(broken), "-o", str(built)]) == 2
    assert "broken.json" in capsys.readouterr().err
    assert {p: p.stat().st_mtime_ns for p in built.rglob("*")} == before  # untouched, nothing half-written
    assert not list(built.glob(".easd-building-*"))  # nor the folder it was being built in
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


@pytest.mark.slow
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
        driver.find_element("css selector", 'a[href^="../runs/eval/"]').click()
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


@pytest.mark.slow
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


# --- problem ids of every kind, and links as a browser reads them -----------------------------------

HOSTILE_IDS = [
    "test/algebra/1.json",  # MATH-500's: slashes, which the browser reads in a link as folders
    "a b",  # these three read the same once their odd characters are dropped
    "a/b",
    "a-b",
    "q" * 60 + "1",  # the same first 60 characters
    "q" * 60 + "2",
    "x" * 300,  # longer than a file's name may be
    '"><img src=x onerror=alert(1)>',
    "../../etc/passwd",
    "%2F",  # a %-escape of its own
    "CON",  # a name Windows keeps for itself
    "Ünïcode — 🔎",
]


def question(number: int) -> str:
    return f"Tom has {number} apples and buys 2 more. How many apples now?"


def hostile_problems(folder: Path, ids: list[str]) -> Path:
    """A problem file whose problems have `ids`, each asked in words of its own (question(i))."""
    rows = [{"id": problem, "question": question(i), "answer": f"#### {i + 2}"} for i, problem in enumerate(ids)]
    path = folder / "hostile.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def hostile_eval(hf_tiny_pair, tmp_path_factory):
    """An `eval --traces` folder (SD and EASD, 8 tokens) of a problem with each hostile id, whose two answers part
    on every problem, so that each has a page of its two runs."""
    folder = tmp_path_factory.mktemp("hostile") / "eval"
    problems = load_problems(hostile_problems(folder.parent, HOSTILE_IDS), "gsm8k")
    variants = parse_methods("sd,easd", DecodeSettings(max_new_tokens=8))
    run_evaluation(LocalRunner(hf_tiny_pair), problems, variants, 1, folder, {"pair": "tiny"}, keep_traces=True, progress=False)
    results = pd.read_csv(folder / "results.csv", dtype=str, keep_default_na=False)
    results.loc[results["method"] == "easd", "prediction"] = "parted"
    results.to_csv(folder / "results.csv", index=False)
    return folder


class Links(HTMLParser):
    """The links and script sources of a page's elements (not the text of its scripts), their values unescaped."""

    def __init__(self, page: str):
        super().__init__()
        self.found = []
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        self.found += [value for name, value in attrs if name in ("href", "src") and value is not None]


def dead_links(root: Path) -> list[str]:
    """Every link and script of the pages under `root` that leads to no file, read as a browser reads it (%-escapes
    decoded, the fragment dropped); links to other sites (the app's) are not followed."""
    dead = []
    for page in root.rglob("*.html"):
        for href in Links(page.read_text(encoding="utf-8")).found:
            if re.match(r"[a-z]+:|#", href):
                continue
            if not (page.parent / unquote(href.split("#")[0])).is_file():
                dead.append(f"{page.relative_to(root)}: {href}")
    return dead


def test_every_problem_id_has_a_page_of_its_own_and_its_link_opens_it(hostile_eval, tmp_path):
    """Ids that read alike, share their first 60 characters, or are too long for a file's name each get their own
    page (before, one overwrote another, and the page of a 300-character id could not be written at all)."""
    out = tmp_path / "site"
    assert main(["site", str(hostile_eval), "-o", str(out)]) == 0
    evaluation = (out / "evals" / "eval.html").read_text(encoding="utf-8")
    rows = [re.match(r'<tr><td>([^<]*)</td>.*href="\.\./(runs/[^"#]+)', row) for row in re.findall("<tr>.*?</tr>", evaluation)]
    rows = [row.groups() for row in rows if row]
    assert sorted(unescape(problem) for problem, _ in rows) == sorted(HOSTILE_IDS)
    assert len({href for _, href in rows}) == len(HOSTILE_IDS)  # a page each
    for problem, href in rows:
        page = (out / unquote(href)).read_text(encoding="utf-8")
        assert escape(question(HOSTILE_IDS.index(unescape(problem)))) in page  # that problem's runs
        assert len(Path(href).name) <= 70
    assert dead_links(out) == []


def test_a_folder_written_with_the_old_trace_names_still_reads(eval_folder, tmp_path):
    """An eval folder written before traces were named by their id's file_stem: its traces are found by their old
    names; a problem whose trace could not be written then (an id too long for a file's name) is listed without one."""
    from urllib.parse import quote

    from easd.lab.runs.evaluate import trace_name

    old = tmp_path / "old-eval"
    shutil.copytree(eval_folder, old)
    results = pd.read_csv(old / "results.csv", dtype=str, keep_default_na=False)
    for row in results.to_dict("records"):
        (old / "traces" / trace_name(row)).rename(old / "traces" / f"{quote(row['problem_id'], safe='')}-{row['method']}-s0.json")
    long = results[results["problem_id"] == results["problem_id"].iloc[0]].assign(problem_id="x" * 300)
    results = pd.concat([results, long])
    results.loc[results["method"] == "easd", "prediction"] = "parted"
    results.to_csv(old / "results.csv", index=False)
    out = build_site([old], tmp_path / "site", "old", progress=False)
    evaluation = (out / "evals" / "old-eval.html").read_text(encoding="utf-8")
    assert evaluation.count("open both runs") == 3 and evaluation.count("traces not kept") == 1
    assert dead_links(out) == []


@pytest.mark.slow  # a study of the tiny pair is decoded
def test_the_study_reports_links_open_their_files_whatever_the_id(hf_tiny_pair, tmp_path):
    """study.html's links to the one-file exports of the problems whose answers part, and the site's of the study:
    a %-escaped file name (`test%2Falgebra%2F1.json.html`) was a dead link, which the browser reads as folders."""
    ids = ["test/algebra/1.json", "a b", "%2F", "x" * 300]
    folder = tmp_path / "study"
    study(hf_tiny_pair, hostile_problems(tmp_path, ids), folder)
    results = pd.read_csv(folder / "results.csv", dtype=str, keep_default_na=False)
    for method, answer, correct in (("sd", "1", "False"), ("easd", "2", "True")):  # every verdict parts: a file each
        results.loc[results["method"] == method, ["prediction", "correct"]] = [answer, correct]
    results.to_csv(folder / "results.csv", index=False)
    write_report(folder, analyse(folder))
    report = (folder / "study.html").read_text(encoding="utf-8")
    assert report.count('href="differences/') == len(ids) and dead_links(folder) == []
    assert main(["site", str(folder), "-o", str(tmp_path / "site")]) == 0
    assert dead_links(tmp_path / "site") == []


# --- the site's folder ----------------------------------------------------------------------------


def test_a_rebuild_keeps_what_the_user_added_and_a_linked_folder_stays_a_link(trace_sources, tmp_path):
    """A gh-pages checkout's .git, a CNAME: a rebuild replaces only the site's own entries (and drops its pages of
    sources no longer given). -o may be a link to the folder, which stays a link; the site is readable by everyone
    the user's umask allows (a web server running as another user), not by its owner alone."""
    real, link = tmp_path / "published", tmp_path / "site"
    real.mkdir()
    link.symlink_to(real)
    previous = os.umask(0o022)
    try:
        assert main(["site", str(trace_sources / "t.json"), str(trace_sources / "t.csv"), "-o", str(link)]) == 0
        assert {p.name for p in (real / "runs").iterdir()} == {"t.html", "t-2.html"}
        (real / "CNAME").write_text("runs.example.org\n")
        (real / ".git").mkdir()
        (real / ".git" / "HEAD").write_text("ref: refs/heads/gh-pages\n")
        assert main(["site", str(trace_sources / "t.json"), "-o", str(link)]) == 0
    finally:
        os.umask(previous)
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert (real / "CNAME").read_text() == "runs.example.org\n" and (real / ".git" / "HEAD").is_file()
    assert {p.name for p in (real / "runs").iterdir()} == {"t.html"}  # t.csv's page went with its source
    assert not list(real.glob(".easd-building-*"))
    for path in [real, *real.rglob("*")]:
        wanted = 0o755 if path.is_dir() else 0o644
        assert stat.S_IMODE(path.stat().st_mode) & wanted == wanted, path


def test_a_second_build_of_a_folder_being_built_is_refused_and_the_first_completes(trace_sources, tmp_path):
    out, built = tmp_path / "site", []
    first = threading.Thread(target=lambda: built.append(build_site([ROOT / "assets" / "gallery"], out, "first", progress=False)))
    first.start()
    while first.is_alive() and not list(out.glob(".easd-building-*")):
        time.sleep(0.002)
    try:
        with pytest.raises(SettingsError, match="^--out: another build of a site is writing .* now: try again"):
            build_site([trace_sources / "t.json"], out, "second", progress=False)
    finally:
        first.join()
    assert built == [out] and "<title>first</title>" in (out / "index.html").read_text(encoding="utf-8")
    assert not list(out.glob(".easd-building-*")) and dead_links(out) == []


@pytest.mark.parametrize(
    "out, said",
    [
        ("/proc/x", "--out: cannot make the folder /proc/x: "),
        ("/sys/x", "--out: cannot make the folder /sys/x: "),
        ("", "--out: give the site's folder, e.g. -o site/"),
        ("/proc", "--out: /proc holds other files"),
        ("/dev/null", "--out: /dev/null is a file"),
    ],
)
def test_an_out_where_no_site_can_be_is_refused_in_one_line(out, said, trace_sources, capsys):
    assert main(["site", str(trace_sources / "t.json"), "-o", out]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: " + said) and err.count("\n") == 1


def test_the_current_folder_may_be_the_site(trace_sources, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for _ in range(2):  # made, then made again
        assert main(["site", str(trace_sources / "t.json"), "-o", "."]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [".easd-site", "README.md", "assets", "index.html", "runs"]


@pytest.mark.parametrize("limit", ["nan", "inf", "0", "-1"])
def test_max_trace_mb_must_be_a_finite_number_above_0(limit, trace_sources, tmp_path, capsys):
    assert main(["site", str(trace_sources / "t.json"), "-o", str(tmp_path / "site"), "--max-trace-mb", limit]) == 2
    assert f"--max-trace-mb: must be a finite number of MB above 0 (got {float(limit):g})" in capsys.readouterr().err
    assert not (tmp_path / "site").exists()


def test_a_folder_of_trace_files_is_its_runs_titled_by_its_index(trace_sources, tmp_path):
    """A gallery (assets/gallery) is a folder of trace files with an index.json of their titles and what each shows:
    given as a folder, or file by file as a shell expands `gallery/*.json`, the index titles its runs."""
    gallery = tmp_path / "gallery"
    gallery.mkdir()
    shutil.copy(trace_sources / "t.json", gallery / "apples.json")
    entry = {"key": "apples", "title": "Apples <counted>", "file": "apples.json", "shows": "Where the lanes part."}
    (gallery / "index.json").write_text(json.dumps([entry]))
    for sources in ([gallery], sorted(gallery.glob("*.json"))):
        out = tmp_path / "site"
        assert main(["site", *map(str, sources), "-o", str(out)]) == 0
        assert sorted(p.name for p in (out / "runs").iterdir()) == ["apples.html"]
        home = (out / "index.html").read_text(encoding="utf-8")
        assert "Apples &lt;counted&gt;</a>" in home and "<p>Where the lanes part.</p>" in home
