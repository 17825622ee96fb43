"""Plans: an experiment file -> a frozen plan of fully validated points.

A point is one complete setting of every knob (every row of the dimension table, fibre
knobs per link) with the specs built from it: one FibreSpec per named fibre, the
MountSpec, WorkloadSpec, NfsServerSpec and DatasetSpec. Building them runs every check
the specs have, and the cross-field RULES below, for every point, before anything is
created in the kernel: a bad value in the last point of a sweep fails at load time.

Values come in layers, later ones winning: the specs' defaults and the topology's own
fibres; an MLPerf preset; the plain tables ([dataset], [workload], ...); the point's mount
profile and host profile (for their knobs not set explicitly); [fixed] and -p; the
point's sweep values.
A fibre knob written for every link (`distance_km`) yields to one written for a named
link (`fibre.site_b.distance_km`).

Every point has a co-located baseline: the same point with every fibre's distance, loss,
jitter and equipment delay at their baseline values (0). Baselines are added to the plan
when the sweep does not contain them, and ordered before the points that need them.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from testbed import kernel
from testbed.errors import SpecError
from testbed.experiment.plan import dimensions as dims
from testbed.experiment.plan.datapaths import REGISTRY as DATA_PATHS
from testbed.experiment.plan.dimensions import Key
from testbed.experiment.plan.parse import CaptureOption, RawPlan, SearchSpec, parse
from testbed.model import sim
from testbed.model.sim import Reading
from testbed.schema import HOST_PROFILES
from testbed.spec import EventSpec, FibreSpec, HostSpec, MountSpec, NfsServerSpec
from testbed.topology import LINK_PARAMS, PARAM_KNOBS, SiteTopo, knob_params, params_of
from testbed.topology import build as build_topology
from testbed.topology import fibres as topo_fibres
from testbed.topology import worker_hosts
from testbed.workload import DatasetSpec, WorkloadSpec
from testbed.workload.presets import NONE, knob_values

log = logging.getLogger(__name__)
MAX_POINTS = 20_000
DEFAULT_AU_BAR = 90.0


def format_value(value: Any) -> str:
    """A knob's value in point ids and tables: 3000, 0.1, true, 4.1+4.2, tuned."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return dims.number(value) if math.isfinite(value) else str(value)
    if isinstance(value, tuple):
        return "+".join(map(str, value))
    return "" if value is None else str(value)


