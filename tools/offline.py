"""Open an exported comparison (`python -m easd export-html`) as its readers will: from disk, in headless Chromium,
with the network switched off; print its size, how long until its figures were drawn, and every request it made.

    python -m tools.offline run.html                      # a laptop's window
    python -m tools.offline run.html --size 390,844       # a phone's
    python -m tools.offline site/runs/run.html            # a static site's page (python -m easd site)

Needs Debian's Chromium and ChromeDriver (apt-get install chromium chromium-driver). The tests open files with
the same functions (tests/test_export.py).
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

FIGURES = 4  # the figures an exported file draws (easd.render.figures.FIGURES)


def chromium(network_log: bool = False, size: str = "1400,2200"):
    """Headless Chromium with a window of `size` (width,height), its console kept; `network_log` keeps its network
    events too."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", **({"performance": "ALL"} if network_log else {})})
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--window-size={size}",
    ):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)


def open_offline(path: Path, size: str, fragment: str = "") -> tuple[object, float]:
    """Chromium with the network off, on the file (at `#fragment`): (driver, seconds until its figures were drawn)."""
    driver = chromium(network_log=True, size=size)
    driver.execute_cdp_cmd("Network.enable", {})
    offline = {"offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1}
    driver.execute_cdp_cmd("Network.emulateNetworkConditions", offline)
    started = time.monotonic()
    driver.get(path.resolve().as_uri() + fragment)
    drawn = "return document.querySelectorAll('.figure.js-plotly-plot').length"
    while driver.execute_script(drawn) < FIGURES:
        if time.monotonic() - started > 120:
            driver.quit()
            raise TimeoutError(f"{path.name}: its figures were not drawn within 120 s")
        time.sleep(0.05)
    return driver, time.monotonic() - started


def requests_made(driver) -> list[str]:
    """Every address the page asked for since it opened (from Chromium's network log)."""
    events = [json.loads(entry["message"])["message"] for entry in driver.get_log("performance")]
    return [e["params"]["request"]["url"] for e in events if e["method"] == "Network.requestWillBeSent"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", type=Path, help="an HTML file written by `python -m easd export-html` or `site`")
    parser.add_argument("--size", default="1280,720", help="the window's width,height in pixels")
    args = parser.parse_args(argv)
    if not args.file.is_file():
        parser.error(f"{args.file}: no such file")
    driver, seconds = open_offline(args.file, args.size)
    try:
        asked = requests_made(driver)
        errors = [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
        painted = driver.execute_script(
            "const p = performance.getEntriesByName('first-contentful-paint')[0]; return p ? p.startTime : null"
        )
    finally:
        driver.quit()
    print(f"{args.file.name}: {args.file.stat().st_size / 2**20:.1f} MB; window {args.size}")
    lanes = f"first lanes painted {painted / 1000:.2f} s, " if painted is not None else ""
    print(f"{lanes}figures drawn {seconds:.2f} s after opening, the network off")
    schemes = sorted({url.split(":", 1)[0] for url in asked})
    print(f"requests: {len(asked)} ({', '.join(schemes)}); console errors: {len(errors)}")
    for error in errors[:5]:
        print(f"  {error[:200]}")


if __name__ == "__main__":
    main()
