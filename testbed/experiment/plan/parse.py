"""Reading an experiment file: TOML -> a RawPlan of typed values, every value checked
where it was written. Nothing here resolves points or touches the kernel (see plan.py).

Layout of an experiment file (experiments/*.toml):

    name = "demo"            results folder name        topology = "apn"
    repetitions = 1          au_bar = 90                description = "..."
    [fixed]       KNOB = value           one value for every point
    [sweep]       KNOB = [values, ...]   the cartesian product of all swept knobs
    [search]      knob = "distance_km", range = [0, 3000], target = "au_pct >= 90",
                  tolerance = 100        find where the target stops being met
    [mounts.NAME] mount knobs            a profile the `mount` knob names
    [hosts.NAME]  host knobs             a host profile the `host` knob names (besides
                                         the presets, schema.HOST_PROFILES)
    [dataset] [workload] [server] [cache] [staging]   plain values of their knobs
    [workload]    preset = "unet3d-h100", scale = 0.01  MLPerf Storage defaults
    [workload]    dlio = "unet3d_h100.yaml"   a DLIO workload config as it is
    [capture]     seconds, max_mib, keep_pcap, enabled  a packet capture per point

KNOB is any row of testbed.experiment.plan.dimensions, for fibre knobs optionally per link
(`fibre.site_b.distance_km`, `fibre.*.loss_pct`). Every error is one SpecError line
naming the file, the table, the key, the value and what is allowed.
"""

from __future__ import annotations

import math
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed import userfiles
from testbed.errors import SpecError, WorkloadError
from testbed.schema import (FILE_SETTINGS, FLOAT_TEXT_RE, HOST_PROFILES, Dimension,
                            tolerance_row)
from testbed.experiment.plan import dimensions as dims
from testbed.experiment.plan.dimensions import Key, did_you_mean, number, show
from testbed.topology import fibres as topo_fibres
from testbed.topology import load_topologies
from testbed.topology import build as build_topology
from testbed.topology import LINK_PARAMS, PARAM_KNOBS, knob_params
from testbed.workload import dlio, tracefile
from testbed.workload.dlio_checkpoint import CheckpointJob

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z", re.ASCII)
TOP_LEVEL = ("name", "topology", "repetitions", "au_bar", "description")
TABLES = ("fixed", "sweep", "search", "mounts", "hosts", "capture", *dims.SECTIONS)
CAPTURE_KEYS = ("enabled", "seconds", "max_mib", "keep_pcap")
MAX_SWEEP_VALUES = 1000
MAX_FILE_BYTES = 256 << 10  # the largest shipped file is 1.5 KiB; 256 KiB parses in ~0.1 s
METRICS = ("au_pct", "slowdown_pct", "throughput_MB_s", "samples_per_s")
# The values a metric can take: a target outside them can never be met (or always is).
METRIC_RANGE = {"au_pct": (0.0, 100.0), "slowdown_pct": (-100.0, math.inf),
                "throughput_MB_s": (0.0, math.inf), "samples_per_s": (0.0, math.inf)}
OPS = (">=", "<=", ">", "<")
TARGET_RE = re.compile(r"\s*([A-Za-z_]+)\s*(>=|<=|>|<)\s*([-+0-9.eE]+)\s*\Z", re.ASCII)


@dataclass(frozen=True)
class CaptureOption:
    """A packet capture on the first worker during repetition 0 of every point."""

    seconds: float = FILE_SETTINGS["seconds"].default
    max_mib: int = FILE_SETTINGS["max_mib"].default
    keep_pcap: bool = FILE_SETTINGS["keep_pcap"].default


