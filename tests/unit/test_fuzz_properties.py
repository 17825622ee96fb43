"""Property-based fuzzing of every reader of user input (Hypothesis): experiment files
(valid structure with hostile values; hostile structure; hostile bytes), -p KEY=VALUE
pairs, DLIO workload YAML, file-system situations, and captures for `testbed analyse`.

The property, for every generated input: `testbed ...` (cli.main, in process, its
logging on stderr as the command sets it up) returns 0 or 2 and never raises (argparse's
usage errors leave by SystemExit(2), the command's exit); on 2 stderr is exactly one
line, `testbed: error: ...`, and no traceback; the call costs under 2 s of CPU time
(cpu_budget.py: CPU time, so that a busy machine is not taken for slow code, with a margin
for load; the campaign, a benchmark, holds it to 2 s itself), CI_DEADLINE of wall time is
a stuck call's bound, and a call still running after HANG_S of CPU time or HANG_WALL_S of
wall time is stopped and reported as a hang; nothing
is created outside the example's input folder (the working directory stays empty, no run
registry or namespace appears). `analyse` returns 0 for a capture with no NFS in it
("nothing found" is a summary of zeros, not an error) and may return 1 with one line (a
runtime failure: the disk refused its --csv or --png).

Unlike test_fuzz.py, whose cases come from the knob table, keys here come from the table
and from anywhere, values from anywhere, and files from anywhere.

Profiles: "ci" (the default: CI_EXAMPLES per test, new ones every run from the run's seed,
which the run prints: tests/conftest.py; HYPOTHESIS_SEED=N or --hypothesis-seed=N replays
a run) and "campaign" (HYPOTHESIS_PROFILE=campaign, FUZZ_EXAMPLES per test;
benchmarks/fuzz_campaign.py).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import os
import shutil
import signal
import struct
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml
from hypothesis import HealthCheck, core, event, example, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

import cpu_budget
from testbed import cli
from testbed.experiment import DLIO_FILE
from testbed.experiment.plan import kinds
from testbed.experiment.plan import dimensions as dims
from testbed.paths import EXPERIMENTS, REPO
from testbed.schema import HOST_PROFILES
from testbed.topology import parse_params

CI_DEADLINE = timedelta(seconds=10)
HANG_S = 30.0  # of CPU time
HANG_WALL_S = 600.0  # of wall time: a call blocked, not slow
CI_EXAMPLES = 60
# Generation is slow by design (whole documents, deep nesting, pcaps) and the sandbox
# fixture is emptied by hand between examples.
SLOW_BY_DESIGN = [HealthCheck.too_slow, HealthCheck.data_too_large,
                  HealthCheck.function_scoped_fixture, HealthCheck.large_base_example,
                  HealthCheck.filter_too_much]
# derandomize is stated: with CI set in the environment Hypothesis loads its own
# derandomized "ci" profile first, and a profile registered here inherits from it.
settings.register_profile("ci", max_examples=CI_EXAMPLES, derandomize=False,
                          deadline=CI_DEADLINE, database=None, suppress_health_check=SLOW_BY_DESIGN)
settings.register_profile("campaign", max_examples=int(os.environ.get("FUZZ_EXAMPLES", "10000")),
                          derandomize=False, deadline=None, database=None, print_blob=True,
                          suppress_health_check=SLOW_BY_DESIGN)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

MLPERF = REPO / "testbed" / "workload" / "mlperf"
SHIPPED = sorted(EXPERIMENTS.glob("*.toml"))
STATE_DIRS = (Path("/run/netns"), Path(os.environ.get("APN_STATE_DIR", "/run/apn-testbed")))


# ---------------------------------------------------------------- running the command

class Hang(BaseException):
    """A call still running after HANG_S (BaseException: no `except Exception` eats it)."""


@dataclass
class Outcome:
    """What one `testbed` call did."""
    argv: list[str]
    code: Any
    out: str
    err: str
    cpu_s: float = 0.0


@contextlib.contextmanager
def _stderr_logging(err: io.StringIO) -> Iterator[None]:
    """Logging as the command has it, onto `err`: the root logger writing WARNING and
    above (cli.main's basicConfig; pytest's handlers would swallow the lines otherwise),
    and the libraries' own stderr handlers (scapy's) pointed at `err` too."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    root.handlers = [logging.StreamHandler(err)]
    root.setLevel(logging.WARNING)
    own = [h for lg in logging.Logger.manager.loggerDict.values()
           if isinstance(lg, logging.Logger) for h in lg.handlers
           if type(h) is logging.StreamHandler]
    streams = [h.stream for h in own]
    for h in own:  # not setStream: it flushes the old stream, which may be closed (scapy's
        h.stream = err  # handler keeps the stderr of whoever imported it first: a capsys)
    try:
        yield
    finally:
        for h, stream in zip(own, streams):
            h.stream = stream
        root.handlers = saved[0]
        root.setLevel(saved[1])


@contextlib.contextmanager
def _watchdog(cpu_s: float, wall_s: float) -> Iterator[None]:
    """Raise Hang in the main thread after `cpu_s` of the process's CPU time (a loop that
    never ends, however slowly a busy host runs it) or `wall_s` of wall time (a call
    blocked for good)."""
    def ring(signum: int, _frame: object) -> None:
        what = "CPU" if signum == signal.SIGPROF else "wall"
        raise Hang(f"still running after {cpu_s if what == 'CPU' else wall_s:g} s of "
                   f"{what} time")
    old = {sig: signal.signal(sig, ring) for sig in (signal.SIGPROF, signal.SIGALRM)}
    signal.setitimer(signal.ITIMER_PROF, cpu_s)
    signal.setitimer(signal.ITIMER_REAL, wall_s)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        for sig, handler in old.items():
            signal.signal(sig, handler)


def call(argv: list[str], hang_s: float = HANG_S) -> Outcome:
    """`testbed ARGV` in process: its exit status, stdout and stderr (Hang after hang_s
    of CPU time)."""
    out, err = io.StringIO(), io.StringIO()
    with cpu_budget.measured(" ".join(argv)[:200]) as spent, \
            _watchdog(hang_s, HANG_WALL_S), _stderr_logging(err), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as exc:  # argparse: one line, exit 2 (cli.Parser.error)
            code = exc.code
    return Outcome(argv, code, out.getvalue(), err.getvalue(), spent[0])


def _run_state() -> set[str]:
    """Our namespaces and run registry entries (none may appear)."""
    return {f"{d}/{n}" for d in STATE_DIRS if d.is_dir() for n in os.listdir(d)
            if d.name != "netns" or n.startswith("tb")}


@dataclass
class Sandbox:
    """An example's world: inputs are written to `inputs`, the command runs in `cwd`."""
    inputs: Path
    cwd: Path

    def fresh(self) -> Path:
        """The input folder, emptied, and the working directory checked empty (Hypothesis
        reuses the fixture across examples; the cwd must stay where it is)."""
        if self.inputs.exists():
            os.chmod(self.inputs, 0o755)
            shutil.rmtree(self.inputs)
        self.inputs.mkdir()
        self.cwd.mkdir(exist_ok=True)
        assert not os.listdir(self.cwd), os.listdir(self.cwd)
        return self.inputs

    def write(self, name: str | bytes, content: bytes) -> Path:
        """A fresh input folder with one file in it."""
        path = Path(os.fsdecode(self.fresh() / os.fsdecode(name)))
        path.write_bytes(content)
        return path

    def check(self, argv: list[str], codes: tuple[int, ...] = (0, 2),
              may_write: frozenset[str] = frozenset(), hang_s: float = HANG_S) -> Outcome:
        """Run the command and assert the contract (`may_write`: names of files it was
        asked to write in the input folder); the outcome, for further checks."""
        before = (set(os.listdir(self.inputs)), _run_state())
        o = call(argv, hang_s)
        _note(f"exit {o.code}")
        assert o.code in codes, _says(o, f"exit status {o.code!r}, not one of {codes}")
        assert "Traceback" not in o.err, _says(o, "a traceback")
        assert not cpu_budget.over(o.cpu_s), _says(o, cpu_budget.over(o.cpu_s))
        if o.code != 0:
            lines = [line for line in o.err.splitlines() if line.strip()]
            assert len(lines) == 1 and lines[0].startswith("testbed: error: ") \
                and len(lines[0]) > len("testbed: error: "), _says(o, "not one error line")
        assert not os.listdir(self.cwd), _says(o, f"created {os.listdir(self.cwd)} in the cwd")
        made = set(os.listdir(self.inputs)) - before[0]
        assert made <= may_write and _run_state() == before[1], \
            _says(o, f"created {sorted(made)} or run state")
        return o


def _note(text: str) -> None:
    """Hypothesis' event() in a property; nothing in a plain test."""
    with contextlib.suppress(InvalidArgument):
        event(text)


def _says(o: Outcome, problem: str) -> str:
    """The assertion message: what went wrong, the command and its stderr."""
    argv = " ".join(a if len(a) < 200 else a[:200] + "..." for a in o.argv)
    return f"{problem}: testbed {argv}\nstderr: {o.err[-2000:]!r}"


@pytest.fixture(scope="module", autouse=True)
def _imported() -> None:
    """What the commands import on first use, imported before the first example (which
    would pay for it and seem slow against the deadline, then fast when replayed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401
    import testbed.packets.nfs_rpc  # noqa: F401
    call(["demo", "--check"])


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Sandbox:
    """A sandbox under tmp_path, the working directory for the test."""
    box = Sandbox(tmp_path / "in", tmp_path / "cwd")
    box.fresh()
    monkeypatch.chdir(box.cwd)
    return box


# ---------------------------------------------------------------- TOML, written by hand

@dataclass(frozen=True)
class Raw:
    """TOML text written as it is (deep nesting, a value TOML cannot say otherwise)."""
    text: str


BARE_KEY = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f",
           "\r": "\\r"}


def toml_string(s: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped."""
    return '"' + "".join(ESCAPES.get(c) or (f"\\u{ord(c):04x}" if ord(c) < 0x20 or
                                            ord(c) == 0x7F else c) for c in s) + '"'