@dataclass(frozen=True)
class Point:
    """One complete, validated setting of every knob, and the specs built from it."""

    ident: tuple[tuple[Key, Any], ...]
    settings: tuple[tuple[Key, Any], ...]
    topology: str
    fibres: tuple[tuple[str, FibreSpec], ...]
    mount: MountSpec
    workload: WorkloadSpec
    server: NfsServerSpec
    dataset: DatasetSpec
    baseline_ident: tuple[tuple[Key, Any], ...]
    assignment: tuple[tuple[Key, Any], ...] = ()
    host: HostSpec = HostSpec()
    event: EventSpec = EventSpec()

    @property
    def id(self) -> str:
        """The point's name in results.csv: the plan's varying knobs, k=v|k=v."""
        return "|".join(f"{k.column}={format_value(v)}" for k, v in self.ident) or "point"

    @property
    def baseline_id(self) -> str:
        """The id of its co-located baseline (its own id if it is one)."""
        return "|".join(f"{k.column}={format_value(v)}" for k, v in self.baseline_ident) \
            or "point"

    @property
    def is_baseline(self) -> bool:
        """Whether this point is its own co-located baseline."""
        return self.ident == self.baseline_ident

    def run_id(self, rep: int) -> str:
        """The id of one repetition of this point."""
        return f"{self.id}|rep={rep}"

    def value(self, name: str, link: str | None = None) -> Any:
        """A knob's value (fibre knobs: of one link, or the first link if None)."""
        for key, value in self.settings:
            if key.dim.name == name and (link is None or key.link == link):
                return value
        raise KeyError(name)

    @property
    def data_path(self) -> str:
        """Where training reads from (a data path's name)."""
        return str(self.value("data_path"))

    @property
    def workers(self) -> int:
        """GPU workers per site (a cluster: every server's)."""
        return int(self.value("workers"))

    @property
    def topo_params(self) -> dict[str, Any]:
        """The build() parameters of its topology that its knobs set (workers; a
        cluster's servers, fibres and GPUs per server)."""
        return params_of(self.topology, self.value)

    @property
    def tcp_buffer_bytes(self) -> int | None:
        """The GPU hosts' TCP buffer maximum the point asks for (None: from the BDP)."""
        v = self.value("tcp_buffer_mib")
        return None if v == "auto" else int(float(v) * 2**20)

    @property
    def congestion(self) -> str:
        """The TCP congestion control every host of the point uses."""
        return str(self.value("congestion"))

    @property
    def delayed_ack(self) -> bool:
        """Whether the point's receivers delay ACKs (Linux's default) or ACK at once."""
        return bool(self.value("delayed_ack"))

    @property
    def slow_start_after_idle(self) -> bool:
        """Whether the point's idle connections restart from the initial window (Linux's
        default) or keep their window."""
        return bool(self.value("slow_start_after_idle"))

    @property
    def loss_probe(self) -> bool:
        """Whether the point's senders send tail loss probes (Linux's default)."""
        return bool(self.value("loss_probe"))

    @property
    def time_scale(self) -> float:
        """The point's time dilation k (for "auto": as calibrated, 1.0 before)."""
        return self.fibres[0][1].time_scale if self.fibres else 1.0

    @property
    def group(self) -> tuple[Any, ...]:
        """The knobs that need a fresh testbed (topology, nfsd, dataset): points with the
        same group share one."""
        return tuple((k.column, v) for k, v in self.settings if not k.dim.live)

    def fibre(self, name: str) -> FibreSpec:
        """The spec of the named fibre at this point."""
        return dict(self.fibres)[name]


Rule = Callable[[Point], str | None]


def _preset_bar(raw: RawPlan) -> float:
    """The AU bar of the file's one workload preset, if it names one; else 90 %."""
    from testbed.workload.presets import PRESETS
    name = raw.fixed.get(Key(dims.BY_NAME["workload"])) or \
        raw.sections.get(Key(dims.BY_NAME["workload"]))
    return float(PRESETS[name]["au_bar"]) if name in PRESETS else DEFAULT_AU_BAR


def _record_needs_records(p: Point) -> str | None:
    """Record access reads record files: the dataset must be written as records."""
    if p.workload.access == "record" and p.dataset.format != "record":
        return "access = \"record\" needs [dataset] format = \"record\""
    return None


def _version_served(p: Point) -> str | None:
    """The mount's NFS version must be one the server offers."""
    if p.mount.vers not in p.server.versions:
        return (f"vers {p.mount.vers} is not served: add it to [server] versions "
                f"(now {', '.join(p.server.versions)})")
    return None


def cache_need_mib(p: Point) -> int:
    """The FS-Cache a point needs: every worker's copy of the data, a quarter to spare."""
    return math.ceil(p.workers * p.dataset.total_bytes * 1.25 / 2**20)


def _cache_fits(p: Point) -> str | None:
    """FS-Cache must hold every worker's copy of the data (cache_need_mib)."""
    need = cache_need_mib(p)
    if p.data_path == "cache" and int(p.value("cache_mib")) < need:
        return (f"[cache] size_mib = {p.value('cache_mib')} cannot hold {p.workers} worker(s) "
                f"x {p.dataset.total_bytes / 2**20:.0f} MiB of data: at least {need}")
    return None


