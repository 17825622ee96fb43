"""Imports point one way: spec -> topology -> network -> services/packets -> workload ->
experiment (plan -> resolve -> record -> measure -> run -> advise -> report) -> cli, with
no circle anywhere in the package (function-local and TYPE_CHECKING imports counted
too: a circle hidden in a function is still a circle).

Around the package: topologies/ (files testbed loads by path) import testbed; lab/ runs
before any venv exists and imports only the standard library, itself and testbed's
standard-library-only modules; benchmarks/ import testbed and themselves; testbed imports
none of them. Each imports the others through its package, run from the repository root
(`python -m lab.run`, `python -m benchmarks.NAME`): no file edits sys.path.
"""

import ast
import subprocess
import functools
import sys
from pathlib import Path

import pytest

import testbed
from testbed.paths import REPO

PACKAGE = Path(testbed.__file__).parent
# Each module's layer: a module may import only from its own layer or lower ones. The
# longest prefix of a module's name that is listed decides its layer. The experiment's
# stages are layers of their own; its package (run_file, run_plan) composes them.
LAYERS = {
    "testbed": 0, "testbed.errors": 0, "testbed.paths": 0, "testbed.procfs": 0,
    "testbed.stats": 0, "testbed.schema": 0, "testbed.launch": 0, "testbed.userfiles": 0,
    "testbed.atomic": 0, "testbed.kernel": 0,
    "testbed.spec": 1,
    "testbed.topology": 2, "testbed.model": 2,
    "testbed.network": 3, "testbed.labkernel": 3,
    "testbed.services": 4, "testbed.packets": 4,
    "testbed.workload": 5, "testbed.results": 5, "testbed.plots": 5,
    "testbed.experiment.plan": 6,
    "testbed.experiment.resolve": 7,
    "testbed.experiment.record": 8,
    "testbed.experiment.measure": 9,
    "testbed.experiment.run": 10,
    "testbed.experiment.advise": 11,
    "testbed.experiment.report": 12,
    "testbed.experiment": 13,
    "testbed.clean": 14, "testbed.cli": 14, "testbed.docs": 14, "testbed.suite": 14,
}
STAGES = ("plan", "resolve", "record", "measure", "run", "advise", "report")


