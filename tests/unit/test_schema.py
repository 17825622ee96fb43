"""One source for every fact: each knob's bounds and default are declared once, in
testbed.schema, and the specs, the experiment layer and `testbed knobs` read them."""

import ast
from pathlib import Path

import pytest

import testbed
from testbed.paths import REPO
from testbed import schema
from testbed.errors import SpecError
from testbed.experiment.plan import dimensions as dims
from testbed.spec import FibreSpec, MountSpec, NfsServerSpec
from testbed.workload import DatasetSpec, WorkloadSpec

PACKAGE = Path(testbed.__file__).parent
# The spec each schema target is validated by, and how to build one with a field set.
SPECS = {"fibre": FibreSpec, "mount": MountSpec, "server": NfsServerSpec,
         "dataset": DatasetSpec, "loader": WorkloadSpec, "window": WorkloadSpec}
# Modules that hold specs or topologies: none may compare a value with a literal bound.
SPEC_MODULES = ("testbed/spec.py", "testbed/topology.py", "testbed/workload/loader.py",
                "testbed/workload/dataset.py", *(str(p.relative_to(REPO)) for p in
                                                 sorted((REPO / "topologies").glob("*.py"))))


def _numeric_rows():
    """(row, spec class, field) of every bounded numeric row that a spec validates."""
    for d in schema.DIMENSIONS:
        spec = SPECS.get(d.target) or (FibreSpec if d.name == "mtu" else None)
        if spec is not None and d.kind in ("int", "float", "rate") and d.hi is not None:
            yield pytest.param(d, spec, d.spec_field, id=d.name)


def _build(spec, field, value):
    """The spec with one field set (a fibre's jitter needs a delay to stay below, RPC
    slots an NFSv3 mount)."""
    extra = {"distance_km": 40_000, "extra_delay_ms": 1000} \
        if spec is FibreSpec and field == "jitter_ms" else {}
    if spec is WorkloadSpec and field in ("measure_s", "measure_stall_s"):
        extra = {"measure_max_s": 3600}
    if spec is WorkloadSpec and field == "measure_max_s":
        extra = {"measure_s": 0.5}
    if field == "rpc_slots":  # NFSv3's setting (MountSpec refuses it for 4.1+)
        extra = {"vers": "3"}
    return spec(**extra, **{field: value})


@pytest.mark.parametrize("row,spec,field", list(_numeric_rows()))
def test_spec_and_knob_accept_the_same_values(row, spec, field):
    """The library (a spec built in Python) and an experiment (the knob's parser) agree at
    and just beyond both ends of every bound: they are the same row."""
    step = 1 if row.kind == "int" else max(abs(row.hi), 1.0) * 1e-9
    lo = row.lo if row.kind != "rate" else 0.0
    for value in (lo - step, lo, row.hi, row.hi + step):
        value = int(value) if row.kind == "int" else float(value)
        try:
            row.parse(value)
            knob_ok = True
        except ValueError:
            knob_ok = False
        try:
            _build(spec, field, value)
            spec_ok = True
        except SpecError:
            spec_ok = False
        assert spec_ok == knob_ok, f"{row.name}={value}: spec {spec_ok}, knob {knob_ok}"


def test_spec_defaults_are_the_schema_defaults():
    """Every field a row declares a default for has that default in its spec."""
    for d in schema.DIMENSIONS:
        spec = SPECS.get(d.target)
        if spec is None or d.default is None or \
                d.spec_field not in spec.__dataclass_fields__:  # type: ignore[attr-defined]
            continue
        assert getattr(spec(), d.spec_field) == d.default, d.name


def test_knob_table_is_the_schema():
    """`testbed knobs` and experiments read the schema's rows, not copies of them."""
    exposed = [d for d in schema.DIMENSIONS if d.exposed]
    assert [d.name for d in dims.DIMENSIONS] == [d.name for d in exposed]
    for ours, theirs in zip(dims.DIMENSIONS, exposed):
        assert (ours.lo, ours.hi, ours.default, ours.unit) == \
            (theirs.lo, theirs.hi, theirs.default, theirs.unit)
    assert dims.BY_NAME["workload"].allowed() and dims.BY_NAME["data_path"].allowed()


def _calls_named(tree, names):
    """Calls of a function or class by one of `names` (plain or as an attribute)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) \
                else ""
            if name in names:
                yield node


def test_rows_are_declared_only_in_the_schema():
    """No module but testbed/schema.py builds a knob row."""
    found = [f"{p.relative_to(REPO)}:{n.lineno}"
             for p in sorted(PACKAGE.rglob("*.py")) if p.name != "schema.py"
             for n in _calls_named(ast.parse(p.read_text()), {"Dimension"})]
    assert not found, found


def _named(node) -> str:
    """The identifier a compared expression names (x, self.x, getattr(...)), or ''."""
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else ""


def test_spec_modules_compare_no_field_with_a_literal_bound():
    """Specs and topologies compare no knob's field with a number written in the code
    (such a bound would be a second declaration of the schema's)."""
    fields = {d.name for d in schema.DIMENSIONS} | {d.spec_field for d in schema.DIMENSIONS}
    found = []
    for rel in SPEC_MODULES:
        for node in ast.walk(ast.parse((REPO / rel).read_text())):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            named = any(_named(c) in fields for c in sides)
            literal = [c.value for c in sides if isinstance(c, ast.Constant)
                       and type(c.value) in (int, float) and c.value != 0]
            if named and literal:
                found.append(f"{rel}:{node.lineno} {literal}")
    assert not found, found