def _window_fits(p: Point) -> str | None:
    """The longest measured window cannot be shorter than the windows it bounds."""
    if p.workload.measure_max_s < max(p.workload.measure_s, p.workload.measure_stall_s):
        return (f"measure_max_s = {p.workload.measure_max_s:g} is below measure_s = "
                f"{p.workload.measure_s:g} or measure_stall_s = "
                f"{p.workload.measure_stall_s:g}")
    return None


def in_flight(p: Point) -> int:
    """How many files the loader reads at once: readers, at most batch x prefetch
    samples (for records read in order, one run per file: at most the files)."""
    wl = p.workload
    return min(wl.readers, wl.batch * wl.prefetch)


def _files_outnumber_reads(p: Point) -> str | None:
    """A file read twice at once is read the second time from the client's page cache,
    not across the fibre (single workers read up to 154 % of their line, 2026-12-05):
    the set must hold at least twice as many files as are read at once."""
    need = 2 * in_flight(p)
    if p.workload.access == "file" and p.dataset.files < need:
        return (f"[dataset] files = {p.dataset.files}: fewer than twice the {in_flight(p)} "
                f"files read at once (readers, batch x prefetch): the same file would be "
                f"read twice at once, once from the page cache; give files >= {need}")
    return None


def reads_per_batch(point: Point) -> tuple[int, int]:
    """How the loader reads a batch: how many reads (each one open and a sequential
    read) of how many bytes. A sample is a read, except records read in order: the
    loader interleaves `readers` files and reads each file's records of a batch as one
    run (testbed.workload.loader.coalesce)."""
    wl, ds = point.workload, point.dataset
    sample = ds.sample_bytes(wl.access)
    if wl.access != "record" or wl.shuffle:
        return wl.batch, sample
    runs = max(1, min(wl.batch, wl.readers, ds.files))
    return runs, math.ceil(wl.batch / runs) * sample


def planned_ra_kb(point: Point) -> int:
    """The read-ahead (KiB) a point not measured yet will read with: its mount's, or the
    kernel's own where the mount leaves it."""
    ra = point.mount.read_ahead_kb
    return ra if ra is not None else kernel.READ_AHEAD_KB


def model_reading(point: Point, ra_kb: int) -> Reading:
    """How a point's loader reads, as the model simulates it (ra_kb: the read-ahead,
    planned or read back from the kernel)."""
    wl = point.workload
    reads, read_bytes = reads_per_batch(point)
    return Reading(readers=min(wl.readers, wl.prefetch * reads), sample_bytes=read_bytes,
                   read_bytes=wl.read_kib << 10, rsize=point.mount.rsize, ra_bytes=ra_kb << 10,
                   meta_rtts=sim.open_rtts(point.mount.vers))


def _model_can_estimate(p: Point) -> str | None:
    """The model steps through a point's reads (sim.work): one that would take more
    than it can afford would hold --check, and every row's explanation, for minutes."""
    r = model_reading(p, planned_ra_kb(p))
    steps, pages = sim.work(r)
    if steps <= sim.MAX_STEPS and pages <= sim.MAX_PAGES:
        return None
    what = (f"{steps:,} steps, at most {sim.MAX_STEPS:,}" if steps > sim.MAX_STEPS
            else f"{pages:,} pages, at most {sim.MAX_PAGES:,}")
    return (f"the model cannot estimate {r.readers} reader(s) each reading {sim.FILES} x "
            f"{r.sample_bytes / 2**20:.6g} MiB in {r.read_bytes >> 10} KiB read() calls "
            f"({what}): larger read_kib or read_ahead_kb, fewer readers or smaller files")


RULES: tuple[Rule, ...] = (_record_needs_records, _version_served, _cache_fits,
                           _window_fits, _files_outnumber_reads, _model_can_estimate)


def _event_window(loader: dict[str, Any], event: EventSpec) -> dict[str, Any]:
    """The loader's window fields, the measured window long enough to hold a point's
    events and their tail (event.window_s); unchanged without events."""
    need = event.window_s()
    if need <= 0:
        return loader
    return {**loader, "measure_s": max(loader["measure_s"], need),
            "measure_max_s": max(loader["measure_max_s"], need)}