def toml_key(k: str) -> str:
    """A key: bare when it can be, quoted otherwise (a dotted knob name is one key)."""
    return k if k and set(k) <= BARE_KEY else toml_string(k)


def toml_value(v: Any) -> str:
    """Any value the strategies make, as TOML."""
    if isinstance(v, Raw):
        return v.text
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if v != v else "inf" if v == math.inf else "-inf" if v == -math.inf \
            else repr(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return toml_string(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{toml_key(k)} = {toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(v)


def toml_doc(top: dict[str, Any], tables: list[tuple[str, dict[str, Any]]]) -> str:
    """A document: top-level keys, then each table's header and keys ("mounts.x" is a
    header of two keys; keys starting with "=" are written raw as `key = value`)."""
    lines = [f"{toml_key(k)} = {toml_value(v)}" for k, v in top.items()]
    for header, body in tables:
        lines.append("[" + ".".join(toml_key(p) for p in header.split(".", 1)) + "]")
        lines += [f"{toml_key(k)} = {toml_value(v)}" for k, v in body.items()]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- values

IDENT = st.from_regex(r"[A-Za-z_][A-Za-z0-9_-]{0,15}", fullmatch=True)
HOSTILE_INTS = st.one_of(st.sampled_from([0, -1, 1, 2**31, 2**53 + 1, 2**63 - 1, -2**63,
                                          10**30, -10**30]), st.integers())
HOSTILE_FLOATS = st.one_of(st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 0.0,
                                            1e-300, 5e-324, 1e308, -1e308, 0.5, 1e-9]),
                           st.floats())
RATE_TEXT = st.sampled_from(["1e-300mbit", "0mbit", "1kbit", "0.001kbit", "1gbit", "1gbps",
                             " 10 gbit ", "10GBIT", "nan mbit", "inf", "1e400gbit",
                             "-1gbit", ".5tbit", "١gbit", "1" * 400 + "tbit", "100mbit",
                             "9" * 30 + "mbit", "auto", "AUTO", " auto "])
HOSTILE_TEXT = st.one_of(
    st.text(max_size=20), st.just(""),
    st.text(st.characters(max_codepoint=0x1F), min_size=1, max_size=5),
    st.text(max_size=3).map(lambda s: (s or "x") * 3000),
    RATE_TEXT, st.sampled_from(["4.1", "4.2", "3", "raw", "record", "tcp", "rdma", "cubic",
                                "default", "tuned", "thread", "process", "cache", "direct",
                                "unet3d-h100", "custom", "true", "１", "nan", "-0"]))
SCALARS = st.one_of(HOSTILE_INTS, HOSTILE_FLOATS, HOSTILE_TEXT, st.booleans())
NESTED = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.one_of(IDENT, st.text(max_size=8)),
                                                 inner, max_size=3)), max_leaves=8)


def deep(depth: int, kind: str) -> Raw:
    """An array or inline table nested `depth` deep."""
    if kind == "array":
        return Raw("[" * depth + "]" * depth)
    return Raw("{a = " * depth + "1" + "}" * depth)


DEEP = st.builds(deep, st.sampled_from([2, 50, 200, 400, 999, 1000, 3000, 20000]),
                 st.sampled_from(["array", "table"]))
BIG_NUMBER = st.builds(Raw, st.sampled_from(["1" * 4301, "9" * 5000, "1" * 5000 + ".0",
                                             "0x" + "f" * 2000, "1e99999", "-0", "+0",
                                             "0o777", "0b101", "1_000"]))
HOSTILE = st.one_of(SCALARS, NESTED, DEEP, BIG_NUMBER)


def _int_values(d: dims.Dimension) -> st.SearchStrategy[int]:
    """Integers a knob allows (powers of two where it asks for them)."""
    lo, hi = int(d.lo or 0), int(d.hi if d.hi is not None else 2**31)
    if d.pow2:
        return st.sampled_from([2**e for e in range(64) if lo <= 2**e <= hi])
    return st.one_of(st.sampled_from([lo, hi]), st.integers(lo, min(hi, lo + 64)),
                     st.integers(lo, hi))


def _float_values(d: dims.Dimension) -> st.SearchStrategy[float]:
    """Finite numbers a knob allows, its bounds and -0.0 among them."""
    lo, hi = float(d.lo or 0), float(d.hi if d.hi is not None else 1e6)
    ends = [lo, hi] + ([-0.0] if lo == 0 else [])
    return st.one_of(st.sampled_from(ends), st.floats(lo, hi))


def valid_value(d: dims.Dimension, mounts: tuple[str, ...] = ()) -> st.SearchStrategy[Any]:
    """Values a knob allows as TOML gives them (its range, its choices, rates as text)."""
    if d.name == "mount":
        return st.sampled_from(("default", *mounts))
    if d.name == "host":
        return st.sampled_from(tuple(HOST_PROFILES))
    by_kind: dict[str, st.SearchStrategy[Any]] = {
        "int": _int_values(d) if d.kind == "int" else st.nothing(),
        "float": _float_values(d) if d.kind == "float" else st.nothing(),
        "bool": st.booleans(),
        "rate": st.one_of(st.floats(1, 100_000), st.sampled_from(
            ["1mbit", "100mbit", "1gbit", "10gbit", "100gbit", "1.5gbit", "0.1tbit"])),
        "choice": st.sampled_from(d.choices or ("x",)),
        "str_list": st.lists(st.sampled_from(d.choices or ("x",)), min_size=1, unique=True),
        "auto": st.one_of(st.just("auto"), _float_values(d)),
        "limit": st.one_of(st.floats(1, 1_600_000), st.sampled_from(
            ["none", "1mbit", "12.5gbit", "400gbit", "1.6tbit"])),
    }
    return by_kind[d.kind]


def knob_value(d: dims.Dimension | None, mounts: tuple[str, ...] = ()) -> st.SearchStrategy[Any]:
    """A value for a key: what the knob allows, or anything (unknown keys: anything)."""
    if d is None:
        return HOSTILE
    return st.one_of(valid_value(d, mounts), valid_value(d, mounts), HOSTILE)


# ---------------------------------------------------------------- experiment documents

LINKS = ("*", "wan", "site_a", "site_b", "nowhere")
FIBRE_KEYS = tuple(f"fibre.{link}.{d.name}" for link in LINKS for d in dims.FIBRE_DIMS)
KNOB_KEYS = tuple(d.name for d in dims.DIMENSIONS)
TOPOLOGIES = ("apn", "metro", "two-sites", "local")
SEARCH_KEYS = ("knob", "range", "target", "tolerance", "max_points")
CAPTURE_KEYS = ("enabled", "seconds", "max_mib", "keep_pcap")
TARGETS = st.one_of(st.builds("{} {} {}".format, st.sampled_from(
    ["au_pct", "slowdown_pct", "throughput_MB_s", "samples_per_s", "x"]),
    st.sampled_from([">=", "<=", ">", "<", "=", "=>"]),
    st.sampled_from(["90", "200", "0", "100", "-100", "1e308", "nan", "inf", "50.5", "1e-300"])),
    HOSTILE_TEXT)


def _dim_of(key: str) -> dims.Dimension | None:
    """The knob a [fixed]/[sweep] key names (fibre.LINK.KNOB too), None for others."""
    return dims.BY_NAME.get(key.rsplit(".", 1)[-1] if key.startswith("fibre.") else key)


@st.composite
def knob_table(draw: st.DrawFn, sweep: bool, mounts: tuple[str, ...]) -> dict[str, Any]:
    """A [fixed] or [sweep] table: real knob names and others, their values or others;
    sweep lists with repeats and -0.0 beside 0.0."""
    keys = draw(st.lists(st.one_of(st.sampled_from(KNOB_KEYS), st.sampled_from(KNOB_KEYS),
                                   st.sampled_from(FIBRE_KEYS), IDENT, st.text(max_size=12)),
                         max_size=4, unique=True))
    table: dict[str, Any] = {}
    for key in keys:
        value = knob_value(_dim_of(key), mounts)
        if not sweep:
            table[key] = draw(value)
            continue
        values = draw(st.lists(value, min_size=0, max_size=5))
        if values and draw(st.booleans()):
            values.append(draw(st.sampled_from(values)))  # listed twice
        table[key] = draw(st.one_of(st.just(values), value))
    return table


@st.composite
def section_table(draw: st.DrawFn, section: str, mounts: tuple[str, ...]) -> dict[str, Any]:
    """A [dataset]/[workload]/[server]/[cache]/[staging]/[mounts.NAME] table."""
    known = dims.in_section(section)
    extra = ("dlio",) if section == "workload" else ()
    keys = draw(st.lists(st.one_of(st.sampled_from((*known, *extra)), IDENT,
                                   st.text(max_size=10)), max_size=4, unique=True))
    table = {}
    for k in keys:
        if k == "dlio":
            table[k] = draw(st.one_of(st.sampled_from(
                [str(p) for p in sorted(MLPERF.glob("*.yaml"))] + ["missing.yaml", "", ".",
                                                                  "/", "a\0b"]), HOSTILE))
        else:
            table[k] = draw(knob_value(known.get(k), mounts))
    return table


@st.composite
def search_table(draw: st.DrawFn) -> dict[str, Any]:
    """A [search] table: its keys with plausible and hostile values, some left out."""
    knob = draw(st.one_of(st.sampled_from(("distance_km", "rate", "loss_pct", "batch",
                                           "readers", "fibre.wan.distance_km", "mount")),
                          HOSTILE))
    d = _dim_of(knob) if isinstance(knob, str) else None
    lo_hi = st.lists(valid_value(d) if d is not None else HOSTILE, min_size=2, max_size=2)
    ordered = lo_hi.map(sorted) if d is not None and d.kind in ("int", "float") else lo_hi
    table = {"knob": knob, "range": draw(st.one_of(lo_hi, ordered, HOSTILE)),
             "target": draw(TARGETS),
             "tolerance": draw(st.one_of(st.sampled_from([1, 100, 1e-9, 0, -1, 1e308]),
                                         HOSTILE)),
             "max_points": draw(st.one_of(st.integers(3, 64), HOSTILE))}
    drop = draw(st.sets(st.sampled_from(SEARCH_KEYS), max_size=2))
    extra = draw(st.dictionaries(IDENT, HOSTILE, max_size=1))
    return {k: v for k, v in table.items() if k not in drop} | extra


