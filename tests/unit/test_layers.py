"""Imports point one way: spec -> topology -> network -> services/packets -> workload ->
experiment (plan -> resolve -> record -> measure -> run -> advise -> report) -> cli, with
no circle anywhere in the package (function-local and TYPE_CHECKING imports counted
too: a circle hidden in a function is still a circle)."""

import ast
from pathlib import Path

import testbed
from testbed.paths import REPO

PACKAGE = Path(testbed.__file__).parent
# Each module's layer: a module may import only from its own layer or lower ones. The
# longest prefix of a module's name that is listed decides its layer. The experiment's
# stages are layers of their own; its package (run_file, run_plan) composes them.
LAYERS = {
    "testbed": 0, "testbed.errors": 0, "testbed.paths": 0, "testbed.procfs": 0,
    "testbed.stats": 0, "testbed.schema": 0, "testbed.launch": 0, "testbed.userfiles": 0,
    "testbed.atomic": 0,
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
    "testbed.clean": 14, "testbed.cli": 14, "testbed.docs": 14,
}
STAGES = ("plan", "resolve", "record", "measure", "run", "advise", "report")


def _module_of(path: Path) -> str:
    """testbed/network/engine.py -> testbed.network.engine (a package -> its name)."""
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The package's modules that a file imports anywhere (function-local and
    TYPE_CHECKING imports included): `from pkg import sub` counts as sub."""
    name = _module_of(path)
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[:len(pkg.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            subs = {f"{base}.{a.name}" for a in node.names} & modules
            out |= subs if subs else ({base} & modules)
    return out - {name}


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