@dataclass(frozen=True)
class SearchSpec:
    """[search]: find, per setting, the value of `key` where `metric op target` stops
    holding, to within `tolerance` (in the knob's unit), between lo and hi."""

    key: Key
    lo: float
    hi: float
    metric: str
    op: str
    target: float
    tolerance: float
    max_points: int = FILE_SETTINGS["max_points"].default
    max_runs: int = FILE_SETTINGS["max_runs"].default  # a probe's runs before it is left
    # undecided (search.py)

    def meets(self, value: float) -> bool:
        """Whether a measured metric meets the target (NaN never does)."""
        ops = {">=": value >= self.target, "<=": value <= self.target,
               ">": value > self.target, "<": value < self.target}
        return bool(ops[self.op])

    @property
    def text(self) -> str:
        """The target as written: "au_pct >= 90"."""
        return f"{self.metric} {self.op} {dims.number(self.target)}"


@dataclass
class RawPlan:
    """An experiment file's contents, typed and checked value by value."""

    path: Path
    name: str
    topology: str
    links: tuple[str, ...]
    repetitions: int = 1
    au_bar: float | None = None
    description: str = ""
    sections: dict[Key, Any] = field(default_factory=dict)
    fixed: dict[Key, Any] = field(default_factory=dict)
    sweep: dict[Key, list[Any]] = field(default_factory=dict)
    mounts: dict[str, dict[Key, Any]] = field(default_factory=dict)
    hosts: dict[str, dict[Key, Any]] = field(default_factory=dict)
    search: SearchSpec | None = None
    capture: CaptureOption | None = None
    overrides: dict[str, str] = field(default_factory=dict)
    dlio: str = ""  # the DLIO workload config the workload came from (absolute path)
    checkpoint: CheckpointJob | None = None  # the DLIO config is checkpoint-only
    trace: str = ""  # [workload] trace: the recorded I/O trace replayed (absolute path)
    notes: list[str] = field(default_factory=list)  # warnings, logged once the plan is valid


class Where:
    """Error context: the file (and table) a value was read from."""

    def __init__(self, path: Path, table: str = "") -> None:
        self.path, self.table = path, table

    def at(self, table: str) -> Where:
        """The same file, another table."""
        return Where(self.path, table)

    def error(self, key: str, value: Any, problem: str) -> SpecError:
        """One line: FILE: [table] key = value: problem."""
        table = f"[{self.table}] " if self.table else ""
        return SpecError(f"{self.path}: {table}{key} = {show(value)}: {problem}")

    def plain(self, problem: str) -> SpecError:
        """One line: FILE: [table] problem."""
        table = f"[{self.table}] " if self.table else ""
        return SpecError(f"{self.path}: {table}{problem}")


def read_toml(path: str | Path) -> dict[str, Any]:
    """The file's TOML as a dict; SpecError for a missing, unreadable, non-UTF-8 or
    malformed file."""
    p = Path(path)
    text = userfiles.read_text(p, "experiment file", "experiment files are TOML",
                               MAX_FILE_BYTES)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{p}: not valid TOML: {exc}") from None
    except ValueError:  # int() refuses the text of a huge integer (tomllib passes it on)
        raise SpecError(f"{p}: an integer longer than {sys.get_int_max_str_digits()} digits:"
                        " no knob takes one") from None
    except RecursionError:
        raise SpecError(f"{p}: arrays or tables nested too deeply to be an experiment "
                        "file") from None


def _table(cfg: dict[str, Any], name: str, where: Where) -> dict[str, Any]:
    value = cfg.get(name, {})
    if not isinstance(value, dict):
        raise where.plain(f"{name} = {show(value)}: must be a table ([{name}])")
    return value