@st.composite
def capture_table(draw: st.DrawFn) -> dict[str, Any]:
    """A [capture] table."""
    keys = draw(st.lists(st.sampled_from(CAPTURE_KEYS + ("bogus",)), max_size=3, unique=True))
    return {k: draw(st.one_of(st.booleans(), st.floats(0, 4000), st.integers(-1, 70000),
                              HOSTILE)) for k in keys}


@st.composite
def top_level(draw: st.DrawFn) -> dict[str, Any]:
    """name, topology, repetitions, au_bar, description: real ones, hostile ones, unknown."""
    choices = {"name": st.one_of(IDENT, HOSTILE_TEXT), "topology": st.one_of(
        st.sampled_from(TOPOLOGIES), HOSTILE), "repetitions": st.one_of(st.integers(1, 3),
                                                                        HOSTILE),
        "au_bar": st.one_of(st.floats(0.001, 100), HOSTILE),
        "description": st.one_of(st.text(max_size=30), HOSTILE)}
    keys = draw(st.lists(st.sampled_from((*choices, "bogus", "topology_params")),
                         max_size=4, unique=True))
    return {k: draw(choices.get(k, HOSTILE)) for k in keys}


@st.composite
def experiment_doc(draw: st.DrawFn) -> str:
    """An experiment file: valid structure, values from the knob table and from anywhere."""
    mounts = tuple(draw(st.lists(st.one_of(st.sampled_from(["tuned", "default", "x"]), IDENT),
                                 max_size=2, unique=True)))
    makers = {"fixed": knob_table(False, mounts), "sweep": knob_table(True, mounts),
              "search": search_table(), "capture": capture_table(),
              **{s: section_table(s, mounts) for s in dims.SECTIONS}}
    names = draw(st.lists(st.sampled_from(sorted(makers)), min_size=0, max_size=5, unique=True))
    tables = [(n, draw(makers[n])) for n in names]
    tables += [(f"mounts.{m}", draw(section_table("mounts", mounts))) for m in mounts]
    return toml_doc(draw(top_level()), tables)


# ---------------------------------------------------------------- hostile structure, bytes

TABLE_NAMES = ("fixed", "sweep", "search", "mounts", "mounts.x", "dataset", "workload",
               "server", "cache", "staging", "capture", "fibre", "bogus")
STRUCTURE_LINES = st.one_of(
    st.builds("[[{}]]\nnconnect = 2".format, st.sampled_from(TABLE_NAMES)),
    st.builds("{} = {}".format, st.sampled_from(TABLE_NAMES).map(toml_key),
              HOSTILE.map(toml_value)),
    st.builds("[{}]\n{} = {}".format, st.sampled_from(TABLE_NAMES),
              st.sampled_from(["fibre.wan.distance_km", "fibre.wan", "fibre.\"*\".loss_pct",
                               "fibre.x.y.z", "a.b.c", "mounts.x.nconnect", "fibre",
                               "fibre.site_b.rate", "rsize.x"]), HOSTILE.map(toml_value)),
    st.sampled_from(["mounts.x.nconnect = 2", "fixed.fibre.wan.distance_km = 5",
                     "sweep.distance_km = [1, 2]", "search.knob = 'distance_km'",
                     "[mounts]\nx = 5", "mounts = [{}]", "[fixed]\n[fixed]",
                     "[sweep]\ndistance_km = [0]\n[sweep.fibre]\nwan = 1",
                     "fixed = {fibre = {wan = {distance_km = 1}}}",
                     "[workload]\ndlio = 5", "[sweep]\nfibre = []", "[fixed]\nfibre = {}"]))


@st.composite
def hostile_structure(draw: st.DrawFn) -> bytes:
    """A document whose tables are of the wrong kind, arrays of tables, dotted keys."""
    lines = draw(st.lists(STRUCTURE_LINES, min_size=1, max_size=4))
    lines += [draw(experiment_doc())] if draw(st.booleans()) else []
    return "\n".join(draw(st.permutations(lines))).encode()


@st.composite
def hostile_bytes(draw: st.DrawFn) -> bytes:
    """Random binary, a document in another encoding, cut short, or with a byte changed."""
    doc = draw(experiment_doc())
    cut = draw(st.integers(0, max(0, len(doc.encode()) - 1)))
    return draw(st.one_of(
        st.binary(max_size=300),
        st.sampled_from(["latin-1", "utf-16", "utf-32", "cp1252", "utf-8-sig"]).map(
            lambda enc: doc.encode(enc, errors="replace")),
        st.just(doc.encode()[:cut]),
        st.builds(lambda b: doc.encode()[:cut] + b + doc.encode()[cut:],
                  st.sampled_from([b"\x00", b"\xff", b"\r", b"\x1b", b"\xc3", b"\"", b"["])),
    ))


# ---------------------------------------------------------------- -p pairs

P_SPECIAL = ("repetitions", "au_bar", "dlio")
P_VALUE_TEXT = st.one_of(
    st.sampled_from(["1", "0", "-5", "100", "1gbit", "2gbit", "1e-300", "nan", "inf", "true",
                     "false", "auto", "4.2", "tuned", "default", "raw", "record", "3000",
                     "40075", "40076", "1e308", "", " ", "4096", "1048576", "9" * 5000,
                     "0x10", "1_000", "１", "1,2", "4.1,4.2", "thread"]),
    st.sampled_from([str(p) for p in sorted(MLPERF.glob("*.yaml"))]),
    st.text(max_size=20).filter(lambda s: "\0" not in s))


def _p_value(key: str) -> st.SearchStrategy[str]:
    """Text for -p KEY=: what the knob allows (as text) or anything."""
    d = _dim_of(key)
    allowed = valid_value(d).map(_as_text) if d is not None and d.name != "mount" \
        else st.nothing()
    return st.one_of(allowed, allowed, P_VALUE_TEXT)