def _module_of(path: Path) -> str:
    """testbed/network/engine.py -> testbed.network.engine (a package -> its name)."""
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: Path, modules: set[str]) -> set[str]:
    """Every module a file imports anywhere (function-local and TYPE_CHECKING imports
    included), by absolute name: `from a import b` is a.b when that is one of `modules`,
    else a."""
    pkg = ".".join(path.relative_to(REPO).parts[:-1])
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[:len(pkg.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            subs = {f"{base}.{a.name}" for a in node.names} & modules
            out |= subs or {base}
    return out


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The package's modules that a file imports anywhere: `from pkg import sub` counts
    as sub."""
    return (_imported(path, modules) & modules) - {_module_of(path)}


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """Every module of the package -> the package's modules it imports."""
    files = sorted(PACKAGE.rglob("*.py"))
    modules = {_module_of(p) for p in files}
    return {_module_of(p): _imports(p, modules) for p in files}


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle as a list of modules, or [] (depth-first search)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return []

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return []


def test_no_import_circle():
    """Imports point one way: no module reaches itself through the package's imports."""
    circle = _cycle(import_graph())
    assert not circle, " -> ".join(circle)


def layer(module: str) -> int | None:
    """The layer of a module: that of the longest listed prefix of its name."""
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        prefix = ".".join(parts[:i])
        if prefix in LAYERS and (i > 1 or module == "testbed"):
            return LAYERS[prefix]
    return None


def test_every_module_has_a_layer():
    """A new top-level module must say where it sits."""
    missing = sorted(m for m in import_graph() if layer(m) is None)
    assert not missing, missing


def test_imports_point_one_way():
    """No module imports one of a higher layer."""
    up = sorted(f"{m} -> {d}" for m, deps in import_graph().items() for d in deps
                if None not in (layer(m), layer(d)) and layer(d) > layer(m))
    assert not up, "\n".join(up)


def test_the_circle_finder_finds_one():
    """The test above would see a circle (a check that cannot fail proves nothing)."""
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) == []


def repeated_names(files: list[Path]) -> dict[str, list[str]]:
    """Module file names (package __init__ files aside) found in more than one folder:
    name -> the folders, relative to the repository."""
    where: dict[str, list[str]] = {}
    for p in files:
        if p.name != "__init__.py":
            where.setdefault(p.stem, []).append(str(p.parent.relative_to(REPO)))
    return {name: dirs for name, dirs in where.items() if len(dirs) > 1}


def test_no_module_name_repeats_across_packages():
    """Two files of one name in two packages make every traceback and every `import`
    line ambiguous: each module's name is its own under testbed/ (style.md, lesson 11)."""
    repeated = repeated_names(sorted(PACKAGE.rglob("*.py")))
    assert not repeated, repeated


def test_a_repeated_name_is_found():
    """The check above can fail."""
    files = [REPO / "testbed/workload/checkpoint.py", REPO / "testbed/experiment/checkpoint.py",
             REPO / "testbed/a/__init__.py", REPO / "testbed/b/__init__.py"]
    assert repeated_names(files) == {"checkpoint": ["testbed/workload", "testbed/experiment"]}


def test_every_experiment_module_is_in_a_stage():
    """testbed/experiment/ is folders named for the flow's stages; a module lives in the
    stage it belongs to, not beside them."""
    flat = sorted(m for m in import_graph() if m.startswith("testbed.experiment.")
                  and m.split(".")[2] not in STAGES)
    assert not flat, flat
    assert {m.split(".")[2] for m in import_graph()
            if m.startswith("testbed.experiment.")} == set(STAGES)


# ---- around the package: topologies/, lab/, benchmarks/ ----------------------------------

FOLDERS = ("testbed", "topologies", "lab", "benchmarks")
# What a file in each folder may import of the project (a name, or a prefix of dotted ones).
MAY_IMPORT = {
    "testbed": ("testbed",),
    "topologies": ("testbed",),
    "lab": ("lab", "testbed.labkernel"),
    "benchmarks": ("benchmarks", "testbed"),
}
PROJECT = ("testbed", "topologies", "lab", "benchmarks", "tests")
SKIP = {".git", ".venv", ".lab", "results", "__pycache__"}


def _files(root: Path) -> list[Path]:
    """The repository's files as git sees them (tracked, and new ones it does not
    ignore: a scratch folder or a build in .gitignore is no part of it); without git,
    every file but the venv, lab state and results."""
    try:
        listed = subprocess.run(["git", "ls-files", "--cached", "--others",
                                 "--exclude-standard"], cwd=root, capture_output=True,
                                text=True, timeout=60, check=True).stdout.splitlines()
        return sorted(root / f for f in listed)
    except (OSError, subprocess.SubprocessError):
        return [p for p in sorted(root.rglob("*"))
                if not SKIP & set(p.relative_to(root).parts)]


def python_files(root: Path = REPO) -> list[Path]:
    """The repository's Python files: *.py, and extensionless scripts whose #! names
    python."""
    out = []
    for p in _files(root):
        if not p.is_file():
            continue
        if p.suffix == ".py" or (not p.suffix and p.read_bytes()[:2] == b"#!"
                                 and b"python" in p.read_bytes().split(b"\n", 1)[0]):
            out.append(p)
    return out


def imported(path: Path) -> set[str]:
    """Every module a file imports, by absolute name (testbed's modules resolved)."""
    return _imported(path, set(import_graph()))


@functools.cache
def loose_names() -> frozenset[str]:
    """Names that import only with a folder of the project on sys.path: the file names in
    topologies/, lab/, benchmarks/ and tests/ (`import common`, `from apn import ...`)."""
    names = {p.stem for folder in PROJECT[1:] for p in (REPO / folder).rglob("*.py")}
    return frozenset(names - {"__init__"} - set(sys.stdlib_module_names))


def project_imports(path: Path) -> set[str]:
    """The project modules (or loose names) a file imports."""
    loose = loose_names()
    return {m for m in imported(path) if m.split(".")[0] in PROJECT or m in loose}


def allowed(folder: str, module: str) -> bool:
    """Whether a file in `folder` may import `module` of the project."""
    return any(module == p or module.startswith(p + ".") for p in MAY_IMPORT[folder])


@pytest.mark.parametrize("folder", FOLDERS)
def test_each_folder_imports_what_it_may(folder):
    """testbed imports none of topologies/, lab/, benchmarks/ or tests/; topologies import
    testbed only; lab only itself and testbed.labkernel; benchmarks testbed and
    themselves; and nothing imports a sibling file by its bare name."""
    wrong = sorted(f"{p.relative_to(REPO)} -> {m}" for p in python_files(REPO / folder)
                   for m in project_imports(p) if not allowed(folder, m))
    assert not wrong, "\n".join(wrong)


def _stdlib(module: str) -> bool:
    """Whether a module is the standard library's."""
    return module.split(".")[0] in sys.stdlib_module_names | {"__future__"}


def test_lab_needs_only_the_standard_library():
    """lab/ runs before any venv exists: it and the testbed modules it imports (and
    theirs, and their packages' __init__) import the standard library only."""
    seen: set[str] = set()
    todo = [p for p in python_files(REPO / "lab")]
    wrong = []
    while todo:
        path = todo.pop()
        for m in imported(path):
            if _stdlib(m) or m.split(".")[0] == "lab" or m in seen:
                continue
            if m.split(".")[0] != "testbed":
                wrong.append(f"{path.relative_to(REPO)} -> {m}")
                continue
            seen.add(m)
            parts = m.split(".")
            for i in range(1, len(parts) + 1):
                base = REPO.joinpath(*parts[:i])
                todo += [f for f in (base / "__init__.py", base.with_suffix(".py"))
                         if f.exists()]
    assert not wrong, "\n".join(wrong)
    assert "testbed.labkernel" in seen  # the check above looked where lab/run reaches


def path_edits(source: str) -> list[int]:
    """The lines of a Python source that change sys.path (insert, append, assignment to
    it or a slice of it, +=) or add a site directory."""
    def is_sys_path(node: ast.AST) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "path" and \
            isinstance(node.value, ast.Name) and node.value.id == "sys"
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                is_sys_path(node.func.value) or node.func.attr == "addsitedir"):
            lines.append(node.lineno)
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AugAssign) else []
        for t in targets:
            if is_sys_path(t) or (isinstance(t, ast.Subscript) and is_sys_path(t.value)):
                lines.append(node.lineno)
    return lines


def test_no_file_edits_sys_path():
    """Every Python file of the repository (tests too) imports what it needs through
    installed packages or the repository root it is run from, never by editing sys.path."""
    edits = [f"{p.relative_to(REPO)}:{n}" for p in python_files() for n in
             path_edits(p.read_text())]
    assert not edits, "\n".join(edits)


def test_the_path_edit_finder_finds_them():
    """Each way of editing sys.path is seen; reading it is not."""
    for line in ("sys.path.insert(0, 'x')", "sys.path.append('x')", "sys.path[:0] = ['x']",
                 "sys.path += ['x']", "sys.path = ['x']", "site.addsitedir('x')"):
        assert path_edits(f"import sys, site\n{line}\n") == [2], line
    assert path_edits("import sys\nprint(sys.path, sys.argv[0])\nx = list(sys.path)\n") == []