def _top_level(cfg: dict[str, Any], where: Where) -> tuple[str, str, int, float | None, str]:
    for key, value in cfg.items():
        if key not in TOP_LEVEL + TABLES:
            if key == "topology_params":
                raise where.error(key, value, "use [fixed] for fixed knob values")
            raise where.error(key, value, "unknown key" + did_you_mean(key, TOP_LEVEL + TABLES))
    name = cfg.get("name", where.path.stem)
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise where.error("name", name, "letters, digits, _ . - (at most 64)")
    topo = cfg.get("topology", "apn")
    known = tuple(load_topologies())
    if not isinstance(topo, str) or topo not in known:
        raise where.error("topology", topo, "one of " + ", ".join(known)
                          + (did_you_mean(topo, known) if isinstance(topo, str) else ""))
    reps = _checked(FILE_SETTINGS["repetitions"],
                    cfg.get("repetitions", FILE_SETTINGS["repetitions"].default), where,
                    "repetitions")
    bar = cfg.get("au_bar")
    if bar is not None:
        bar = _checked(FILE_SETTINGS["au_bar"], bar, where, "au_bar")
    desc = cfg.get("description", "")
    if not isinstance(desc, str) or len(desc) > 2000:
        raise where.error("description", desc, "text of at most 2000 characters")
    return name, topo, reps, bar, desc


def _checked(dim: Dimension, value: Any, where: Where, key: str,
             text: bool = False) -> Any:
    try:
        return dim.parse(value, text)
    except ValueError as exc:
        raise where.error(key, value, str(exc)) from None


def _knobs(table: dict[str, Any], where: Where) -> list[tuple[str, Any]]:
    """(knob, value) of a [fixed]/[sweep] table; an unquoted dotted key written
    `fibre.site_b.distance_km = ...` arrives as nested tables and is flattened back."""
    out: list[tuple[str, Any]] = []
    for k, v in table.items():
        if k != "fibre" or not isinstance(v, dict):
            out.append((k, v))
            continue
        for link, knobs in v.items():
            if not isinstance(knobs, dict):
                raise where.error(f"fibre.{link}", knobs, "write fibre.LINK.KNOB = value")
            out += [(f"fibre.{link}.{name}", x) for name, x in knobs.items()]
    return out


def _key(text: Any, raw: RawPlan, where: Where) -> Key:
    try:
        key = dims.parse_key(text, raw.links)
    except ValueError as exc:
        raise where.plain(str(exc)) from None
    if key.dim.per_link and not raw.links:
        raise where.plain(f"unknown knob {text!r} here: topology {raw.topology} has no "
                          "fibre link")
    return key


def _profile_name(key: Key, value: Any, raw: RawPlan, where: Where,
                  written: str | None) -> str:
    """The `mount` or `host` knob's value: a profile of the file ([mounts.NAME],
    [hosts.NAME]) or a built-in one (the kernel's defaults; the host presets)."""
    table = "mounts" if key.dim.name == "mount" else "hosts"
    builtin = ("default",) if table == "mounts" else tuple(HOST_PROFILES)
    known = [*builtin, *(m for m in getattr(raw, table) if m not in builtin)]
    if not isinstance(value, str) or value not in known:
        hint = did_you_mean(value, known) if isinstance(value, str) else ""
        raise where.error(written or key.text, value, f"no such profile{hint}: define "
                          f"[{table}.{value if isinstance(value, str) else 'NAME'}]; "
                          f"known: {', '.join(known)}")
    return value


def _value(key: Key, value: Any, raw: RawPlan, where: Where, text: bool = False,
           written: str | None = None) -> Any:
    """A knob's value checked where it was written (`written`: its key there)."""
    if key.dim.name in ("mount", "host"):
        return _profile_name(key, value, raw, where, written)
    return _checked(key.dim, value, where, written or key.text, text)


def _sections(cfg: dict[str, Any], raw: RawPlan, where: Where) -> None:
    """[dataset] [workload] [server] [cache] [staging]: plain values of their knobs
    ([workload] preset and scale are the `workload` and `workload_scale` knobs)."""
    for section in dims.SECTIONS:
        table = _table(cfg, section, where)
        known = dims.in_section(section)
        for k, v in table.items():
            if section == "workload" and k in (DLIO_KEY, TRACE_KEY):
                continue  # read after every plain value (_dlio_file, _trace_file)
            if k not in known:
                raise where.at(section).error(k, v, "unknown key" + did_you_mean(
                    k, tuple(known)) + f"; known: {', '.join(known)}")
            raw.sections[Key(known[k])] = _value(Key(known[k]), v, raw, where.at(section),
                                                 written=k)


