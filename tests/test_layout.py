"""The package's import rules, checked on the source: each folder may only lean on the layers below it."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# folder -> modules it must never import (absolutely or relatively)
UI = ("components", "gradio", "app", "tools")
ABOVE_THE_METHOD = ("easd.traces", "easd.render", "easd.serving", "easd.backends", "easd.pairs", "easd.lab", "easd.cli")
FORBIDDEN = {
    "easd/method": (*ABOVE_THE_METHOD, *UI),  # pure: no files, no HTML, no users, no runtimes
    "easd/traces": ("easd.render", "easd.serving", "easd.backends", "easd.pairs", "easd.lab", "easd.cli", *UI),
    "easd/render": ("easd.serving", "easd.backends", "easd.pairs", "easd.lab", "easd.cli", *UI),
    "easd/backends": ("easd.serving", "easd.pairs", "easd.lab", "easd.cli", *UI),
    "easd/pairs": ("easd.serving", "easd.lab", "easd.cli", *UI),
    "easd/serving": ("easd.lab", "easd.cli", *UI),
    "easd/lab": ("easd.cli", *UI),
    "easd/cli": UI,  # the command line draws its HTML with easd.render: no Gradio
    "components": ("tools",),
}
PACKAGES = ("easd", "components", "tools")  # where import cycles are looked for, with app.py


def imported_modules(path: Path) -> set[str]:
    """Absolute names of every module `path` imports, relative imports resolved against its package."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)] if node.level else []
            module = ".".join([*base, node.module] if node.module else base)
            found |= {module} | {f"{module}.{alias.name}" for alias in node.names}
    return found


def violations(folder: str) -> list[str]:
    bad = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for module in imported_modules(path):
            for forbidden in FORBIDDEN[folder]:
                if module == forbidden or module.startswith(forbidden + "."):
                    bad.append(f"{path.relative_to(ROOT)} imports {module}")
    return bad


@pytest.mark.parametrize("folder", sorted(FORBIDDEN))
def test_each_layer_imports_only_the_layers_below_it(folder):
    assert violations(folder) == []


@pytest.mark.parametrize(
    "folder, line, found",
    [
        ("easd/method", "from ..lab import report\n", "easd.lab.report"),  # relative import and all
        ("easd/method", "from ..traces import files\n", "easd.traces.files"),
        ("easd/cli", "from components.export import file_aside\n", "components.export"),  # once the one exception
        ("easd/render", "import gradio as gr\n", "gradio"),
    ],
)
def test_the_rule_can_fail(folder, line, found):
    fake = ROOT / folder / "_layout_probe.py"
    fake.write_text(line)
    try:
        assert f"{folder}/_layout_probe.py imports {found}" in violations(folder)
    finally:
        fake.unlink()


def import_cycles() -> list[list[str]]:
    """Every set of project modules that import each other around a circle (a strongly connected component of
    more than one module), counting every import in a file: at the top, inside functions, under TYPE_CHECKING."""
    paths = [ROOT / "app.py", *(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))]
    names = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p for p in paths}
    graph = {name: sorted({_owner(m, names) for m in imported_modules(path)} - {None, name}) for name, path in names.items()}
    index, low, stack, cycles, counter = {}, {}, [], [], [0]

    def visit(node):  # Tarjan's algorithm
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return cycles


def _owner(module: str, names: dict) -> str | None:
    """The project module an imported name lives in (`easd.method.trace.Trace` -> `easd.method.trace`), if any."""
    while module and module not in names:
        module = module.rpartition(".")[0]
    return module or None


def test_no_two_modules_import_each_other_around_a_circle():
    assert import_cycles() == []


def test_the_cycle_check_can_fail():
    probes = [ROOT / "tools" / "_probe_a.py", ROOT / "tools" / "_probe_b.py"]
    probes[0].write_text("from . import _probe_b\n")
    probes[1].write_text("def later():\n    from tools._probe_a import x\n")
    try:
        assert ["tools._probe_a", "tools._probe_b"] in import_cycles()
    finally:
        for probe in probes:
            probe.unlink()


def test_no_easd_module_imports_gradio_or_the_page():
    """easd/ runs without Gradio, the command line included (export-html draws with easd.render)."""
    ui = {"gradio", "gradio_client", "components"}
    assert not [p for p in (ROOT / "easd").rglob("*.py") if ui & {m.split(".")[0] for m in imported_modules(p)}]


def test_the_top_level_holds_what_the_mission_names():
    expected = {"app.py", "easd", "components", "tools", "assets", "docs", "tests", "requirements.txt", "README.md"}
    assert expected <= {p.name for p in ROOT.iterdir()} and not (ROOT / "ui").exists()
