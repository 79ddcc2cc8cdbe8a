"""The package's import rules, checked on the source: each folder may only lean on the layers below it."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# folder -> modules it must never import (absolutely or relatively)
FORBIDDEN = {
    "easd/core": ("easd.backends", "easd.pairs", "easd.lab", "easd.cli", "components", "gradio", "app"),
    "easd/backends": ("easd.pairs", "easd.lab", "easd.cli", "components", "gradio", "app"),
    "easd/pairs": ("easd.lab", "easd.cli", "components", "gradio", "app"),
    "easd/lab": ("easd.cli", "components", "gradio", "app"),
}


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
    """A core module that imports the lab is caught, relative import and all."""
    fake = ROOT / "easd" / "core" / "_layout_probe.py"
    fake.write_text("from ..lab import report\n")
    try:
        assert "easd/core/_layout_probe.py imports easd.lab.report" in violations("easd/core")
    finally:
        fake.unlink()


def test_the_engine_never_imports_gradio():
    assert not [p for p in (ROOT / "easd").rglob("*.py") if "gradio" in {m.split(".")[0] for m in imported_modules(p)}]


def test_the_top_level_holds_what_the_mission_names():
    expected = {"app.py", "easd", "components", "assets", "docs", "tests", "requirements.txt", "README.md"}
    assert expected <= {p.name for p in ROOT.iterdir()} and not (ROOT / "ui").exists()