DLIO_KEY = "dlio"
TRACE_KEY = "trace"


def _dlio_path(value: Any, base: Path, where: Where, key: str = DLIO_KEY,
               what: str = "a DLIO workload YAML file") -> Path:
    """A user file's path as written (relative to `base`), checked to be text."""
    if not isinstance(value, str) or not value.strip() or "\0" in value:
        raise where.error(key, value, f"the path of {what}")
    path = Path(value)
    try:
        return (path if path.is_absolute() else base / path).resolve()
    except (RuntimeError, OSError) as exc:  # a symlink loop; a name too long
        raise where.error(key, value, f"cannot be resolved: {exc}") from None


def _take_dlio(raw: RawPlan, path: Path, where: Where, fix: bool) -> None:
    """A DLIO workload config's knob values into the plan: under the file's own
    [dataset]/[workload] values (fix=False, the file names it), or over everything
    (fix=True, --dlio on the command line replaces the file's workload). Its AU bar
    unless au_bar is set. Refused with a workload preset beside it: one source each."""
    preset = Key(dims.BY_NAME["workload"])
    named = [t for t, layer in (("[workload] preset", raw.sections), ("[fixed]", raw.fixed),
                                ("[sweep]", raw.sweep)) if preset in layer]
    if fix:
        for layer in (raw.sections, raw.fixed, raw.sweep):
            layer.pop(preset, None)
    elif named:
        raise where.error(DLIO_KEY, str(path), f"the workload is also named by {named[0]}: "
                          "keep one of them")
    try:
        job = dlio.load(path)
    except SpecError as exc:
        raise where.plain(str(exc)) from None
    raw.dlio = str(path)
    raw.notes += [note for note in (dlio.warning(job),) if note]
    if isinstance(job, CheckpointJob):  # writes checkpoints: no loader knobs to set
        raw.checkpoint = job
        return
    raw.checkpoint = None
    scale_key = Key(dims.BY_NAME["workload_scale"])
    scale = raw.fixed.get(scale_key, raw.sections.get(scale_key, 1.0))
    for name, value in job.knobs(scale).items():
        key = Key(dims.BY_NAME[name])
        written = f"{path.name}: {dlio.FIELD_OF_KNOB.get(name, name)} as {name}"
        if fix:
            raw.fixed[key] = _value(key, value, raw, where, written=written)
            raw.sweep.pop(key, None)
        elif key not in raw.sections:
            raw.sections[key] = _value(key, value, raw, where, written=written)
    if raw.au_bar is None or fix:
        raw.au_bar = _checked(FILE_SETTINGS["au_bar"], job.au_bar, where,
                              f"{path.name}: metric.au as au_bar")


def _dlio_file(cfg: dict[str, Any], raw: RawPlan, where: Where,
               dlio_at: Path | None) -> None:
    """[workload] dlio = "FILE.yaml" (relative to the experiment file's folder; a lab
    kernel's job reads the copy it was sent, `dlio_at`)."""
    table = _table(cfg, "workload", where)
    if DLIO_KEY in table:
        w = where.at("workload")
        path = _dlio_path(table[DLIO_KEY], where.path.parent, w)
        _take_dlio(raw, dlio_at or path, w, fix=False)


def _trace_file(cfg: dict[str, Any], raw: RawPlan, where: Where,
                trace_at: Path | None) -> None:
    """[workload] trace = "FILE" (a recorded job's I/O, testbed trace record; relative to
    the experiment file's folder; a lab kernel's job reads the copy it was sent). The
    file is read now: a malformed one is refused before anything runs."""
    table = _table(cfg, "workload", where)
    if TRACE_KEY not in table:
        return
    w = where.at("workload")
    path = _dlio_path(table[TRACE_KEY], where.path.parent, w, TRACE_KEY,
                      "a trace file (testbed trace record)")
    if raw.dlio or Key(dims.BY_NAME["workload"]) in {**raw.sections, **raw.fixed, **raw.sweep}:
        raise w.error(TRACE_KEY, str(path), "the workload is also named by a preset or a "
                      "DLIO config: keep one of them")
    try:
        tracefile.load(trace_at or path)
    except (SpecError, WorkloadError) as exc:
        raise w.plain(str(exc)) from None
    raw.trace = str(trace_at or path)


