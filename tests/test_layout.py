"""The package's import rules, checked on the source: each folder may only lean on the layers below it."""

import ast
import functools
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
        ("easd/method", "from ..lab.reports import report\n", "easd.lab.reports.report"),  # relative import and all
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


# --- a method's name is written in the methods' table alone -----------------------------------------------------

# Where a method's name may be written out: its own module, and the references (SD, target-only, EASD) named once
NAMED_HERE = ("easd/method/methods/", "easd/method/references.py")
# Names that are also something else: the pair's two models, and the program (its cache folder, its files' prefix, a
# prompt style): written out, they are a method's only where a method is meant (`in_method_place`)
ALSO_NOT_A_METHOD = {"draft", "target", "easd"}


def method_names() -> frozenset[str]:
    from easd.method.methods import METHODS

    return frozenset(METHODS)


def in_method_place(constant: ast.Constant) -> bool:
    """Whether a constant that may be something else stands for a method where its parent puts it: a `method=` or
    `default=` keyword, a comparison or an index that reads a method, a parameter or field named for one."""
    parent = getattr(constant, "parent", None)
    if isinstance(parent, ast.keyword):
        return parent.arg in ("method", "default")
    if isinstance(parent, (ast.Compare, ast.Subscript)):
        return "method" in ast.unparse(parent).lower().replace(ast.unparse(constant), "") or "reads_as" in ast.unparse(parent)
    if isinstance(parent, ast.arguments):
        named = dict(zip(map(id, parent.defaults), parent.args[len(parent.args) - len(parent.defaults) :]))
        named |= {id(d): a for d, a in zip(parent.kw_defaults, parent.kwonlyargs) if d is not None}
        argument = named.get(id(constant))
        return argument is not None and ("method" in argument.arg or "reads_as" in argument.arg)
    if isinstance(parent, ast.AnnAssign) and isinstance(parent.target, ast.Name):
        return "method" in parent.target.id or "reads_as" in parent.target.id
    return False


def literal_violations() -> list[str]:
    names, bad = method_names(), []
    for path in [ROOT / "app.py", *(p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py")))]:
        where = path.relative_to(ROOT).as_posix()
        if where.startswith(NAMED_HERE):
            continue
        bad += [f"{where}:{line}: {name!r}" for line, name in _literals_of(path.read_text(encoding="utf-8"), names)]
    return bad


@functools.cache  # each probe below scans the repository again: a source already parsed is not parsed twice
def _literals_of(source: str, names: frozenset[str]) -> list[tuple[int, str]]:
    """Each line where `source` writes out a method's name: any string constant that is only a method's name
    (docstrings and f-string pieces aside), and one that is also something else where a method is meant."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            child.parent = node
    skipped = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            skipped.add(id(body[0].value))  # a docstring
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names and id(node) not in skipped:
            if node.value not in ALSO_NOT_A_METHOD or in_method_place(node):
                found.add((node.lineno, node.value))
    return sorted(found)


def test_no_module_outside_the_methods_writes_a_methods_name():
    """Issue 71: the methods' table (easd.method.methods) and the references named once (easd.method.references) are
    where a method's name is written; everything else reads them, so that no module branches on, indexes by or
    defaults to a name the table might not hold."""
    assert literal_violations() == []


@pytest.mark.parametrize(
    "line, found",
    [
        ('if settings.method == "sd":\n    pass\n', [(1, "sd")]),
        ('speed = rates["target"] if method == "target" else None\n', [(1, "target")]),
        ('def run(method="easd"):\n    pass\n', [(1, "easd")]),
        ('parser.add_argument("--grid", default="easd")\n', [(1, "easd")]),
        ('MINE = ("smc", "specguard")\n', [(1, "smc"), (1, "specguard")]),
        ('caches = {"draft": draft, "target": target}\nfolder = cache / "easd"\n', []),  # the models, the program
    ],
)
def test_the_name_rule_can_fail(line, found):
    planted = ROOT / "easd" / "lab" / "_names_probe.py"
    planted.write_text(line)
    try:
        assert _literals_of(line, method_names()) == found
        assert bool(found) == any("_names_probe.py" in v for v in literal_violations())
    finally:
        planted.unlink()


# --- the lab's rooms, lowest first: each imports only those before it (easd/lab/__init__.py) ------------------------

LAB_ROOMS = ("grading", "runs", "reports", "speed", "acceptance", "study", "shards", "site")


def room_violations() -> list[str]:
    bad = []
    for path in sorted((ROOT / "easd" / "lab").rglob("*.py")):
        parts = path.relative_to(ROOT / "easd" / "lab").with_suffix("").parts
        if parts[0] == "__init__":
            continue
        above = LAB_ROOMS[LAB_ROOMS.index(parts[0]) + 1 :]
        for module in imported_modules(path):
            if any(module == f"easd.lab.{room}" or module.startswith(f"easd.lab.{room}.") for room in above):
                bad.append(f"{path.relative_to(ROOT)} imports {module}")
    return bad


def test_each_room_of_the_lab_imports_only_the_rooms_below_it():
    """Issue 71: easd/lab/ was one room of 19 files; its rooms say its parts, and none leans on one above it."""
    assert sorted(
        p.name.removesuffix(".py")
        for p in (ROOT / "easd" / "lab").iterdir()
        if p.name != "__init__.py" and p.name != "__pycache__"
    ) == sorted(LAB_ROOMS)
    assert room_violations() == []


def test_the_room_rule_can_fail():
    planted = ROOT / "easd" / "lab" / "grading" / "_room_probe.py"
    planted.write_text("from ..study.plan import StudyPlan\n")
    try:
        assert "easd/lab/grading/_room_probe.py imports easd.lab.study.plan" in room_violations()
    finally:
        planted.unlink()
