"""The code stays readable: every public module-level function, class and method of the
package has a docstring; in lab/ and benchmarks/ every module, function and class has
one, private and nested ones too; and no function grows past its folder's MAX_LINES
(functions that do one thing). Nested helpers inside a function of the package are the
function's own business.

lab/ holds Python modules, and shell scripts (lab/run, ...) that run them or build things;
a file without a suffix counts as Python when its #! line names python."""

import ast
from pathlib import Path

import pytest

import testbed
from testbed.paths import REPO

# The longest function (def line to last line) each folder allows.
MAX_LINES = {"testbed": 40, "lab": 40, "benchmarks": 40}
PACKAGE = Path(testbed.__file__).parent
STRICT = ("lab", "benchmarks")  # every definition documented, private ones too
DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _is_python(path: Path) -> bool:
    """A .py file, or an extensionless script whose #! line names python."""
    if path.suffix == ".py":
        return True
    if path.suffix or not path.is_file():
        return False
    with open(path, "rb") as fh:
        first = fh.readline()
    return first.startswith(b"#!") and b"python" in first


def _sources(folder: str) -> list[Path]:
    """The Python files under REPO/folder (the package's own: its .py files)."""
    root = REPO / folder
    return sorted(p for p in root.rglob("*") if p.is_file() and _is_python(p)
                  and "__pycache__" not in p.parts)


def _definitions():
    """(file, node) of module-level definitions and the methods of their classes."""
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, DEFS):
                yield path.relative_to(PACKAGE.parent), node
                if isinstance(node, ast.ClassDef):
                    for sub in node.body:
                        if isinstance(sub, DEFS):
                            yield path.relative_to(PACKAGE.parent), sub


def _all_functions(folder: str = "testbed"):
    """(file, node) of every function under the folder, nested ones included."""
    for path in _sources(folder):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield path.relative_to(REPO), node


def test_public_definitions_have_docstrings():
    missing = [f"{path}:{node.lineno} {node.name}" for path, node in _definitions()
               if not node.name.startswith("_") and not ast.get_docstring(node)]
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize("folder", sorted(MAX_LINES))
def test_no_long_functions(folder):
    sizes = sorted(((node.end_lineno - node.lineno + 1, f"{path}:{node.lineno} {node.name}")
                    for path, node in _all_functions(folder)), reverse=True)
    too_long = [f"{n} lines: {where}" for n, where in sizes if n > MAX_LINES[folder]]
    assert not too_long, "\n".join(too_long)


def test_lab_scripts_are_found():
    """The lab commands' modules are checked; the shell scripts (lab/run, the shims that
    run those modules, and the rest) are not."""
    lab = {p.name for p in _sources("lab")}
    assert {"run.py", "fetch_uml.py", "build_uml.py", "build_image.py", "vm_image.py"} <= lab
    assert not {"run", "fetch-uml", "build-uml", "vm-image", "provision", "test", "uml-init",
                "vm-init"} & lab


@pytest.mark.parametrize("folder", STRICT)
def test_every_definition_has_a_docstring(folder):
    missing = []
    for path in _sources(folder):
        tree = ast.parse(path.read_text())
        if not ast.get_docstring(tree):
            missing.append(f"{path.relative_to(REPO)}: module")
        missing += [f"{path.relative_to(REPO)}:{node.lineno} {node.name}"
                    for node in ast.walk(tree)
                    if isinstance(node, DEFS) and not ast.get_docstring(node)]
    assert not missing, "\n".join(missing)