def _one_workload(raw: RawPlan, where: Where) -> None:
    """A trace and a DLIO config or preset (from the file, --dlio or -p) are two
    workloads: refused, whichever came last."""
    preset = Key(dims.BY_NAME["workload"])
    if raw.trace and (raw.dlio or any(preset in layer for layer in
                                      (raw.sections, raw.fixed, raw.sweep))):
        other = "the DLIO config " + Path(raw.dlio).name if raw.dlio else "a workload preset"
        raise where.at("workload").error(TRACE_KEY, Path(raw.trace).name,
                                         f"{other} names a workload too: keep one of them")


def _profiles(cfg: dict[str, Any], raw: RawPlan, where: Where, table: str) -> None:
    """[mounts.NAME] or [hosts.NAME] profiles: each a table of mount (host) knobs; a
    host profile may not take a preset's name."""
    what = "mount" if table == "mounts" else "host"
    known = dims.in_section(table)
    for name, profile in _table(cfg, table, where).items():
        w = where.at(f"{table}.{name}")
        if not isinstance(profile, dict):
            raise where.at(table).error(name, profile, f"must be a table ([{table}.{name}])")
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise w.plain("profile names: letters, digits, _ . -")
        if table == "hosts" and name in HOST_PROFILES:
            raise w.plain(f"{name!r} is a preset host profile: give yours another name")
        values = getattr(raw, table)[name] = {}
        for k, v in profile.items():
            if k not in known:
                raise w.error(k, v, f"not a {what} knob" + did_you_mean(k, tuple(known))
                              + f"; known: {', '.join(known)}")
            values[Key(known[k])] = _value(Key(known[k]), v, raw, w, written=k)


def _fixed(cfg: dict[str, Any], raw: RawPlan, where: Where) -> None:
    w = where.at("fixed")
    for k, v in _knobs(_table(cfg, "fixed", where), w):
        key = _key(k, raw, w)
        if isinstance(v, list):
            raise w.error(k, v, "a fixed knob takes one value; sweep lists go in [sweep]")
        raw.fixed[key] = _value(key, v, raw, w)


def _sweep(cfg: dict[str, Any], raw: RawPlan, where: Where) -> None:
    w = where.at("sweep")
    for k, v in _knobs(_table(cfg, "sweep", where), w):
        key = _key(k, raw, w)
        values = v if isinstance(v, list) and key.dim.kind != "str_list" else [v]
        if key.dim.kind == "str_list" and isinstance(v, list) and v and isinstance(v[0], list):
            values = v
        if not values:
            raise w.error(k, v, "an empty sweep: give at least one value")
        if len(values) > MAX_SWEEP_VALUES:
            raise w.error(k, f"{len(values)} values", f"at most {MAX_SWEEP_VALUES}")
        if key in raw.fixed:
            raise w.error(k, v, "also given in [fixed]: a knob is either fixed or swept")
        parsed = [_value(key, x, raw, w) for x in values]
        same = [x if isinstance(x, (int, float, str)) else repr(x) for x in parsed]
        if len(set(same)) != len(same):  # 0.0 and -0.0, 1 and 1.0 are one value
            raise w.error(k, v, "a value is listed twice")
        raw.sweep[key] = parsed


