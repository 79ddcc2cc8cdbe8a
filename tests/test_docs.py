"""The README and docs/ as a reader uses them: every command parses, the tiny-pair ones run, every path
and link resolves, and the sections the code cites exist."""

from __future__ import annotations

import glob
import json
import re
import shlex
from pathlib import Path

import pytest

from easd import cli

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TOP_LEVEL = r"(?:app\.py|easd/|components/|assets/|tests/|docs/|\.ci/|requirements[\w-]*\.txt)"


def shell_lines(page: Path) -> list[str]:
    """The command lines of a page's bash blocks and inline code, continuation lines joined."""
    text = page.read_text()
    lines = []
    for block in re.findall(r"```(?:bash|sh)\n(.*?)```", text, re.S):
        lines += block.replace("\\\n", " ").splitlines()
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    lines += re.findall(r"`(python -m easd [^`]+ -[^`]+)`", prose)  # inline calls with flags, not mere names
    return [line.strip() for line in lines]


def commands(program: str) -> list[tuple[str, list[str]]]:
    """(page, argv) for each documented call of `program`, leading environment variables dropped."""
    found = []
    for page in PAGES:
        for line in shell_lines(page):
            words = shlex.split(line, comments=True)
            while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
                words = words[1:]
            program_words = program.split()
            for i in range(len(words)):
                if words[i : i + len(program_words)] == program_words:
                    argv = words[i + len(program_words) :]
                    argv = argv[: argv.index("&&")] if "&&" in argv else argv
                    if not any("$" in word or "…" in word for word in argv):  # flags shown elsewhere
                        found.append((page.relative_to(ROOT).as_posix(), argv))
    return found


EASD_COMMANDS = commands("python -m easd")
APP_COMMANDS = commands("python app.py")


def test_the_pages_document_commands_of_every_kind():
    names = {argv[0] for _, argv in EASD_COMMANDS if argv}
    assert {"generate", "bench", "eval", "calibrate", "sweep", "lm-eval"} <= names
    assert len(APP_COMMANDS) >= 5


@pytest.mark.parametrize("page, argv", [c for c in EASD_COMMANDS if c[1][:1] != ["lm-eval"] and "--help" not in c[1]])
def test_every_documented_command_parses(page, argv):
    try:
        cli.build_parser().parse_args(argv)
    except SystemExit as stop:
        pytest.fail(f"{page}: `python -m easd {shlex.join(argv)}` does not parse (exit {stop.code})")


@pytest.mark.parametrize("page, argv", APP_COMMANDS)
def test_every_documented_app_command_parses(page, argv):
    app = pytest.importorskip("app")
    try:
        app.parse_args(argv)
    except SystemExit as stop:
        pytest.fail(f"{page}: `python app.py {shlex.join(argv)}` does not parse (exit {stop.code})")


TINY_RUNS = [c for c in EASD_COMMANDS if "tiny-random" in c[1] and "--ray" not in c[1] and "--help" not in c[1]]


def test_the_pages_hold_tiny_pair_commands_to_run():
    assert {argv[0] for _, argv in TINY_RUNS} >= {"generate", "bench", "eval", "calibrate", "sweep"}