def _as_text(v: Any) -> str:
    """A TOML value as -p text: true/false, numbers, names joined by commas."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return ",".join(v)
    return repr(v) if isinstance(v, float) else str(v)


@st.composite
def p_pair(draw: st.DrawFn) -> str:
    """One KEY=VALUE (half the time), or a malformed pair."""
    key = draw(st.one_of(st.sampled_from(KNOB_KEYS), st.sampled_from(KNOB_KEYS),
                         st.sampled_from(FIBRE_KEYS), st.sampled_from(P_SPECIAL), IDENT,
                         st.text(max_size=12).filter(lambda s: "\0" not in s)))
    value = draw(_p_value(key))
    return draw(st.one_of(st.just(f"{key}={value}"), st.sampled_from(
        [f" {key} = {value} ", key, f"={value}", f"{key}=={value}", f"{key}={value}="])))


@st.composite
def p_command(draw: st.DrawFn) -> list[str]:
    """`demo --check` or `run SHIPPED.toml --check` with -p pairs (repeated keys too)."""
    pairs = draw(st.lists(p_pair(), min_size=1, max_size=3))
    if draw(st.booleans()):
        pairs.append(draw(st.sampled_from(pairs)))
    head = draw(st.one_of(st.just(["demo", "--check"]), st.sampled_from(SHIPPED).map(
        lambda f: ["run", str(f), "--check"])))
    return head + [x for pair in pairs for x in ("-p", pair)]


# ---------------------------------------------------------------- DLIO documents

DLIO_SECTIONS = {
    "dataset": {"data_folder": st.text(max_size=10), "format": st.sampled_from(
        ["npz", "tfrecord", "hdf5", "jpeg"]), "num_files_train": st.integers(0, 10**6),
        "num_samples_per_file": st.integers(0, 10**5), "record_length_bytes": st.one_of(
            st.integers(0, 2**40), st.floats(0, 1e12)),
        "record_length_bytes_stdev": st.floats(0, 1e9), "num_subfolders_train": st.integers()},
    "reader": {"data_loader": st.sampled_from(["pytorch", "tensorflow", "dali"]),
               "batch_size": st.integers(0, 10**6), "read_threads": st.integers(0, 1024),
               "prefetch_size": st.integers(0, 4096), "file_shuffle": st.sampled_from(
                   ["off", "seed", "random", True, False, "on"]),
               "sample_shuffle": st.sampled_from(["off", "seed", "random", True, "x"]),
               "transfer_size": st.integers(0, 2**30), "odirect": st.booleans()},
    "train": {"epochs": st.integers(0, 100), "computation_time": st.one_of(
        st.floats(0, 100), st.fixed_dictionaries({"mean": st.floats(0, 10)}),
        st.dictionaries(IDENT, SCALARS, max_size=2)), "seed": st.integers()},
    "metric": {"au": st.one_of(st.floats(0, 1.5), st.sampled_from([0.9, 1, 0, 1e-300]))},
    "workflow": {"train": st.booleans(), "checkpoint": st.booleans(),
                 "generate_data": st.booleans(), "evaluation": st.booleans()},
}
YAML_SCALARS = st.one_of(HOSTILE_INTS, HOSTILE_FLOATS, st.text(max_size=10), st.booleans(),
                         st.none())
YAML_ANY = st.recursive(YAML_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.one_of(IDENT, HOSTILE_INTS), inner,
                                                 max_size=3)), max_leaves=8)


@st.composite
def dlio_doc(draw: st.DrawFn) -> dict[str, Any]:
    """A DLIO workload: its real sections and fields, plausible values or hostile ones."""
    doc: dict[Any, Any] = {}
    for section in draw(st.lists(st.sampled_from(sorted(DLIO_SECTIONS) + ["checkpoint",
                                                                          "model", "x"]),
                                 max_size=6, unique=True)):
        fields = DLIO_SECTIONS.get(section, {})
        keys = draw(st.lists(st.one_of(st.sampled_from(sorted(fields) or ["name"]), IDENT),
                             max_size=6, unique=True))
        doc[section] = {k: draw(st.one_of(fields.get(k, YAML_ANY), YAML_ANY)) for k in keys}
    if draw(st.booleans()):  # most configs train: reach the fields past the workflow check
        doc.setdefault("workflow", {})["train"] = True
    return doc


def dlio_text(doc: Any) -> str:
    """A document as YAML (nan and inf as .nan and .inf)."""
    return yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)


LAUGHS = ("a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
    for p, c in zip("abcdefgh", "bcdefghi")) + "reader: {batch_size: *i}\n")
YAML_SPECIALS = st.sampled_from([
    "", "---\n", "[", "{", "- 1\n- 2\n", "reader: [1, 2]\n", "reader:\n  batch_size: 1e999\n",
    "reader:\n  batch_size: " + "9" * 5000 + "\n", "? [1, 2]\n: 3\n", "1: 2\n",
    "reader: {batch_size: .nan}\n", "train: {computation_time: {mean: .inf}}\n",
    "train: {computation_time: {mean: [1]}}\n", "metric: {au: .nan}\n", "!!python/object:os.system {}\n",
    "reader: !!binary aGVsbG8=\n", "a: *undefined\n", "\t\x00\x01", "%YAML 9.9\n---\nx: 1\n",
    "[" * 3000 + "]" * 3000, "{a: " * 3000 + "1" + "}" * 3000, "- " * 2000 + "x\n",
    "reader:\n  batch_size: 2\n  batch_size: 3\n", LAUGHS,
    "dataset: {record_length_bytes: 1e308}\nworkflow: {train: true}\n",
    "reader: {transfer_size: " + "1" * 4000 + "}\n"])


@st.composite
def dlio_bytes(draw: st.DrawFn) -> bytes:
    """A DLIO config: a generated one, a hostile one, or raw bytes."""
    return draw(st.one_of(
        dlio_doc().map(dlio_text).map(str.encode), dlio_doc().map(dlio_text).map(str.encode),
        YAML_ANY.map(dlio_text).map(str.encode), YAML_SPECIALS.map(str.encode),
        st.text(max_size=80).map(str.encode), st.binary(max_size=80)))


# ---------------------------------------------------------------- trace files

TRACE_FILE = REPO / "traces" / "example-loader.trace"
_TRACE_LINES = TRACE_FILE.read_text().splitlines()
TRACE_HEAD: dict[str, Any] = json.loads(_TRACE_LINES[0])
TRACE_EVENTS: list[list[Any]] = [json.loads(line) for line in _TRACE_LINES[1:41]]
TRACE_COLUMNS: list[str] = TRACE_HEAD["columns"]
TRACE_OPS = ("open", "read", "pread", "close")
TRACE_MAX = 2**63 - 1  # offsets, sizes, pids: what the kernel takes (off_t)
NAME_MAX, PATH_MAX = 255, 4096  # bytes: the longest name and path Linux can spell
TRACE_EXPERIMENT = '[fixed]\nworkers = {workers}\n[workload]\ntrace = "t.trace"\n'

JSON_INTS = st.one_of(st.sampled_from([0, -1, 1, 2, 15, 16, 17, 2**31, 2**53 + 1, 2**63 - 1,
                                       2**63, -2**63, 10**30]),
                      st.integers(-10**40, 10**40))
JSON_SCALARS = st.one_of(JSON_INTS, HOSTILE_FLOATS, st.text(max_size=10), st.booleans(),
                         st.none())
JSON_ANY = st.recursive(JSON_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=8)
TRACE_PATHS = st.one_of(st.sampled_from([
    "../x", "/etc/passwd", "a/../../b", "..", ".", "", "a\0b", "./a", "a//b", "a/", "x/..",
    "a/./b", "//a", "\udcff", "\ud800", "é/ü.bin", "a\nb", " ", "~/x", "sample_000002.bin",
    "deep/er/file.bin", "a" * NAME_MAX, "a" * (NAME_MAX + 1), "/".join(["d" * 200] * 21)]),
    st.text(max_size=12))
HEADER_NEAR = {  # per header key, values that nearly pass
    "format": st.sampled_from(["apn-testbed-trace", "APN-TESTBED-TRACE", "apn-testbed", ""]),
    "version": st.sampled_from([1, 1.0, True, "1", 2, 0, -1, 2**64 + 1]),
    "columns": st.sampled_from([TRACE_COLUMNS, TRACE_COLUMNS[::-1], TRACE_COLUMNS[:-1],
                                TRACE_COLUMNS + ["x"], []]),
    "command": st.lists(st.one_of(st.text(max_size=8), JSON_SCALARS), max_size=3),
    "root": st.sampled_from(["/data", "data", "", "/"]),
}
# Text that keeps a trace what it was (CRLF, blank lines) and text that spoils it.
HUGE_LINES = st.builds(lambda pattern, n: pattern(n), st.sampled_from([
    lambda n: "[" * n, lambda n: " " * n, lambda n: '"' + "a" * n + '"', lambda n: "1" * n,
    lambda n: '[0,0,"read",0,3,0,' + "9" * n + ",1,1]"]), st.sampled_from([5000, 10**5, 2 * 10**6]))
SPOILERS = st.sampled_from([b"\xff", b"\x00", b"\xef\xbb\xbf", b"\r", b"{", b"]", b",", b"\xc3",
                            b"\x1e", b"\\"])


def _count(v: Any) -> bool:
    """A whole number the kernel takes (a bool is not one)."""
    return type(v) is int and 0 <= v <= TRACE_MAX


def _path_problem(rel: Any) -> tuple[str, bool] | None:
    """Why rel is not a file inside the data root (and whether only for its length: a
    known product bug), None when it is one."""
    if not isinstance(rel, str) or not rel or "\0" in rel or rel.startswith("/"):
        return f"file path {rel!r} is not a relative path", False
    try:
        spelt = [os.fsencode(part) for part in rel.split("/")]
    except UnicodeError:
        return f"file path {rel!r} cannot be spelt", False
    if any(part in (b"", b".", b"..") for part in spelt):
        return f"file path {rel!r} is not plain (., .., //)", False
    if len(os.fsencode(rel)) >= PATH_MAX or any(len(p) > NAME_MAX for p in spelt):
        return f"file path of {len(os.fsencode(rel))} bytes is too long to spell", True
    return None


def trace_problems(head: Any, events: list[Any]) -> list[tuple[str, str | None]]:
    """What makes a trace one the format (tracefile's docstring, read here apart from its
    reader) does not allow: (problem, the FOUND_BUGS key when the reader once was known to
    accept it, else None) each; empty when the trace is valid."""
    if not isinstance(head, dict) or head.get("format") != "apn-testbed-trace":
        return [("not an apn-testbed-trace header", None)]
    out: list[tuple[str, str | None]] = []
    missing = [k for k in ("format", "version", "command", "machine", "date", "root",
                           "columns", "files", "streams") if k not in head]
    if missing:
        return [(f"header lacks {missing}", None)]
    if head["version"] != 1:
        out.append((f"version {head['version']!r}", None))
    elif type(head["version"]) is not int:
        out.append((f"version {head['version']!r} is not the integer 1", "trace-version"))
    if head["columns"] != TRACE_COLUMNS:
        out.append(("columns", None))
    if not (isinstance(head["command"], list) and all(isinstance(a, str) for a in head["command"])
            and all(isinstance(head[k], str) for k in ("machine", "date", "root"))):
        out.append(("command, machine, date or root of the wrong type", None))
    files, streams = head["files"], head["streams"]
    if not (isinstance(files, list) and all(isinstance(f, list) and len(f) == 2 for f in files)):
        return out + [("files is not a list of pairs", None)]
    for rel, size in files:
        bad = _path_problem(rel)
        if bad:
            out.append((bad[0], "trace-long-name" if bad[1] else None))
        if not _count(size):
            out.append((f"file size {size!r}", None))
    if not (isinstance(streams, list) and all(isinstance(s, list) and len(s) == 2 and
                                              _count(s[0]) and _count(s[1]) for s in streams)):
        out.append(("streams is not a list of [pid, tid]", None))
        streams = []
    for n, row in enumerate(events, 2):
        if not isinstance(row, list) or len(row) != len(TRACE_COLUMNS):
            out.append((f"line {n}: not {len(TRACE_COLUMNS)} fields", None))
            continue
        fields = dict(zip(TRACE_COLUMNS, row))
        if not (isinstance(fields["op"], str) and fields["op"] in TRACE_OPS):
            out.append((f"line {n}: op {fields['op']!r}", None))
        bad = [c for c, v in fields.items() if c != "op" and not _count(v)]
        if bad:
            out.append((f"line {n}: {bad[0]} {fields[bad[0]]!r}", None))
        elif fields["stream"] >= len(streams) or fields["file"] >= len(files):
            out.append((f"line {n}: stream or file index not in the header", None))
    return out


def _json_line(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"))


@st.composite
def trace_file(draw: st.DrawFn) -> tuple[bytes, list[tuple[str, str | None]] | None]:
    """A trace made from the example's header and first events by a few changes to its
    header (keys gone, values of other types, paths out of the root, sizes past off_t),
    its events (wrong length, op, index, numbers) and its bytes (cut, other bytes,
    huge lines, other encodings): (its bytes, trace_problems of it, None when its bytes
    were spoilt and no one can say)."""
    head = json.loads(json.dumps(TRACE_HEAD))
    events = [list(e) for e in TRACE_EVENTS[:draw(st.integers(0, len(TRACE_EVENTS)))]]
    for _ in range(draw(st.integers(0, 3))):
        change = draw(st.sampled_from(["drop key", "header value", "file path", "file size",
                                       "add file", "stream", "event field", "event length",
                                       "event index", "event replaced", "event repeated"]))
        files = head.get("files") if isinstance(head.get("files"), list) else []
        pairs = [f for f in files if isinstance(f, list) and len(f) == 2]
        rows = [e for e in events if isinstance(e, list) and len(e) == len(TRACE_COLUMNS)]
        if change == "drop key":
            head.pop(draw(st.sampled_from(sorted(TRACE_HEAD))), None)
        elif change == "header value":
            key = draw(st.sampled_from(sorted(TRACE_HEAD) + ["extra"]))
            head[key] = draw(st.one_of(HEADER_NEAR.get(key, JSON_ANY), JSON_ANY))
        elif change == "file path" and pairs:
            draw(st.sampled_from(pairs))[0] = draw(TRACE_PATHS)
        elif change == "file size" and pairs:
            draw(st.sampled_from(pairs))[1] = draw(st.one_of(JSON_INTS, JSON_SCALARS))
        elif change == "add file" and isinstance(head.get("files"), list):
            head["files"].append([draw(TRACE_PATHS), draw(st.one_of(st.integers(0, 2**20),
                                                                    JSON_INTS))])
        elif change == "stream" and isinstance(head.get("streams"), list):
            head["streams"].append(draw(st.one_of(st.lists(JSON_INTS, min_size=2, max_size=2),
                                                  JSON_ANY)))
        elif change == "event field" and rows:
            row, i = draw(st.sampled_from(rows)), draw(st.integers(0, len(TRACE_COLUMNS) - 1))
            row[i] = draw(st.one_of(st.sampled_from(TRACE_OPS), st.text(max_size=6))
                          if TRACE_COLUMNS[i] == "op" else st.one_of(JSON_INTS, JSON_SCALARS))
        elif change == "event length" and rows:
            row = draw(st.sampled_from(rows))
            row[:] = (row + draw(st.lists(JSON_SCALARS, max_size=3)))[:draw(st.integers(0, 11))]
        elif change == "event index" and rows:
            column = draw(st.sampled_from(["stream", "file"]))
            n = len(files) if column == "file" else len(head.get("streams") or [])
            draw(st.sampled_from(rows))[TRACE_COLUMNS.index(column)] = draw(
                st.sampled_from([max(0, n - 1), n, n + 1, 2**31, TRACE_MAX]))
        elif change == "event replaced" and events:
            events[draw(st.integers(0, len(events) - 1))] = draw(JSON_ANY)
        elif change == "event repeated" and events:
            events += [draw(st.sampled_from(events))] * draw(st.sampled_from([1, 1000, 20000]))
    text = "\n".join([_json_line(head)] + [_json_line(e) for e in events]) + "\n"
    same = draw(st.sampled_from(["as it is", "as it is", "crlf", "blank lines"]))
    text = text.replace("\n", "\r\n") if same == "crlf" else \
        text.replace("\n", "\n\n  \n") if same == "blank lines" else text
    data = text.encode()
    spoil = draw(st.sampled_from(["no"] * 5 + ["cut", "byte", "huge line", "encoding",
                                               "bytes"]))
    if spoil == "no":
        return data, trace_problems(head, events)
    at = draw(st.integers(0, len(data)))
    return draw({
        "cut": st.just(data[:at]),
        "byte": SPOILERS.map(lambda b: data[:at] + b + data[at:]),
        "huge line": HUGE_LINES.map(lambda line: data + line.encode() + b"\n"),
        "encoding": st.sampled_from(["utf-16", "utf-32", "latin-1"]).map(
            lambda enc: text.replace("sample", "samplé").encode(enc)),
        "bytes": st.one_of(st.just(b""), st.just(b"\n"), st.binary(max_size=200)),
    }[spoil]), None


# ---------------------------------------------------------------- checkpoint configs

CHECKPOINT_YAMLS = {p.name: yaml.safe_load(p.read_text())
                    for p in sorted(MLPERF.glob("llama3_*.yaml"))}
MODEL_COUNTS = ("num_layers", "transformer.vocab_size", "transformer.hidden_size",
                "transformer.ffn_hidden_size", "transformer.num_attention_heads",
                "transformer.num_kv_heads", "parallelism.tensor", "parallelism.pipeline")
DTYPES = ("int8", "uint8", "fp16", "bf16", "fp32", "fp64")  # DLIO's
HUGE = 10**30
YEAR_S = 365 * 86_400  # the longest interval between checkpoints a job may ask for
COUNT_VALUES = st.one_of(st.sampled_from([0, -1, 1, 2, 3, 7, 8, 16, 32, 64, 126, 4095, 4097,
                                          10**5, 10**6, 10**9, HUGE, 2**63, 10**200, 10**400]),
                         st.integers(-2, 130), YAML_SCALARS)
MODEL_VALUES: dict[str, st.SearchStrategy[Any]] = {
    **{k: COUNT_VALUES for k in MODEL_COUNTS},
    "parallelism.zero_stage": st.one_of(st.integers(-1, 4), st.sampled_from([3.0, "3"]),
                                        YAML_SCALARS),
    "model_datatype": st.one_of(st.sampled_from(DTYPES + ("fp8", "FP16", "", "int4")),
                                YAML_SCALARS),
    "optimizer_datatype": st.one_of(st.sampled_from(DTYPES + ("fp8", "")), YAML_SCALARS),
    "name": st.one_of(st.sampled_from(["llama_8b", "llama_70b", "llama_405b", "llama_1t",
                                       "mine", "", "llama_8B"]), YAML_SCALARS),
    "type": st.sampled_from(["transformer", "cnn", None, 5]),
    "parallelism.data": st.sampled_from([1, 2]), "transformer.bogus": YAML_SCALARS,
}
CHECKPOINT_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "time_between_checkpoints": st.one_of(st.sampled_from(
        [-1, -0.0, 0, 0.5, 5, 1e308, HUGE, 5e-324, True, False, "5", None, [5]]),
        HOSTILE_FLOATS),
    **{k: st.one_of(st.sampled_from([-1, 0, 1, 2, 10, 11, 100, 10**6, HUGE, True, 2.5, 10.0,
                                     math.nan, math.inf, "10", None]), st.integers(-2, 20))
       for k in ("num_checkpoints_write", "num_checkpoints_read")},
    "fsync": st.sampled_from([True, False, 1, 0, "True", None]),
    "checkpoint_folder": st.sampled_from(["x", "../..", "/abs", "", 5, None, "a" * 5000]),
    "bogus": YAML_SCALARS,
}
SCALE_TEXT = st.one_of(st.sampled_from(["1", "0.5", "0.001", "1e-6", "1e-7", "0", "-1", "nan",
                                        "inf", "2", "1e-300", "１", "1e308"]),
                       st.floats(1e-6, 1).map(repr))
WORKERS_TEXT = st.sampled_from(["1", "2", "3", "7", "8", "9", "64", "200", "256", "1024",
                                "1025", "0"])


def _put(doc: dict[Any, Any], dotted: str, value: Any) -> None:
    """doc[a][b] = value, the section made a mapping when it was not one."""
    *path, last = dotted.split(".")
    at = doc
    for k in path:
        if not isinstance(at.get(k), dict):
            at[k] = {}
        at = at[k]
    at[last] = value


def _drop(doc: dict[Any, Any], dotted: str) -> None:
    *path, last = dotted.split(".")
    at: Any = doc
    for k in path:
        at = at.get(k) if isinstance(at, dict) else None
    if isinstance(at, dict):
        at.pop(last, None)


@st.composite
def checkpoint_config(draw: st.DrawFn) -> dict[Any, Any]:
    """A llama3 checkpoint config with a few of its model and checkpoint fields given
    other values (0, negative, huge, NaN, inf, bool, text, an unknown datatype), dropped,
    or its sections replaced."""
    doc = json.loads(json.dumps(CHECKPOINT_YAMLS[draw(st.sampled_from(sorted(CHECKPOINT_YAMLS)))]))
    for _ in range(draw(st.integers(0, 4))):
        section = draw(st.sampled_from(["model", "model", "checkpoint", "checkpoint",
                                        "drop", "section", "workflow"]))
        if section == "model":
            key = draw(st.sampled_from(sorted(MODEL_VALUES)))
            _put(doc, f"model.{key}", draw(MODEL_VALUES[key]))
        elif section == "checkpoint":
            key = draw(st.sampled_from(sorted(CHECKPOINT_VALUES)))
            _put(doc, f"checkpoint.{key}", draw(CHECKPOINT_VALUES[key]))
        elif section == "drop":
            _drop(doc, draw(st.sampled_from([f"model.{k}" for k in MODEL_VALUES] +
                                            [f"checkpoint.{k}" for k in CHECKPOINT_VALUES])))
        elif section == "section":
            doc[draw(st.sampled_from(["model", "checkpoint", "workflow",
                                      "model.transformer", "model.parallelism"]))] = \
                draw(YAML_ANY)
        else:
            _put(doc, f"workflow.{draw(st.sampled_from(['train', 'checkpoint']))}",
                 draw(st.one_of(st.booleans(), YAML_SCALARS)))
    return doc


def _model_values(model: dict[Any, Any]) -> dict[str, Any]:
    """The model section's fields one level deep (parallelism.tensor, ...), over DLIO's
    defaults for those it leaves out (checkpoint_size.ModelShape's)."""
    from testbed.workload.checkpoint_size import ModelShape, _flatten
    out: dict[str, Any] = {f: getattr(ModelShape, f, None) for f in (
        "name", "num_layers", "hidden_size", "ffn_hidden_size", "vocab_size", "num_attention_heads",
        "num_kv_heads", "model_datatype", "optimizer_datatype", "tensor", "pipeline",
        "zero_stage")}
    out = {("transformer." if k in ("hidden_size", "ffn_hidden_size", "vocab_size",
                                    "num_attention_heads", "num_kv_heads") else
            "parallelism." if k in ("tensor", "pipeline", "zero_stage") else "") + k: v
           for k, v in out.items()}
    return {**out, **_flatten(model)}


def checkpoint_problem(doc: Any) -> str | None:
    """A rule of DLIO's (or of the file's types) a checkpoint-only config breaks, that
    any reader must refuse it for; None when it breaks none of these (it may still be
    refused for another)."""
    workflow = doc.get("workflow") if isinstance(doc, dict) else None
    if not (isinstance(workflow, dict) and workflow.get("checkpoint") is True
            and workflow.get("train") is not True):
        return None  # not checkpoint-only: test_dlio_configs covers the rest
    model, ck = doc.get("model"), doc.get("checkpoint")
    if not isinstance(model, dict):
        return "no model section"
    if not all(isinstance(model.get(s, {}), dict) for s in ("transformer", "parallelism")):
        return "model.transformer or model.parallelism is not a mapping"
    m = _model_values(model)
    for key in MODEL_COUNTS:
        if type(m[key]) is not int or m[key] < 1:
            return f"model.{key} = {m[key]!r}"
    zero = m["parallelism.zero_stage"]
    if type(zero) is not int or zero not in (0, 1, 2, 3):
        return f"zero_stage = {zero!r}"
    if m["model_datatype"] not in DTYPES or m["optimizer_datatype"] not in DTYPES:
        return "a datatype DLIO does not know"
    if m["num_layers"] < m["parallelism.pipeline"]:
        return "fewer layers than pipeline stages"
    if m["parallelism.pipeline"] > 1 and zero == 3:
        return "ZeRO-3 with pipeline parallelism"
    if not isinstance(ck, dict) or "num_checkpoints_write" not in ck:
        return "no checkpoint.num_checkpoints_write"
    writes, reads = ck["num_checkpoints_write"], ck.get("num_checkpoints_read", 0)
    if type(writes) is not int or writes < 1:
        return f"num_checkpoints_write = {writes!r}"
    if type(reads) is not int or not 0 <= reads <= writes:
        return f"num_checkpoints_read = {reads!r} (writes {writes})"
    interval = ck.get("time_between_checkpoints", 0)
    if type(interval) not in (int, float) or not 0 <= interval <= YEAR_S:
        return f"time_between_checkpoints = {interval!r}"
    if type(ck.get("fsync", False)) is not bool:
        return f"fsync = {ck['fsync']!r}"
    if type(ck.get("checkpoint_folder", "")) is not str:
        return f"checkpoint_folder = {ck['checkpoint_folder']!r}"
    return None


# Product bugs the properties found (2026-12-06), each fixed and kept as a regression
# (test_found_product_bugs_stay_fixed).
FOUND_BUGS = {
    "trace-version": "tracefile._header compares version == 1: true and 1.0 pass",
    "trace-long-name": "tracefile.safe_path takes names no file system can spell (> 255 B)",
    "trace-and-other": "parse._trace_file runs before apply_overrides: --dlio, -p dlio= and "
                       "-p workload= beside [workload] trace are accepted, one ignored",
    "checkpoint-ranks": "--check accepts tensor x pipeline not dividing the ranks; "
                        "memory_need_bytes then raises SpecError",
    "checkpoint-workers": "--check accepts more workers than the model's MLPerf ranks; "
                          "memory_need_bytes then raises SpecError (rank N not in 0..N-1)",
    "checkpoint-overflow": "DLIO bytes past 1e308: CheckpointJob.rank_files raises "
                           "OverflowError (int * float)",
    "checkpoint-layers": "memory_need_bytes costs O(num_layers x workers): num_layers = 1e9 "
                         "is accepted and the run's memory check never ends",
    "checkpoint-check-cost": "`--check` of a checkpoint plan costs O(workers^2) (resolve."
                             "_other_Bps -> explain.inputs -> topology.fibre_paths per worker):"
                             " 2.5 s of CPU at 256 workers, 51 s at 1024 (llama3_1t's ranks)",
}


# ---------------------------------------------------------------- pcaps

PCAP_MAGICS = {"us": 0xA1B2C3D4, "ns": 0xA1B23C4D}
LINKTYPES = st.one_of(st.sampled_from([1, 0, 101, 113, 228, 276, 147]), st.integers(0, 2**32 - 1))


def pcap_header(magic: int = PCAP_MAGICS["us"], linktype: int = 1, snaplen: int = 65535,
                endian: str = "<", version: tuple[int, int] = (2, 4)) -> bytes:
    """A pcap global header."""
    return struct.pack(endian + "IHHiIII", magic, *version, 0, 0, snaplen, linktype)


def pcap_record(data: bytes, t: int = 1, incl: int | None = None, orig: int | None = None,
                endian: str = "<") -> bytes:
    """A pcap record: its header (lengths may lie) and the bytes."""
    incl = len(data) if incl is None else incl
    return struct.pack(endian + "IIII", t, 0, incl, len(data) if orig is None else orig) + data


def _nfs_frame(payload: bytes, to_server: bool, seq: int, syn: bool) -> bytes:
    """An Ethernet/IPv4/TCP frame on the NFS port with the given payload (built by hand:
    scapy would take most of the example's time; checksums are not checked)."""
    sport, dport = (800, 2049) if to_server else (2049, 800)
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, 0, 5 << 4, 0x02 if syn else 0x18,
                      65535, 0, 0)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp) + len(payload), 1, 0, 64, 6, 0,
                     bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))
    return b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00" + ip + tcp + payload


