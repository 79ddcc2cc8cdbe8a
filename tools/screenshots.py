"""The page's pictures in docs/app-and-api.md: each method in a lane, one of its own tokens opened in the inspector.

    python -m tools.screenshots --pair qwen-coder --out docs/images

Serves the real app (`components.wiring.build_app`, the pair loaded once) on a local port and drives Debian's
headless Chromium at 1280×720 as a user would: for each pairing in `SHOTS`, it picks the lanes' methods, picks the
first example (which runs it), waits for the run to end, clicks the right lane's first token of the kind the picture
is about (the one its method's inspector explains), and saves the window, its colours reduced to a palette so that
the pictures stay small in the repository. A run that does not end in "Done" stops the command, naming the shot.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path

from components.server import ASSETS, serve
from components.wiring import build_app
from easd.pairs.registry import load_named_pair
from easd.serving.host import ModelHost
from tools.offline import chromium

SIZE = (1280, 720)  # a laptop's first screen, the size the page's layout is checked at (tests/test_app_browser.py)


@dataclass(frozen=True)
class Shot:
    name: str  # the picture's file name, without .png
    left: str  # the lanes' methods, by the page's titles
    right: str
    opens: str  # the right lane's token kind (origin) whose inspector the picture shows


SHOTS = (
    Shot("sd-easd", "SD", "EASD", "easd_penalty"),
    Shot("sd-typical", "SD", "typical acceptance", "typical_kept"),
    Shot("sd-specguard", "SD", "SpecGuard", "specguard_kept"),
    Shot("sd-smc", "SD", "SMC-SD", "smc_draft"),
    Shot("easd-mti", "EASD", "MTI", "mti_guided"),
)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pair", default="qwen-coder", help="the pair the app serves (default: the embedded pair)")
    parser.add_argument("--out", type=Path, default=Path("docs/images"), help="where the pictures go")
    parser.add_argument(
        "--only", default="", help="comma-separated shot names (default: all of " + ", ".join(s.name for s in SHOTS) + ")"
    )
    args = parser.parse_args(argv)
    shots = [s for s in SHOTS if not args.only or s.name in args.only.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    pair = load_named_pair(args.pair)
    host = ModelHost({args.pair: lambda: pair}, args.pair)
    host.ensure_loading(args.pair)
    while host.pair(args.pair) is None:
        time.sleep(0.1)
    examples = json.loads((ASSETS / "examples.json").read_text())
    demo = build_app(host, examples)
    _, url, _ = serve(demo, prevent_thread_lock=True, quiet=True)
    driver = chromium(size=f"{SIZE[0]},{SIZE[1]}")
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride", {"width": SIZE[0], "height": SIZE[1], "deviceScaleFactor": 1, "mobile": False}
    )
    try:
        for shot in shots:
            started = time.monotonic()
            path, stats = take(driver, url, shot, args.out)
            print(f"{path}: {time.monotonic() - started:.0f} s; the right lane's stats line: {stats}")
    finally:
        driver.quit()
        demo.close()


def take(driver, url: str, shot: Shot, out: Path) -> tuple[Path, str]:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(driver, 900, poll_frequency=0.2)
    driver.get(url)  # a fresh page: the guide open as on a first visit, nothing selected
    wait.until(lambda d: d.find_element(By.ID, "generate").is_enabled())
    for lane, title in (("left", shot.left), ("right", shot.right)):
        choose(driver, wait, f"method_{lane}", title)
    choose(driver, wait, "examples", None)  # the first example: picked, it runs
    wait.until(lambda d: d.find_element(By.ID, "message").text.startswith(("Done", "Stopped", "⚠️")))
    message = driver.find_element(By.ID, "message").text
    if not message.startswith("Done"):
        raise SystemExit(f"{shot.name}: the run did not end well: {message}")
    opened = driver.find_elements(By.CSS_SELECTOR, f"#lane_right span.tok.o-{shot.opens}")
    if not opened:
        raise SystemExit(f"{shot.name}: the right lane has no {shot.opens} token to open")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", opened[0])
    opened[0].click()
    wait.until(lambda d: not d.find_elements(By.CSS_SELECTOR, "#inspector .inspector.empty"))
    time.sleep(1)  # the figures and the floating inspector settle
    path = out / f"{shot.name}.png"
    driver.save_screenshot(str(path))
    small(path)
    return path, " ".join(driver.find_element(By.ID, "stats_right").text.split())


def choose(driver, wait, element_id: str, label: str | None) -> None:
    """Pick `label` (None: the first option) in a Gradio dropdown, as a user does: open its list, click the option."""
    from selenium.webdriver.common.by import By

    box = wait.until(lambda d: d.find_element(By.CSS_SELECTOR, f"#{element_id} input"))
    if label is not None and box.get_attribute("value") == label:
        return  # chosen already (its option in the list is marked, not named alone)
    box.click()
    options = f"#{element_id} li[role=option]"
    found = wait.until(lambda d: [o for o in d.find_elements(By.CSS_SELECTOR, options) if label in (None, o.text.strip())])
    found[0].click()


def small(path: Path) -> None:
    """The picture in 256 colours: a page of flat colours loses nothing a reader sees, and a third of its bytes."""
    from PIL import Image

    with Image.open(path) as image:
        reduced = image.convert("RGB").quantize(256)
    reduced.save(path, optimize=True)


if __name__ == "__main__":
    main()