class Resolver:
    """Turns assignments (knob -> value, as the file writes them) into validated points."""

    def __init__(self, raw: RawPlan) -> None:
        """The topology's default fibres and every knob's default, from the parsed file."""
        self.raw = raw
        self.au_bar = raw.au_bar or _preset_bar(raw)
        self._topos: dict[tuple[tuple[str, Any], ...], SiteTopo] = {}
        # time_scale "auto": once resolved (resolve.rescale), k for a point
        self.auto_scale: Callable[[Point], float] | None = None
        base_topo = self.topo()
        self.default_fibres = {n: spec for n, (_, _, spec) in topo_fibres(base_topo).items()}
        self.defaults = self._defaults(base_topo)

    def topo(self, point: Point | None = None) -> SiteTopo:
        """The topology built for a point (None: the plan's own, its defaults with the
        link parameters the file fixes, whose fibres every point has)."""
        if point is not None:
            return self._topo(point.topo_params)
        return self._topo({p: self.raw.fixed[Key(dims.BY_NAME[k])]
                           for p, k in knob_params(self.raw.topology).items()
                           if p in LINK_PARAMS and Key(dims.BY_NAME[k]) in self.raw.fixed})

    def _topo(self, params: dict[str, Any]) -> SiteTopo:
        """The topology built with `params` (once): validates the address space and
        interface names."""
        key = tuple(sorted(params.items()))
        if key not in self._topos:
            try:
                self._topos[key] = build_topology(self.raw.topology, params)
            except SpecError as exc:
                given = ", ".join(f"{p} = {v}" for p, v in key) or "its defaults"
                raise SpecError(f"{self.raw.path}: {given}: {exc}") from None
        return self._topos[key]

    def _defaults(self, topo: SiteTopo) -> dict[Key, Any]:
        """Every knob's default: the schema's, the topology's fibres and the parameters
        its topology knobs set (workers, servers, fibres)."""
        out: dict[Key, Any] = {}
        param_of = {k: p for p, k in PARAM_KNOBS.items()}
        for d in dims.DIMENSIONS:
            if d.per_link:
                for link, spec in self.default_fibres.items():
                    out[Key(d, link)] = getattr(spec, d.spec_field)
            elif d.target == "topology" and d.name in param_of:
                out[Key(d)] = topo.params.get(  # type: ignore[attr-defined]
                    param_of[d.name], 1 if d.default is None else d.default)
            else:
                out[Key(d)] = d.default
        return out

    def expand(self, key: Key) -> list[Key]:
        """The per-link keys a written key sets (every link for a plain fibre knob)."""
        if key.dim.per_link and key.link is None:
            return [Key(key.dim, link) for link in self.default_fibres]
        return [key]

    def _apply(self, values: dict[Key, Any], layer: dict[Key, Any]) -> None:
        """Write a layer of values over `values` (plain fibre keys before per-link ones)."""
        for key in sorted(layer, key=lambda k: k.link is not None):  # plain before per-link
            for k in self.expand(key):
                values[k] = layer[key]

    def _preset_layer(self, assignment: dict[Key, Any]) -> dict[Key, Any]:
        """The knob values of the assignment's workload preset (after its own layers)."""
        values = dict(self.defaults)
        self._apply(values, self.raw.sections)
        self._apply(values, assignment)
        name = values[Key(dims.BY_NAME["workload"])]
        scale = values[Key(dims.BY_NAME["workload_scale"])]
        return {Key(dims.BY_NAME[k]): v for k, v in knob_values(name, scale).items()}

    def settings(self, assignment: dict[Key, Any]) -> dict[Key, Any]:
        """Every knob's value for an assignment (see the module docstring's layers)."""
        values = dict(self.defaults)
        self._apply(values, self._preset_layer(assignment))
        self._apply(values, self.raw.sections)
        for profile in (self.raw.mounts.get(self._named(assignment, values, "mount"), {}),
                        self.host_profile(self._named(assignment, values, "host"))):
            self._apply(values, {k: v for k, v in profile.items() if k not in assignment})
        self._apply(values, assignment)
        return values

    @staticmethod
    def _named(assignment: dict[Key, Any], values: dict[Key, Any], knob: str) -> Any:
        """The profile a knob (`mount`, `host`) names: the assignment's, else as set."""
        key = Key(dims.BY_NAME[knob])
        return assignment.get(key, values[key])

    def host_profile(self, name: str) -> dict[Key, Any]:
        """A host profile's knob values: the file's [hosts.NAME], else a preset's."""
        if name in self.raw.hosts:
            return self.raw.hosts[name]
        return {Key(dims.BY_NAME[k]): v for k, v in HOST_PROFILES[name].values.items()}

    def point(self, assignment: dict[Key, Any], id_keys: Iterable[Key]) -> Point:
        """A validated point; SpecError naming the point and the problem."""
        ident = tuple((k, assignment.get(k)) for k in id_keys)
        base = self.baseline_assignment(assignment)
        base_ident = tuple((k, base.get(k)) for k in id_keys)
        values = self.settings(assignment)
        label = "|".join(f"{k.column}={format_value(v)}" for k, v in ident) or "the point"
        try:
            point = self._build(values, ident, base_ident, 1.0)
            if self.auto_scale is not None and values[Key(dims.BY_NAME["time_scale"])] == "auto":
                point = self._build(values, ident, base_ident, self.auto_scale(point))
            for rule in RULES:
                problem = rule(point)
                if problem:
                    raise SpecError(problem)
        except SpecError as exc:
            raise SpecError(f"{self.raw.path}: point {label}: {exc}") from None
        return dataclasses.replace(point, assignment=tuple(assignment.items()))

    @staticmethod
    def baseline_assignment(assignment: dict[Key, Any]) -> dict[Key, Any]:
        """The assignment of an assignment's co-located baseline."""
        return {k: (k.dim.baseline if k.dim.baseline is not None else v)
                for k, v in assignment.items()}

    def _build(self, values: dict[Key, Any], ident: tuple[tuple[Key, Any], ...],
               base_ident: tuple[tuple[Key, Any], ...], auto: float) -> Point:
        """The point's specs from every knob's value (time_scale "auto" at `auto`)."""
        by = lambda target: {k.dim.spec_field: v for k, v in values.items()  # noqa: E731
                             if k.dim.target == target and k.dim.name not in ("mount", "host")}
        mtu = int(values[Key(dims.BY_NAME["mtu"])])
        k = values[Key(dims.BY_NAME["time_scale"])]
        scale = auto if k == "auto" else float(k)  # "auto": decided when the run starts
        fibres = tuple((link, spec.replace(mtu=mtu, time_scale=scale,
                                           **{k.dim.spec_field: v for k, v in
                                              values.items() if k.link == link}))
                       for link, spec in self.default_fibres.items())
        event = EventSpec(**by("event"), time_scale=scale)
        loader = _event_window(by("loader") | by("window"), event)
        dp = values[Key(dims.BY_NAME["data_path"])]
        params = params_of(self.raw.topology, lambda k: values[Key(dims.BY_NAME[k])])
        topo = self._topo(params)
        if "workers" not in params:  # a cluster counts its workers: servers x GPUs
            values[Key(dims.BY_NAME["workers"])] = len(worker_hosts(topo))
        return Point(
            ident=ident, settings=tuple(values.items()), topology=self.raw.topology,
            fibres=fibres, mount=MountSpec(**by("mount"), fsc=DATA_PATHS[dp].fsc),
            workload=WorkloadSpec(**loader, au_bar=self.au_bar),
            server=NfsServerSpec(**by("server")), dataset=DatasetSpec(**by("dataset")),
            baseline_ident=base_ident, host=HostSpec(**by("host_profile"), time_scale=scale),
            event=event)