RPC_CALL = struct.pack("!IIIIIIIIIIII", 0x80000000 | 40, 7, 0, 2, 100003, 3, 6, 0, 0, 0, 0, 0)


@st.composite
def nfs_records(draw: st.DrawFn) -> list[bytes]:
    """Frames of one NFS connection: RPC records (a READ call, its reply) with lengths,
    marks and bodies that may lie."""
    frames = [_nfs_frame(b"", True, 1000, True)] if draw(st.booleans()) else []
    seq = 1001
    for _ in range(draw(st.integers(1, 4))):
        body = draw(st.one_of(st.just(RPC_CALL), st.binary(max_size=64),
                              st.builds(lambda m, b: struct.pack("!I", m) + b,
                                        st.integers(0, 2**32 - 1), st.binary(max_size=48))))
        to_server = draw(st.booleans())
        frames.append(_nfs_frame(body, to_server, draw(st.one_of(st.just(seq),
                                                                 st.integers(0, 2**32 - 1))),
                                 False))
        seq += len(body)
    return frames


@st.composite
def pcap_bytes(draw: st.DrawFn) -> bytes:
    """A capture: truncated headers, lying record lengths, other link types, random
    bytes, a good header then garbage, pcapng, frames of NFS that lie."""
    endian = draw(st.sampled_from(["<", ">"]))
    header = pcap_header(draw(st.sampled_from(sorted(PCAP_MAGICS.values()))),
                         draw(LINKTYPES), draw(st.sampled_from([0, 64, 65535, 2**32 - 1])),
                         endian, draw(st.sampled_from([(2, 4), (1, 0), (9, 9)])))
    frames = draw(nfs_records())
    records = b"".join(pcap_record(f, i + 1, endian=endian) for i, f in enumerate(frames))
    lying = pcap_record(draw(st.binary(max_size=64)), 1, draw(st.sampled_from(
        [0, 1, 2**31, 2**32 - 1, 70000])), draw(st.integers(0, 2**32 - 1)), endian)
    good = pcap_header(endian=endian) + records
    return draw(st.one_of(
        st.just(good), st.just(header + records), st.just(good + lying),
        st.integers(0, len(good)).map(lambda n: good[:n]),
        st.binary(max_size=200), st.builds(lambda b: header + b, st.binary(max_size=200)),
        st.builds(lambda b: b"\x0a\x0d\x0d\x0a" + b, st.binary(max_size=200)),
        st.just(_pcapng(frames)), st.integers(0, 200).map(lambda n: _pcapng(frames)[:n])))