def _target(text: Any, where: Where) -> tuple[str, str, float]:
    """"au_pct >= 90" -> ("au_pct", ">=", 90.0); SpecError naming what is allowed."""
    m = TARGET_RE.match(text) if isinstance(text, str) else None
    if not m or m.group(1) not in METRICS or not FLOAT_TEXT_RE.match(m.group(3)) \
            or not float(m.group(3)) < float("inf") or not float(m.group(3)) > -float("inf"):
        raise where.error("target", text, f"like \"au_pct >= 90\" with a finite number; "
                          f"metrics: {', '.join(METRICS)}; operators: {' '.join(OPS)}")
    lo, hi = METRIC_RANGE[m.group(1)]
    if not lo < float(m.group(3)) < hi:
        raise where.error("target", text, f"{m.group(1)} lies between {number(lo)} and "
                          f"{number(hi)}: a target at or beyond that is met always or never")
    return m.group(1), m.group(2), float(m.group(3))


def _search(cfg: dict[str, Any], raw: RawPlan, where: Where) -> None:
    """[search] knob, range = [lo, hi], target = "au_pct >= 90", tolerance, max_points,
    max_runs."""
    table = _table(cfg, "search", where)
    if not table:
        return
    w = where.at("search")
    known = ("knob", "range", "target", "tolerance", "max_points", "max_runs")
    for k, v in table.items():
        if k not in known:
            raise w.error(k, v, "unknown key" + did_you_mean(k, known) + f"; known: "
                          f"{', '.join(known)}")
    for k in ("knob", "range", "target", "tolerance"):
        if k not in table:
            raise w.plain(f"{k} is missing; [search] needs {', '.join(known[:4])}")
    key = _key(table["knob"], raw, w)
    if key.dim.kind not in ("int", "float", "rate"):
        raise w.error("knob", table["knob"], "a numeric knob")
    rng = table["range"]
    if not isinstance(rng, list) or len(rng) != 2:
        raise w.error("range", rng, "[low, high]")
    lo, hi = (_value(key, x, raw, w) for x in rng)
    if not lo < hi:
        raise w.error("range", rng, "low must be below high")
    metric, op, target = _target(table["target"], w)
    tol = _checked(tolerance_row(key.dim.unit, hi - lo), table["tolerance"], w, "tolerance")
    maxp, maxr = (_checked(FILE_SETTINGS[k], table.get(k, FILE_SETTINGS[k].default), w, k)
                  for k in ("max_points", "max_runs"))
    if key in raw.fixed:
        raise w.error("knob", table["knob"], "also given in [fixed]")
    raw.search = SearchSpec(key, lo, hi, metric, op, target, tol, maxp, maxr)


def _capture(cfg: dict[str, Any], raw: RawPlan, where: Where) -> None:
    table = _table(cfg, "capture", where)
    if not table:
        return
    w = where.at("capture")
    rows = {k: FILE_SETTINGS[k] for k in CAPTURE_KEYS}
    values = {}
    for k, v in table.items():
        if k not in rows:
            raise w.error(k, v, "unknown key" + did_you_mean(k, tuple(rows)) + "; known: "
                          + ", ".join(rows))
        values[k] = _checked(rows[k], v, w, k)
    if values.pop("enabled", True):
        raw.capture = CaptureOption(**values)


def apply_overrides(raw: RawPlan, overrides: dict[str, str],
                    dlio_at: Path | None = None) -> None:
    """-p KEY=VALUE from the command line: fixes a knob (replacing its sweep), or sets
    repetitions / au_bar. Values are parsed as text (ASCII numbers, true/false, rates)."""
    where = Where(Path("-p"))
    for text, value in overrides.items():
        if text == DLIO_KEY:  # --dlio FILE: paths relative to where the command runs
            w = Where(Path("--dlio"))
            _take_dlio(raw, dlio_at or _dlio_path(value, Path.cwd(), w), w, fix=True)
            continue
        if text in ("repetitions", "au_bar"):
            setattr(raw, text, _checked(FILE_SETTINGS[text], value, where, text, text=True))
            continue
        key = _key(text, raw, where)
        checked = _value(key, value, raw, where, text=True, written=text)
        if raw.search is not None and raw.search.key == key:
            raise where.error(text, value, f"{raw.path.name} searches this knob ([search]):"
                              " it cannot be fixed; fix another, or run a copy of the file "
                              "without its [search] table")
        raw.fixed[key] = checked
        raw.sweep.pop(key, None)


