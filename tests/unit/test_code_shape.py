"""The code stays readable: every public module-level function, class and method of the
package has a docstring, and no function grows past MAX_LINES (functions that do one
thing). Nested helpers inside a function are the function's own business."""

import ast
from pathlib import Path

import testbed

MAX_LINES = 50
PACKAGE = Path(testbed.__file__).parent
DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


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


def _all_functions():
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield path.relative_to(PACKAGE.parent), node


def test_public_definitions_have_docstrings():
    missing = [f"{path}:{node.lineno} {node.name}" for path, node in _definitions()
               if not node.name.startswith("_") and not ast.get_docstring(node)]
    assert not missing, "\n".join(missing)


def test_no_long_functions():
    sizes = sorted(((node.end_lineno - node.lineno + 1, f"{path}:{node.lineno} {node.name}")
                    for path, node in _all_functions()), reverse=True)
    too_long = [f"{n} lines: {where}" for n, where in sizes if n > MAX_LINES]
    assert not too_long, "\n".join(too_long)