def _pcapng(frames: list[bytes]) -> bytes:
    """The frames as pcapng (Wireshark's and dumpcap's format): a section header, one
    Ethernet interface, an enhanced packet block per frame."""
    def block(kind: int, body: bytes) -> bytes:
        body += b"\0" * (-len(body) % 4)
        return struct.pack("<II", kind, len(body) + 12) + body + struct.pack("<I", len(body) + 12)
    out = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    out += block(1, struct.pack("<HHI", 1, 0, 65535))
    for i, f in enumerate(frames):
        out += block(6, struct.pack("<IIIII", 0, 0, i + 1, len(f), len(f)) + f)
    return out


# ---------------------------------------------------------------- the properties

DEEP_ARRAY = "x = " + "[" * 3000 + "]" * 3000 + "\n"
DEEP_TABLE = "[workload]\nx = " + "{a=" * 3000 + "1" + "}" * 3000 + "\n"
SEARCH_200 = ("[search]\nknob = 'distance_km'\nrange = [0, 3000]\ntarget = 'au_pct >= 200'\n"
              "tolerance = 100\n")


@given(doc=experiment_doc())
@example(doc=DEEP_ARRAY)
@example(doc=DEEP_TABLE)
@example(doc='[fixed]\nrate = "1kbit"\n')
@example(doc="[fixed]\nrate = 1e-300\n")
@example(doc='[fixed]\nrate = "0mbit"\n')
@example(doc="[sweep]\ndistance_km = [0.0, -0.0]\n")
@example(doc=SEARCH_200)
@example(doc="")
@example(doc="[mounts.tuned]\nnocto = " + "1" * 4301 + "\n")  # past int()'s digit limit
@example(doc="[dataset]\nfile_kib = 4194304\n[workload]\nreaders = 256\n")  # model cost
def test_experiment_files(sandbox: Sandbox, doc: str) -> None:
    """Experiment files of valid structure with any values: 0 or one line and 2."""
    sandbox.check(["run", str(sandbox.write("x.toml", doc.encode())), "--check"])


@given(content=st.one_of(hostile_structure(), hostile_bytes()))
@example(content=b"")
@example(content=b"[fixed\nrate = 1")
@example(content=b"[[sweep]]\ndistance_km = [1]\n")
@example(content=b"au_bar = " + b"1" * 400 + b"\n")  # an int past the float range
@example(content=b"# " + b"x" * (300 << 10) + b"\n")  # too large to parse in the budget
def test_hostile_structure_and_bytes(sandbox: Sandbox, content: bytes) -> None:
    """Tables of the wrong kind, arrays of tables, dotted keys; binary, other encodings,
    truncated TOML: 0 or one line and 2."""
    sandbox.check(["run", str(sandbox.write("x.toml", content)), "--check"])