@dataclass(frozen=True)
class Plan:
    """An experiment, validated: its points in run order (baselines first), how often
    each runs, the AU bar, and the optional search and capture. capacity_MB_s: what the
    lab kernel moves per CPU, once time_scale "auto" is resolved at it (resolve); None
    before, and for a plan without "auto"."""

    name: str
    path: Path
    topology: str
    description: str
    repetitions: int
    au_bar: float
    points: tuple[Point, ...]
    id_keys: tuple[Key, ...]
    swept: tuple[Key, ...]
    search: SearchSpec | None
    capture: CaptureOption | None
    resolver: Resolver = field(compare=False, repr=False)
    capacity_MB_s: float | None = None

    @property
    def auto_scale(self) -> bool:
        """Whether the plan asks for time_scale = "auto" (calibrated when it runs)."""
        return any(p.value("time_scale") == "auto" for p in self.points)

    def runs(self) -> list[tuple[Point, int]]:
        """Every (point, repetition) of the grid, in run order."""
        return [(p, r) for p in self.points for r in range(self.repetitions)]

    def baseline_of(self, point: Point) -> Point | None:
        """The grid's point that is `point`'s co-located baseline."""
        return next((p for p in self.points if p.id == point.baseline_id), None)

    def settings_of(self, point: Point) -> tuple[tuple[Key, Any], ...]:
        """The point's values of the swept knobs other than the searched one (its
        "setting": what a search or a plot line keeps fixed)."""
        skip = {self.search.key} if self.search else set()
        return tuple((k, v) for k, v in point.ident if k in self.swept and k not in skip)