def _link_params(cfg: dict[str, Any], topo: str, overrides: dict[str, str] | None,
                 where: Where) -> dict[str, Any]:
    """The topology's link parameters (LINK_PARAMS: which fibre links it has) as the
    file's [fixed] or -p gives them: the links its fibre knobs may name."""
    out: dict[str, Any] = {}
    fixed = cfg.get("fixed", {})
    for param, knob in knob_params(topo).items():
        if param not in LINK_PARAMS:
            continue
        if knob in (overrides or {}):
            out[param] = _checked(dims.BY_NAME[knob], (overrides or {})[knob],
                                  Where(Path("-p")), knob, text=True)
        elif isinstance(fixed, dict) and knob in fixed:
            out[param] = _checked(dims.BY_NAME[knob], fixed[knob], where.at("fixed"), knob)
    return out


def _topology_knobs(raw: RawPlan, where: Where) -> None:
    """A topology knob the topology does not take would change nothing: refused; a link
    parameter (the cluster's fibres) is one value per experiment, never swept."""
    takes = knob_params(raw.topology)
    search = {raw.search.key: None} if raw.search is not None else {}
    for table, layer in (("fixed", raw.fixed), ("sweep", raw.sweep), ("search", search)):
        for key in layer:
            name = key.dim.name
            if key.dim.target != "topology" or name not in PARAM_KNOBS.values():
                continue
            if name not in takes.values():
                own = [k for k in takes.values() if dims.BY_NAME[k].target == "topology"]
                raise where.at(table).plain(
                    f"{name}: topology {raw.topology} has no such parameter; its topology "
                    f"knobs: {', '.join(own) or 'none'}")
            if table != "fixed" and name in (PARAM_KNOBS[p] for p in LINK_PARAMS):
                raise where.at(table).plain(
                    f"{name}: decides which fibre links {raw.topology} has: one value per "
                    "experiment ([fixed] or -p), not swept or searched")


def parse(path: str | Path, overrides: dict[str, str] | None = None,
          dlio_at: Path | None = None, trace_at: Path | None = None) -> RawPlan:
    """Read and check an experiment file (and -p overrides); SpecError on any problem.
    `dlio_at`: where the DLIO config the file or --dlio names was copied to (a job in a
    lab kernel, which gets its text, not its path); `trace_at` likewise for the trace."""
    p = Path(path)
    cfg = read_toml(p)
    where = Where(p)
    name, topo, reps, bar, desc = _top_level(cfg, where)
    links = tuple(topo_fibres(build_topology(topo, _link_params(cfg, topo, overrides,
                                                                where))))
    raw = RawPlan(p, name, topo, links, reps, bar, desc)
    _profiles(cfg, raw, where, "mounts")
    _profiles(cfg, raw, where, "hosts")
    _sections(cfg, raw, where)
    _fixed(cfg, raw, where)
    _sweep(cfg, raw, where)
    if DLIO_KEY not in (overrides or {}):  # --dlio replaces the file's
        _dlio_file(cfg, raw, where, dlio_at)
    _trace_file(cfg, raw, where, trace_at)
    _search(cfg, raw, where)
    _capture(cfg, raw, where)
    apply_overrides(raw, overrides or {}, dlio_at)
    _topology_knobs(raw, where)
    _one_workload(raw, where)
    raw.overrides = dict(overrides or {})
    if not any(t in cfg for t in TABLES):  # checked last: any other error first
        raise where.plain("nothing to measure: the file has no table ([fixed], [sweep], "
                          "[workload], ...); an empty file would run every default")
    return raw