@given(argv=p_command())
@example(argv=["demo", "--check", "-p", "rate=1gbit", "-p", "rate=2gbit"])
@example(argv=["demo", "--check", "-p", "fibre.*.loss_pct=100"])
@example(argv=["demo", "--check", "-p", "distance_km=-5"])
@example(argv=["run", str(EXPERIMENTS / "demo.toml"), "--check", "-p",
               "fibre.wan.distance_km=40075"])
@example(argv=["run", str(EXPERIMENTS / "session-slots.toml"), "--check", "-p",
               "repetitions=1"])
@example(argv=["run", str(EXPERIMENTS / "poc-quick.toml"), "--check", "-p", "workers=1024"])
@example(argv=["run", str(EXPERIMENTS / "two-sites.toml"), "--check", "-p", "workers=1024"])
@example(argv=["demo", "--check", "-p", "workers=1024", "-p", "time_scale=auto"])
def test_params(sandbox: Sandbox, argv: list[str]) -> None:
    """-p KEY=VALUE on `demo --check` and `run FILE --check`: 0 or one line and 2."""
    sandbox.fresh()
    sandbox.check(argv)


@given(content=dlio_bytes(), how=st.sampled_from(["--dlio", "[workload] dlio"]))
@example(content=LAUGHS.encode(), how="--dlio")
@example(content=b"[" * 3000 + b"]" * 3000, how="--dlio")
@example(content=b"", how="[workload] dlio")
@example(content=b"reader: {transfer_size: " + b"1" * 4000 + b"}\n", how="--dlio")
@example(content=b"metric:\n  A: 0\n  au: 2.4803737592147435e-77\n", how="--dlio")
def test_dlio_configs(sandbox: Sandbox, content: bytes, how: str) -> None:
    """DLIO workload configs given by --dlio or named by an experiment file."""
    yaml_file = sandbox.write("job.yaml", content)
    if how == "--dlio":
        sandbox.check(["run", "--dlio", str(yaml_file), "--check"])
        return
    plan = sandbox.inputs / "x.toml"
    plan.write_text(toml_doc({}, [("fixed", {"workers": 1}),
                                  ("workload", {"dlio": yaml_file.name})]))
    sandbox.check(["run", str(plan), "--check"])


SITUATIONS = ("missing", "directory", "fifo", "long name", "long path", "empty",
              "symlink loop", "dangling symlink", "not utf-8 name", "symlink to a directory",
              *(("no search permission",) if os.geteuid() != 0 else ()))  # root searches all
# The commands that read a path, and the exit statuses allowed when the path's file is a
# good experiment file (a name that is not UTF-8 but a file all the same).
PATH_COMMANDS = {"run": (["run", "{}", "--check"], (0, 2)),
                 "run --dlio": (["run", "--dlio", "{}", "--check"], (2,)),
                 "analyse": (["analyse", "{}"], (2,))}


def _situation(box: Sandbox, kind: str, name: str) -> Path:
    """A path that is not a readable experiment file, in one of SITUATIONS."""
    root = box.fresh()
    make = {
        "missing": lambda p: p,
        "directory": lambda p: (p.mkdir(), p)[1],
        "fifo": lambda p: (os.mkfifo(p), p)[1],
        "long name": lambda p: p.with_name("a" * 300 + ".toml"),
        "long path": lambda p: Path(str(root) + "/" + "/".join(["b" * 200] * 25) + ".toml"),
        "empty": lambda p: (p.write_bytes(b""), p)[1],
        "no search permission": lambda p: _locked(root, p),
        "symlink loop": lambda p: (os.symlink(p, p), p)[1],
        "dangling symlink": lambda p: (os.symlink(root / "nowhere", p), p)[1],
        "not utf-8 name": lambda p: _written(p.with_name(os.fsdecode(b"\xff\xfe.toml"))),
        "symlink to a directory": lambda p: (os.symlink(root, p), p)[1],
    }
    return make[kind](root / name)


def _locked(root: Path, p: Path) -> Path:
    """A good experiment file inside a folder without search permission."""
    folder = root / "locked"
    folder.mkdir()
    target = _written(folder / p.name)
    os.chmod(folder, 0)
    return target


def _written(p: Path) -> Path:
    """A copy of the demo at p."""
    p.write_bytes((EXPERIMENTS / "demo.toml").read_bytes())
    return p


@given(kind=st.sampled_from(SITUATIONS), name=st.one_of(st.just("x.toml"), IDENT),
       command=st.sampled_from(sorted(PATH_COMMANDS)))
@example(kind="missing", name="x.toml", command="run")
@example(kind="directory", name="x.toml", command="run")
@example(kind="fifo", name="x.toml", command="run")
@example(kind="long name", name="x.toml", command="run")
@example(kind="empty", name="x.toml", command="run")
@example(kind="long name", name="x.toml", command="analyse")  # stat() raised ENAMETOOLONG
@example(kind="long name", name="x.toml", command="run --dlio")
def test_paths(sandbox: Sandbox, kind: str, name: str, command: str) -> None:
    """`run PATH --check`, `run --dlio PATH --check` and `analyse PATH` where PATH is not
    a readable file of its kind: one line and 2."""
    path = _situation(sandbox, kind, name)
    argv, good = PATH_COMMANDS[command]
    codes = good if kind == "not utf-8 name" else (2,)
    try:
        sandbox.check([a.replace("{}", str(path)) for a in argv], codes)
    finally:
        os.chmod(sandbox.inputs, 0o755)
        if (sandbox.inputs / "locked").exists():
            os.chmod(sandbox.inputs / "locked", 0o755)


ANALYSE_FLAGS = st.lists(st.sampled_from([["--rate", "1gbit"], ["--rtt-ms", "29.4"],
                                          ["--rate", "0kbit"], ["--rate", "fast"],
                                          ["--rtt-ms", "nan"], ["--csv", "IN/rpcs.csv"],
                                          ["--png", "IN/x.png"], ["--csv", "IN/no/such/x.csv"],
                                          ["--png", "IN"], ["--png", "IN/x.bogus"],
                                          ["--csv", "IN/"], ["--png", ""]]), max_size=2)


@given(content=pcap_bytes(), flags=ANALYSE_FLAGS)
@example(content=pcap_header()[:10], flags=[])
@example(content=pcap_header() + pcap_record(b"\x00" * 60, incl=2**31), flags=[])
@example(content=pcap_header(linktype=101) + pcap_record(b"E" + b"\x00" * 40), flags=[])
@example(content=b"", flags=[])
@example(content=_pcapng([_nfs_frame(RPC_CALL, True, 1, False)]), flags=[])
@example(content=b"\n\r\r\n", flags=[])
@example(content=pcap_header() + pcap_record(b"\x02"), flags=[])
@example(content=pcap_header(), flags=[["--csv", "IN/no/such/x.csv"]])
def test_captures(sandbox: Sandbox, content: bytes, flags: list[list[str]]) -> None:
    """`testbed analyse PCAP`: 0 (a summary, zeros when it holds no NFS) or one line and 2."""
    pcap = sandbox.write("x.pcap", content)
    argv = ["analyse", str(pcap)] + [x.replace("IN", str(sandbox.inputs)) for f in flags
                                     for x in f]
    outputs = frozenset(Path(x).name for x in argv if x.endswith((".csv", ".png", ".bogus")))
    o = sandbox.check(argv, codes=(0, 1, 2), may_write=outputs)
    if o.code == 0:
        assert "rpcs" in o.out, _says(o, "no summary")


# ---------------------------------------------------------------- traces and checkpoints

def _memory_need(exp: Path, overrides: dict[str, str], budget_s: float) -> tuple[Any, float]:
    """runner.memory_need_bytes of the plan `testbed run EXP --check` accepted (what
    the run checks first, before building anything), and the CPU seconds it took."""
    from testbed.experiment.plan import plan as plan_mod
    from testbed.experiment.run import runner
    kinds.load_trace.cache_clear()  # by path: the sandbox reuses its names
    with cpu_budget.measured(None) as spent, \
            _watchdog(budget_s, HANG_WALL_S):
        need = runner.memory_need_bytes(plan_mod.load(exp, overrides))
    return need, spent[0]


def _need_is_finite(o: Outcome, exp: Path, overrides: dict[str, str],
                    budget_s: float = HANG_S) -> None:
    """An accepted plan's memory need: a finite number >= 0, in budget_s of CPU time."""
    try:
        need, cpu_s = _memory_need(exp, overrides, budget_s)
    except (Exception, Hang) as exc:  # noqa: BLE001  (any of them is the finding)
        raise AssertionError(_says(o, f"accepted, but memory_need_bytes raised "
                                      f"{type(exc).__name__}: {str(exc)[:300]}")) from exc
    _note(f"memory need in {'< 0.1' if cpu_s < 0.1 else '< 1' if cpu_s < 1 else '>= 1'} s CPU")
    assert isinstance(need, (int, float)) and not isinstance(need, bool) and \
        0 <= need < math.inf, _says(o, f"accepted, but its memory need is {need!r}")


def _trace_example(head: dict[str, Any] | None = None, extra: list[Any] | None = None,
                   raw: bytes | None = None) -> tuple[bytes, Any]:
    """A trace_file() value for @example: the example trace with header keys replaced
    and events added (or raw bytes, whose problems no one states)."""
    if raw is not None:
        return raw, None
    head = {**TRACE_HEAD, **(head or {})}
    events = TRACE_EVENTS + (extra or [])
    text = "\n".join([_json_line(head)] + [_json_line(e) for e in events]) + "\n"
    return text.encode(), trace_problems(head, events)


LONG_NAME = {"files": TRACE_HEAD["files"] + [["a" * (NAME_MAX + 1), 1]]}