@pytest.mark.parametrize("page, argv", TINY_RUNS)
def test_the_tiny_pair_commands_run_as_written(page, argv, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    problems = [{"question": f"Tom has {n} apples and buys 5 more. How many now?", "answer": f"#### {n + 5}"} for n in range(6)]
    Path("problems.jsonl").write_text("".join(json.dumps(p) + "\n" for p in problems))
    assert cli.main(argv) == 0, f"{page}: `python -m easd {shlex.join(argv)}` failed"
    for flag in ("--trace", "--json", "--out"):
        if flag in argv:
            written = Path(argv[argv.index(flag) + 1])
            assert written.exists() and (written.is_file() or any(written.iterdir())), f"{page}: {flag} {written} not written"


SITE_COMMANDS = [c for c in EASD_COMMANDS if c[1][:1] == ["site"]]


@pytest.mark.slow  # a study is decoded for the pages' runs/study
@pytest.mark.parametrize("page, argv", SITE_COMMANDS)
def test_the_documented_site_commands_run(page, argv, eval_folder, hf_tiny_pair, tmp_path, monkeypatch):
    """As written, in a folder where what they name is: assets/ (the repository's, its gallery with its index.json
    among `*.json`, as a shell expands it), and the example folders of runs/ made on the tiny pair (an eval folder
    for runs/eval-…, a study for runs/study)."""
    from test_study import problem_file, study

    monkeypatch.chdir(tmp_path)
    Path("assets").symlink_to(ROOT / "assets")
    Path("runs").mkdir()
    for word in argv:
        if word.startswith("runs/eval"):
            Path(word).symlink_to(eval_folder)
        elif word.startswith("runs/study"):
            study(hf_tiny_pair, problem_file(tmp_path), Path(word))
    expanded = [match for word in argv for match in (sorted(glob.glob(word)) if "*" in word else [word])]
    assert cli.main(expanded) == 0, f"{page}: `python -m easd {shlex.join(argv)}` failed"
    out = Path(argv[argv.index("-o") + 1])
    assert (out / "index.html").is_file() and len(list((out / "runs").glob("*.html"))) >= 5  # the gallery's runs


# What a page's python block runs against here: the tiny pair where it names the embedded one, and the app these
# tests serve (on the tiny pair, with its MCP server) where it names the app's default address. Nothing else changes.
EMBEDDED_PAIR = '"qwen-coder"'
APP_ADDRESS = "http://127.0.0.1:7860/"
PYTHON_BLOCKS = [
    (page.relative_to(ROOT).as_posix(), number, block)
    for page in PAGES
    for number, block in enumerate(re.findall(r"```python\n(.*?)```", page.read_text(), re.S), start=1)
]


@pytest.fixture(scope="module")
def served_app():
    """The app on the tiny pair, with its MCP server, as `python app.py --pair tiny-random --mcp on` serves it."""
    from conftest import launch_app

    from easd.pairs.tiny import load_tiny_pair
    from easd.serving.host import ModelHost

    host = ModelHost({"tiny-random": load_tiny_pair}, "tiny-random", max_new_tokens_cap=256)
    url, demo = launch_app(host, mcp=True)
    yield url
    demo.close()


def test_the_pages_hold_python_blocks_to_run():
    assert {page for page, _, _ in PYTHON_BLOCKS} >= {"README.md", "docs/app-and-api.md"}


@pytest.mark.parametrize("page, number, block", PYTHON_BLOCKS, ids=[f"{page}-{number}" for page, number, _ in PYTHON_BLOCKS])
def test_every_python_block_runs_as_written(page, number, block, tmp_path, monkeypatch, request):
    monkeypatch.chdir(tmp_path)  # where a block writes its files
    code = block.replace(EMBEDDED_PAIR, '"tiny-random"')
    if APP_ADDRESS in code:
        code = code.replace(APP_ADDRESS, request.getfixturevalue("served_app"))
    exec(compile(code, f"{page}, python block {number}", "exec"), {"__name__": "__main__"})


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def headings(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return [h.strip() for h in re.findall(r"^#+ (.+)$", text, re.M)]


def test_every_link_between_pages_resolves():
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"https?:|mailto:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and anchor not in {slug(h) for h in headings(file)}:
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken


def test_every_repository_path_the_pages_name_exists():
    missing = []
    for page in PAGES:
        for path in re.findall(rf"`({TOP_LEVEL}[^`\s]*)`", page.read_text()):
            path = path.rstrip(":,.")
            if not (list(ROOT.glob(path)) if "*" in path else (ROOT / path).exists()):
                missing.append(f"{page.name}: {path}")
    assert not missing


def test_the_sections_the_code_cites_exist():
    """Code and requirements files cite sections as the README or a docs page, then the heading in quotes."""
    cited = re.compile(r"""(README|docs/[\w-]+\.md)(?:'s)?,? ["']([^"']+)["']""")
    sources = [*ROOT.glob("*.py"), *ROOT.glob("requirements*.txt")]
    sources += [p for folder in ("easd", "components", "tests") for p in (ROOT / folder).rglob("*.py")]
    missing = []
    for source in sources:
        for page, heading in cited.findall(source.read_text()):
            file = ROOT / ("README.md" if page == "README" else page)
            if not any(h.lower().startswith(heading.lower()) for h in headings(file)):
                missing.append(f"{source.relative_to(ROOT)}: {page}, {heading!r}")
    assert len(missing) == 0, missing


def test_the_apis_count_of_values_lane_methods_and_own_parameters_are_the_code_s():
    """docs/app-and-api.md said /call/compare takes 18 values (it took 27), and named the lanes' methods and the methods'
    own parameters without SpecGuard's and SMC-SD's: each is checked against the code, so none goes stale again."""
    from components.api import parameters
    from easd.method.methods import METHODS

    page = " ".join((ROOT / "docs" / "app-and-api.md").read_text(encoding="utf-8").split())  # lines joined
    names = [name for name, *_ in parameters()]
    assert f"`POST /gradio_api/call/compare` takes all {len(names)} values in order" in page
    assert "one of " + ", ".join(f"`{method}`" for method in METHODS) + ": those the batch decodes" in page
    assert "(" + ", ".join(f"`{name}`" for name in names[names.index("right") + 1 :]) + "): a method added" in page
    assert re.findall(r"takes all (\d+) values", page) == [str(len(names))]  # no other count of them


def test_the_link_check_can_fail(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Only this\n")
    assert slug("Speed: `bench`") == "speed-bench" and slug("Only this") in {slug(h) for h in headings(page)}
    assert "missing-heading" not in {slug(h) for h in headings(page)}


def test_ci_runs_the_readme_test_command():
    """The README's second command (install, then test) is what .ci/run does: its install, then its last line."""
    readme = [line for line in shell_lines(ROOT / "README.md") if "pytest" in line]
    install, test = readme[0].split(" && ")
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")]
    assert install in ci and ci[-1] == test, (readme[0], ci[-1])
