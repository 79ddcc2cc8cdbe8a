"""The package's import rules, checked on the source: each folder may only lean on the layers below it."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# folder -> modules it must never import (absolutely or relatively)
UI = ("components", "gradio", "app", "tools")
FORBIDDEN = {
    "easd/method": ("easd.serving", "easd.backends", "easd.pairs", "easd.lab", "easd.cli", *UI),
    "easd/backends": ("easd.serving", "easd.pairs", "easd.lab", "easd.cli", *UI),
    "easd/pairs": ("easd.serving", "easd.lab", "easd.cli", *UI),
    "easd/serving": ("easd.lab", "easd.cli", *UI),
    "easd/lab": ("easd.cli", *UI),
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


def test_the_rule_can_fail():
    """A method module that imports the lab is caught, relative import and all."""
    fake = ROOT / "easd" / "method" / "_layout_probe.py"
    fake.write_text("from ..lab import report\n")
    try:
        assert "easd/method/_layout_probe.py imports easd.lab.report" in violations("easd/method")
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


def test_the_engine_never_imports_gradio():
    assert not [p for p in (ROOT / "easd").rglob("*.py") if "gradio" in {m.split(".")[0] for m in imported_modules(p)}]


def test_the_top_level_holds_what_the_mission_names():
    expected = {"app.py", "easd", "components", "tools", "assets", "docs", "tests", "requirements.txt", "README.md"}
    assert expected <= {p.name for p in ROOT.iterdir()} and not (ROOT / "ui").exists()