def _covered(keys: Iterable[Key]) -> set[tuple[str, str | None]]:
    """(knob, link) pairs written keys set; (knob, None) means every link."""
    return {(k.dim.name, k.link) for k in keys}


def _implicit(raw: RawPlan, resolver: Resolver) -> dict[Key, Any]:
    """Topology-default fibre values off their baseline that no written key sets: made
    explicit so that they show in point ids (their baseline differs)."""
    written = _covered([*raw.fixed, *raw.sweep, *([raw.search.key] if raw.search else [])])
    out: dict[Key, Any] = {}
    for link, spec in resolver.default_fibres.items():
        for d in dims.FIBRE_DIMS:
            value = getattr(spec, d.spec_field)
            if d.baseline is not None and value != d.baseline \
                    and (d.name, None) not in written and (d.name, link) not in written:
                out[Key(d, link)] = value
    return out


def _id_keys(raw: RawPlan, fixed: dict[Key, Any]) -> tuple[Key, ...]:
    """The knobs that name a point: swept, searched, and fixed ones whose baseline
    differs (so a point and its baseline have different names)."""
    keys = list(raw.sweep)
    if raw.search is not None and raw.search.key not in keys:
        keys.append(raw.search.key)
    keys += [k for k, v in fixed.items()
             if k.dim.baseline is not None and v != k.dim.baseline and k not in keys]
    return tuple(keys)


def _combos(sweep: dict[Key, list[Any]]) -> list[dict[Key, Any]]:
    """The cartesian product of the sweep; knobs with a baseline value innermost and
    ascending, so every point's baseline comes before it."""
    keys = [k for k in sweep if k.dim.baseline is None] + \
           [k for k in sweep if k.dim.baseline is not None]
    values = [sorted(sweep[k]) if k.dim.baseline is not None else sweep[k] for k in keys]
    count = math.prod(len(v) for v in values)
    if count > MAX_POINTS:
        raise SpecError(f"the sweep has {count} points; at most {MAX_POINTS}")
    return [dict(zip(keys, combo)) for combo in itertools.product(*values)]


