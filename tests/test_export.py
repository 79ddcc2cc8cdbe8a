"""One comparison as one HTML file (components.export, `python -m easd export-html`): what it holds, and the file
opened from disk in Chromium with the network off, on a laptop's screen and a phone's."""

import base64
import dataclasses
import hashlib
import os
import re
from html import unescape

import pytest
from test_app_browser import CHROMEDRIVER, CHROMIUM
from test_app_render import nasty_trace

from components.export import file_aside
from easd.cli import main
from easd.method.compare import Comparison
from easd.method.settings import DecodeSettings
from easd.method.trace import TokenRecord
from easd.render.export import comparison_file
from easd.traces import files as trace_io
from tools.offline import open_offline, requests_made

HOSTILE_PROMPT = '</script><script>window.__xss="prompt"</script><img src=x onerror="window.__xss=5">'


@pytest.fixture(scope="module")
def compared(hf_tiny_pair, tmp_path_factory):
    """SD and EASD on the tiny pair, 64 tokens each, saved as a trace file: (traces by lane, the file)."""
    traces = Comparison(hf_tiny_pair, HOSTILE_PROMPT, DecodeSettings(max_new_tokens=64)).run()
    path = tmp_path_factory.mktemp("export") / "both.json"
    trace_io.save(list(traces.values()), path)
    return traces, path


def hostile_trace():
    """Every hostile token text the page is tested with, a lone surrogate and a 100 kB token."""
    trace = nasty_trace()
    for text in ("\udc80 lone", "A" * 100_000):
        trace.records.append(TokenRecord(len(trace.records), len(trace.records), 7, text, "target"))
    trace.prompt = HOSTILE_PROMPT
    return trace


def scripts(html: str) -> list[str]:
    """The contents of the file's script elements that run (not its JSON data)."""
    return re.findall(r"<script>(.*?)</script>", html, flags=re.S)


def test_the_file_holds_every_tokens_inspector_and_lets_only_its_own_scripts_run(compared):
    traces, _ = compared
    html = comparison_file(traces)
    for lane, trace in traces.items():
        assert all(f'id="i-{lane}-{record.position}"' in html for record in trace.records)
    policy = unescape(re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html).group(1))
    assert "default-src 'none'" in policy and "connect-src" not in policy  # nothing may be fetched
    allowed = set(re.findall(r"'sha256-([^']+)'", policy))
    ran = scripts(html)
    assert len(ran) == 2 and allowed == {base64.b64encode(hashlib.sha256(s.encode()).digest()).decode() for s in ran}
    assert re.findall(r"<(?:link|iframe|object|embed)\b", html) == []


def test_hostile_token_texts_and_prompts_are_text(compared):
    traces, _ = compared
    html = comparison_file({"left": traces["left"], "right": hostile_trace()})
    outside = re.sub(r"<script>.*?</script>", "", html, flags=re.S)  # Plotly and our script are the only markup of theirs
    for raw in ("<img src=x", "<script>window.__xss", 'onerror="window'):
        assert raw not in outside
    assert "&lt;img src=x onerror=&quot;window.__xss=1&quot;&gt;" in outside
    data = re.findall(r'<script type="application/json" data-figure>(.*?)</script>', html, flags=re.S)
    assert len(data) == 4 and all("<" not in d for d in data)  # a figure's JSON cannot end its element early
    assert "\\xdc80 lone" in html and "\udc80" not in outside  # a lone surrogate is shown as \\xdc80, never written raw


def test_the_command_line_writes_it_and_says_what_is_wrong_in_one_line(compared, tmp_path, capsys):
    _, path = compared
    out = tmp_path / "both.html"
    assert main(["export-html", str(path), "-o", str(out)]) == 0
    assert "both.html" in capsys.readouterr().out and 'data-lane="right"' in out.read_text(encoding="utf-8")
    for arguments, line in (
        (["--runs", "1,3"], "--runs: must be two places from 1 to 2"),
        (["--runs", "a"], "--runs: must be two places in the file, like 1,2"),
        (["-o", str(tmp_path / "no" / "x.html")], "--out: the folder"),
    ):
        assert main(["export-html", str(path), *arguments]) == 2
        assert line in capsys.readouterr().err
    assert main(["export-html", str(tmp_path / "missing.json")]) == 2
    assert "missing.json: no such file" in capsys.readouterr().err


@pytest.mark.parametrize(
    "out, line",
    [
        ("{folder}", "--out: {folder} is a folder: give the HTML file's name"),
        ("/proc/version", "--out: cannot write /proc/version"),
        ("/sys/x.html", "--out: cannot write /sys/x.html"),
        ("{trace}", "--out: is the trace file itself (both.json)"),
    ],
)
def test_an_output_it_cannot_write_is_one_line_and_leaves_the_trace_as_it_was(compared, tmp_path, capsys, out, line):
    _, path = compared
    before = path.read_bytes()
    out, line = (text.format(folder=tmp_path, trace=path) for text in (out, line))
    assert main(["export-html", str(path), "-o", out]) == 2
    err = capsys.readouterr().err
    assert line in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert path.read_bytes() == before and not list(tmp_path.glob(".*.tmp-*"))  # nothing half-written anywhere


def test_a_trace_with_a_byte_order_mark_is_a_trace(compared, tmp_path):
    """Editors and spreadsheets on Windows write UTF-8 with a byte-order mark: JSON and CSV alike still load."""
    traces, path = compared
    for name, write in (("bom.json", trace_io.write_json), ("bom.csv", trace_io.write_csv)):
        plain = tmp_path / f"plain-{name}"
        write(list(traces.values()), plain)
        marked = tmp_path / name
        marked.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
        assert [t.token_ids for t in trace_io.load(marked)] == [t.token_ids for t in traces.values()]
    assert main(["export-html", str(tmp_path / "bom.json"), "-o", str(tmp_path / "bom.html")]) == 0