@given(trace=trace_file(), workers=st.sampled_from([1, 4]))
@example(trace=_trace_example(), workers=1)
@example(trace=_trace_example({"version": True}), workers=1)  # FOUND_BUGS trace-version
@example(trace=_trace_example(LONG_NAME), workers=1)  # FOUND_BUGS trace-long-name
@example(trace=_trace_example({"files": [["../x", 1]]}), workers=1)
@example(trace=_trace_example({"files": [["/etc/passwd", 1]]}), workers=1)
@example(trace=_trace_example({"files": [["\ud800", 1]]}), workers=1)
@example(trace=_trace_example(extra=[[0, 0, "read", 16, 3, 0, 1, 1, 1]]), workers=1)
@example(trace=_trace_example(extra=[[0, 0, "read", 0, 3, 0, 2**63, 1, 1]]), workers=1)
@example(trace=_trace_example(raw=b""), workers=1)
@example(trace=_trace_example(raw=TRACE_FILE.read_bytes() + b"[" * 100_000 + b"\n"), workers=1)
@example(trace=_trace_example(raw=TRACE_FILE.read_bytes() + b"[0,0,\"read\",0,3,0," +
                              b"9" * 5000 + b",1,1]\n"), workers=1)
def test_trace_files(sandbox: Sandbox, trace: tuple[bytes, Any], workers: int) -> None:
    """[workload] trace naming a changed copy of the example trace: 0 or one line and 2;
    2 when the trace breaks the format, 0 when it keeps it; an accepted plan's memory
    need finite."""
    data, problems = trace
    exp = sandbox.write("x.toml", TRACE_EXPERIMENT.format(workers=workers).encode())
    (sandbox.inputs / "t.trace").write_bytes(data)
    kinds.load_trace.cache_clear()
    o = sandbox.check(["run", str(exp), "--check"])
    if problems is not None:
        event(f"trace {'valid' if not problems else 'invalid'}")
        assert o.code == 2 or not problems, \
            _says(o, f"accepted a trace the format does not allow: {problems[0][0]}")
        assert o.code == 0 or problems, _says(o, "refused a valid trace")
    if o.code == 0:
        _need_is_finite(o, exp, {})


OTHER_WORKLOADS = {  # a second workload beside [workload] trace: (tables, extra argv)
    "[workload] dlio": ([("workload", {"dlio": "{yaml}"})], []),
    "[workload] preset": ([("workload", {"preset": "unet3d-h100"})], []),
    "[fixed] workload": ([("fixed", {"workload": "unet3d-h100"})], []),
    "[sweep] workload": ([("sweep", {"workload": ["unet3d-h100"]})], []),
    "--dlio": ([], ["--dlio", "{yaml}"]),
    "-p dlio": ([], ["-p", "dlio={yaml}"]),
    "-p workload": ([], ["-p", "workload=unet3d-h100"]),
}


@pytest.mark.parametrize("other,config", [
    (other, config) for other in OTHER_WORKLOADS for config in ("unet3d_h100.yaml", "llama3_8b.yaml")
    if "{yaml}" in str(OTHER_WORKLOADS[other]) or config == "unet3d_h100.yaml"])
def test_trace_with_another_workload(sandbox: Sandbox, other: str, config: str) -> None:
    """[workload] trace beside a DLIO config or a workload preset, from the file or the
    command line: one line and 2 (a plan runs one workload)."""
    tables, argv = OTHER_WORKLOADS[other]
    yaml_path = str(MLPERF / config)
    workload = {"trace": "t.trace"}
    rest = []
    for name, body in tables:
        body = {k: v.replace("{yaml}", yaml_path) if isinstance(v, str) else v
                for k, v in body.items()}
        if name == "workload":
            workload.update(body)
        else:
            rest.append((name, body))
    fixed = [t for t in rest if t[0] == "fixed"]
    doc = toml_doc({}, [("fixed", {"workers": 1, **(fixed[0][1] if fixed else {})}),
                        *[t for t in rest if t[0] != "fixed"], ("workload", workload)])
    exp = sandbox.write("x.toml", doc.encode())
    shutil.copy(TRACE_FILE, sandbox.inputs / "t.trace")
    sandbox.check(["run", str(exp), "--check", *[a.replace("{yaml}", yaml_path)
                                                 for a in argv]], codes=(2,))


@given(doc=checkpoint_config(), how=st.sampled_from(["--dlio", "[workload] dlio"]),
       scale=st.one_of(st.none(), SCALE_TEXT), workers=st.one_of(st.none(), WORKERS_TEXT))
@example(doc=CHECKPOINT_YAMLS["llama3_1t.yaml"], how="--dlio", scale="1", workers="200")
@example(doc=CHECKPOINT_YAMLS["llama3_405b.yaml"], how="[workload] dlio", scale="1e-6",
         workers=None)
@example(doc={**CHECKPOINT_YAMLS["llama3_8b.yaml"], "checkpoint": {
    "num_checkpoints_write": 1, "num_checkpoints_read": 2}}, how="--dlio", scale=None,
    workers=None)
@example(doc={**CHECKPOINT_YAMLS["llama3_8b.yaml"], "checkpoint": {"fsync": True}},
         how="--dlio", scale=None, workers=None)
@example(doc={**CHECKPOINT_YAMLS["llama3_8b.yaml"], "checkpoint": {
    "num_checkpoints_write": 2, "time_between_checkpoints": math.nan}}, how="--dlio",
    scale=None, workers=None)
@example(doc={**CHECKPOINT_YAMLS["llama3_8b.yaml"], "checkpoint": {
    "num_checkpoints_write": HUGE}}, how="--dlio", scale="1e-6", workers="8")
@example(doc=CHECKPOINT_YAMLS["llama3_8b.yaml"], how="--dlio", scale=None,
         workers="9")  # FOUND_BUGS checkpoint-workers
def test_checkpoint_configs(sandbox: Sandbox, doc: dict[Any, Any], how: str,
                            scale: str | None, workers: str | None) -> None:
    """A changed llama3 checkpoint config by --dlio or [workload] dlio, with -p
    workload_scale= and -p workers=: 0 or one line and 2; 2 when it breaks one of DLIO's
    rules; an accepted plan's memory need finite and >= 0."""
    config = sandbox.write("c.yaml", dlio_text(doc).encode())
    params = [f"{k}={v}" for k, v in (("workload_scale", scale), ("workers", workers))
              if v is not None]
    if how == "--dlio":
        exp, argv, extra = DLIO_FILE, ["run", "--dlio", str(config)], {"dlio": str(config)}
    else:
        exp, argv, extra = sandbox.inputs / "x.toml", [str(sandbox.inputs / "x.toml")], {}
        exp.write_text(toml_doc({}, [("fixed", {"workers": 1}),
                                     ("workload", {"dlio": config.name})]))
        argv = ["run", *argv]
    o = sandbox.check([*argv, "--check", *[x for p in params for x in ("-p", p)]])
    problem = checkpoint_problem(doc)
    assert o.code == 2 or problem is None, _says(o, f"accepted a config that breaks "
                                                    f"DLIO's rules: {problem}")
    if o.code != 0 or not (isinstance(doc.get("workflow"), dict)
                           and doc["workflow"].get("checkpoint") is True
                           and doc["workflow"].get("train") is not True):
        return  # refused, or a training config (test_dlio_configs)
    _need_is_finite(o, exp, {**parse_params(params), **extra})


def _llama(path: str, value: Any) -> bytes:
    """llama3_8b.yaml with one field (dotted) set."""
    doc = json.loads(json.dumps(CHECKPOINT_YAMLS["llama3_8b.yaml"]))
    _put(doc, path, value)
    return dlio_text(doc).encode()


KNOWN_CASES = {  # FOUND_BUGS key: (file name, its bytes, -p pairs)
    "trace-version": ("t.trace", _trace_example({"version": True})[0], []),
    "trace-long-name": ("t.trace", _trace_example(LONG_NAME)[0], []),
    "checkpoint-ranks": ("c.yaml", _llama("model.parallelism.tensor", 3), []),
    "checkpoint-workers": ("c.yaml", _llama("model.num_layers", 32), ["workers=9"]),
    "checkpoint-overflow": ("c.yaml", _llama("model.transformer.hidden_size", 10**200), []),
    "checkpoint-layers": ("c.yaml", _llama("model.num_layers", 10**9), []),
    "checkpoint-check-cost": ("c.yaml", dlio_text(CHECKPOINT_YAMLS["llama3_1t.yaml"]).encode(),
                              ["workers=1024"]),
}


@pytest.mark.parametrize("bug", list(KNOWN_CASES))
def test_found_product_bugs_stay_fixed(sandbox: Sandbox, bug: str) -> None:
    """The product bugs the properties found (FOUND_BUGS), each as the property checks it
    (a one-line refusal, or an accepted plan whose memory need takes under 2 s of CPU)."""
    name, content, params = KNOWN_CASES[bug]
    path = sandbox.write(name, content)
    if name.endswith(".trace"):
        exp = sandbox.inputs / "x.toml"
        exp.write_text(TRACE_EXPERIMENT.format(workers=1))
        argv, overrides = ["run", str(exp), "--check"], {}
    else:
        exp, argv = DLIO_FILE, ["run", "--dlio", str(path), "--check"]
        overrides = {**parse_params(params), "dlio": str(path)}
    try:
        o = sandbox.check([*argv, *[x for p in params for x in ("-p", p)]], hang_s=2.0)
    except Hang as exc:
        raise AssertionError(f"testbed {' '.join(argv)}: {exc}") from None
    if o.code == 0:
        assert not name.endswith(".trace"), _says(o, "accepted a trace the format refuses")
        _need_is_finite(o, exp, overrides, budget_s=2.0)


def test_every_run_draws_new_examples_from_its_printed_seed(pytestconfig):
    """The "ci" profile is not derandomized: every run draws new examples from its own
    seed (tests/conftest.py), the one its header prints and a failure repeats."""
    assert not settings.get_profile("ci").derandomize
    assert str(core.global_force_seed) == str(pytestconfig.getoption("hypothesis_seed"))