def _grid(raw: RawPlan, resolver: Resolver, fixed: dict[Key, Any],
          id_keys: tuple[Key, ...]) -> list[Point]:
    """The sweep's points and the baselines they need, baselines first, in groups."""
    points: dict[str, Point] = {}
    for combo in _combos(raw.sweep):
        assignment = {**fixed, **combo}
        point = resolver.point(assignment, id_keys)
        if not point.is_baseline and point.baseline_id not in points:
            base = resolver.point(resolver.baseline_assignment(assignment), id_keys)
            points[base.id] = base
        points.setdefault(point.id, point)
    groups: dict[tuple[Any, ...], list[Point]] = {}
    for p in points.values():
        groups.setdefault(p.group, []).append(p)
    return [p for g in groups.values() for p in g]


def search_settings(raw: RawPlan) -> list[dict[Key, Any]]:
    """The settings a search runs for: the sweep's product without the searched knob."""
    assert raw.search is not None
    rest = {k: v for k, v in raw.sweep.items() if k != raw.search.key}
    return _combos(rest) if rest else [{}]


def _check_search(raw: RawPlan, resolver: Resolver, fixed: dict[Key, Any],
                  id_keys: tuple[Key, ...]) -> None:
    """Build (validate) each search's points at the range's ends and middle."""
    if raw.search is None:
        return
    s = raw.search
    middle = (s.lo + s.hi) / 2
    for setting in search_settings(raw):
        for value in (s.lo, middle, s.hi):
            v = round(value) if s.key.dim.kind == "int" else value
            resolver.point({**fixed, **setting, s.key: v}, id_keys)


def _check_ranks(raw: RawPlan, points: list[Point]) -> None:
    """SpecError (one line) unless every point's workers can be ranks of the checkpoint
    job: no more workers than its ranks, ranks its parallelism divides, a size a rank's
    bytes hold at the point's scale."""
    job = raw.checkpoint
    assert job is not None
    for workers, scale in sorted({(p.workers, float(p.value("workload_scale")))
                                  for p in points}):
        ranks = job.ranks(workers)
        if workers > ranks:
            raise SpecError(f"{raw.path}: workers = {workers}: {job.name} is a "
                            f"{ranks}-rank checkpoint (one rank per GPU worker)")
        try:
            job.rank_files(0, ranks, scale)
        except SpecError as exc:
            raise SpecError(f"{raw.path}: {exc}") from None


def load(path: str | Path, overrides: dict[str, str] | None = None,
         dlio_at: Path | None = None, trace_at: Path | None = None) -> Plan:
    """Read, check and resolve an experiment file into a Plan; SpecError (one line: the
    file, the table or point, the key, the value, what is allowed) on any problem.
    `dlio_at`, `trace_at`: a job's copies of the DLIO config and trace the plan names."""
    raw = parse(path, overrides, dlio_at, trace_at)
    resolver = Resolver(raw)
    fixed = {**_implicit(raw, resolver), **raw.fixed}
    id_keys = _id_keys(raw, fixed)
    points = _grid(raw, resolver, fixed, id_keys)
    _check_search(raw, resolver, fixed, id_keys)
    if raw.checkpoint is not None:
        _check_ranks(raw, points)
    for note in raw.notes:  # now that the plan is valid: an error stays the one line
        log.warning(note)
    return Plan(name=raw.name, path=raw.path, topology=raw.topology,
                description=raw.description, repetitions=raw.repetitions,
                au_bar=resolver.au_bar, points=tuple(points), id_keys=id_keys,
                swept=tuple(raw.sweep), search=raw.search, capture=raw.capture,
                resolver=resolver)


def fixed_assignment(plan: Plan) -> dict[Key, Any]:
    """The assignment every point of the plan starts from ([fixed], -p, implicit)."""
    return {**_implicit(plan.resolver.raw, plan.resolver), **plan.resolver.raw.fixed}