browser_only = pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER), reason="needs Debian's chromium and chromium-driver")


@browser_only
@pytest.mark.parametrize("size", ["1280,720", "390,844"])  # a laptop; a phone, where the details are a sheet
def test_the_file_opens_offline_and_a_click_or_a_key_shows_a_tokens_details(compared, tmp_path, size):
    traces, _ = compared
    path = tmp_path / "both.html"
    path.write_text(comparison_file({"left": traces["left"], "right": hostile_trace()}), encoding="utf-8", errors="replace")
    driver, seconds = open_offline(path, size, "#right-3")
    try:
        inspector = driver.find_element("id", "inspector")
        assert "Token #3 in EASD" in inspector.text  # the link's token, chosen as the file opened
        driver.find_element("css selector", 'span[data-lane="left"][data-pos="5"]').click()
        assert "Token #5 in SD" in inspector.text and driver.execute_script("return location.hash") == "#left-5"
        driver.switch_to.active_element.send_keys("\ue014")  # the right arrow key: the next token
        assert "Token #6 in SD" in inspector.text
        if size == "390,844":  # the phone's sheet over the bottom of the screen, and its close button
            assert driver.execute_script("return getComputedStyle(arguments[0]).position", inspector) == "fixed"
            driver.find_element("css selector", "#inspector button.close").click()
            assert "Click or tap a token" in inspector.text
        assert driver.execute_script("return window.__xss") is None  # no hostile token or prompt ran
        errors = [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
        assert errors == []  # nothing the policy refused: Plotly and our script ran, nothing else tried
        assert {url.split(":")[0] for url in requests_made(driver)} <= {
            "file",
            "data",
        }  # the file itself and Plotly's inline images: no network request
        print(f"\n{size}: {path.stat().st_size / 2**20:.1f} MB, figures drawn {seconds:.1f} s after opening")
    finally:
        driver.quit()


@browser_only
def test_a_script_that_slipped_into_the_file_would_not_run(compared, tmp_path):
    """The second lock: were a token text ever written as markup, the file's policy would refuse to run it."""
    traces, _ = compared
    path = tmp_path / "tampered.html"
    html = comparison_file(traces).replace("</body>", '<script>window.__xss = "slipped in"</script></body>')
    path.write_text(html, encoding="utf-8")
    driver, _ = open_offline(path, "1280,720")
    try:
        assert driver.execute_script("return window.__xss") is None
        refused = [e["message"] for e in driver.get_log("browser") if "Content Security Policy" in e["message"]]
        assert refused, "the policy said nothing: was the script allowed?"
    finally:
        driver.quit()


def tiled(trace, count: int):
    """`trace` with its tokens repeated to `count` (renumbered): a long run without decoding one."""
    records, blocks = trace.records, trace.records[-1].block + 1
    return dataclasses.replace(
        trace,
        records=[
            dataclasses.replace(
                records[i % len(records)], position=i, block=records[i % len(records)].block + i // len(records) * blocks
            )
            for i in range(count)
        ],
    )


LONG = 4_000  # tokens a lane: twice the page's 2,000-token window (docs/app-and-api.md measures 25,000)


@pytest.mark.slow  # two files of 2,000 and 4,000 tokens a lane, and the long one opened in Chromium
@browser_only
def test_every_token_of_a_long_run_is_in_the_file_and_reachable_offline(compared, tmp_path):
    """The page draws 2,000 tokens of a lane around the selection (easd.render.lanes); a file has no server to move
    that window, so it draws every token, and its size grows no faster than the run."""
    traces, _ = compared
    sizes = {}
    for count in (2_000, LONG):
        path = tmp_path / f"long-{count}.html"
        path.write_text(comparison_file({lane: tiled(t, count) for lane, t in traces.items()}), encoding="utf-8")
        sizes[count] = path.stat().st_size
    assert sizes[LONG] / sizes[2_000] <= LONG / 2_000
    driver, seconds = open_offline(tmp_path / f"long-{LONG}.html", "1280,720", f"#right-{LONG - 1000}")
    try:
        inspector = driver.find_element("id", "inspector")
        assert f"Token #{LONG - 1000} in EASD" in inspector.text  # a link far past the page's window
        assert driver.execute_script("return document.querySelectorAll('span[data-lane=\"left\"][data-pos]').length") == LONG
        driver.find_element("css selector", 'span[data-lane="left"][data-pos="1999"]').click()
        driver.switch_to.active_element.send_keys("\ue014")  # the right arrow key, past the page's 2,000
        assert "Token #2000 in SD" in inspector.text
        last = driver.find_element("css selector", f'span[data-lane="right"][data-pos="{LONG - 1}"]')
        driver.execute_script("arguments[0].scrollIntoView()", last)
        last.click()
        assert f"Token #{LONG - 1} in EASD" in inspector.text
        print(
            f"\n2,000 and {LONG:,} tokens a lane: {sizes[2_000] / 2**20:.1f} MB and {sizes[LONG] / 2**20:.1f} MB; "
            f"the long one drawn {seconds:.1f} s after opening"
        )
    finally:
        driver.quit()


def test_the_page_makes_its_file_in_a_process_of_its_own(compared, tmp_path):
    """A long run's file takes seconds of CPU whose single steps would hold the server's lock (a third of a second at a
    time for 25,000 tokens a lane): the page makes it in another process, from its own JSON download, and the file is
    the same as one made here."""
    traces, path = compared
    out = tmp_path / "aside.html"
    assert file_aside(path, ["left", "right"], out) != os.getpid()
    assert out.read_text(encoding="utf-8") == comparison_file(traces)
