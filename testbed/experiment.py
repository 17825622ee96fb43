"""Experiments: a TOML file -> the cartesian sweep of any spec fields on one testbed, with
the co-located point (0 km, no loss, same settings) as the baseline of the same run.

File layout (see experiments/*.toml):
    name, topology ("apn"), repetitions, au_bar
    [fixed]            any sweepable key -> one value (alias: [topology_params])
    [sweep]            any sweepable key -> list of values:
                         fibre (set live):   distance_km, loss_pct, rate, jitter_ms
                         topology (rebuilt): workers
                         mount:  mount (a [mounts.NAME] profile), vers, rsize, nconnect,
                                 read_ahead_kb, actimeo_s, nocto
                         loader: batch, compute_ms, readers, prefetch, reader_kind,
                                 access, read_kib, shuffle
                         data_path: direct | cache | staged
    [mounts.NAME]      MountSpec fields
    [dataset]          files, file_kib, format, records_per_file
    [workload]         preset (+ scale), WorkloadSpec fields
    [cache] size_mib   [staging] parallel
    [server]           NfsServerSpec fields: threads (8), versions (["4.1", "4.2"])
    [capture]          packet capture on the first worker during repetition 0 of every
                       point: seconds (120), max_mib (256), keep_pcap (false); writes
                       capture/<point>/{rpcs.csv,timeline.csv,summary.json,inflight.png}
                       and adds the in-flight columns to that point's row. Capturing
                       costs CPU: compare captured rows with each other (column captured).

Per point: the fibre is set live, client caches dropped, every worker mounts fresh (cold
reads), prepares its data path (cache: one pass fills FS-Cache through the fibre; staged:
the set is copied to the GPU site; both timed as prep_s), runs one loader, and its rows
are appended to results.csv at once. The baseline of each point is measured before it.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import re
import statistics
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from testbed import results, topology, workload
from testbed.errors import SpecError, TestbedError
from testbed.network.engine import Network
from testbed.packets import nfs_rpc
from testbed.packets.capture import Capture
from testbed.services.fscache import CacheFiles
from testbed.services.nfs import NfsMount, NfsServer
from testbed.services.stage import StagedCopy
from testbed.spec import MountSpec, NfsServerSpec

REPO = Path(__file__).resolve().parent.parent
DEMO_FILE = REPO / "experiments" / "demo.toml"

FIBRE_KEYS = ("distance_km", "loss_pct", "rate", "jitter_ms")
TOPOLOGY_KEYS = ("workers",)
MOUNT_KEYS = ("mount", "vers", "rsize", "nconnect", "read_ahead_kb", "actimeo_s", "nocto")
LOADER_KEYS = ("batch", "compute_ms", "readers", "prefetch", "reader_kind", "access",
               "read_kib", "shuffle")
DATA_PATHS = ("direct", "cache", "staged")
CAPTURE_COLUMNS = ("reads_in_flight_mean", "read_bytes_in_flight_mean", "bdp_bytes",
                   "in_flight_of_bdp", "read_size_median", "read_latency_median_ms",
                   "retransmitted_to_client", "capture_dropped")
SWEEPABLE = FIBRE_KEYS + TOPOLOGY_KEYS + MOUNT_KEYS + LOADER_KEYS + ("data_path",)
# Impairments the co-located baseline does not have.
BASELINE_ZERO = ("distance_km", "loss_pct", "jitter_ms")


@dataclasses.dataclass(frozen=True)
class CaptureOption:
    seconds: float = 120.0
    max_mib: int = 256
    keep_pcap: bool = False

    @classmethod
    def from_dict(cls, where: str, cfg: dict[str, Any]) -> CaptureOption | None:
        cfg = dict(cfg)
        if not cfg.pop("enabled", True):
            return None
        unknown = set(cfg) - {"seconds", "max_mib", "keep_pcap"}
        if unknown:
            raise SpecError(f"{where}: [capture] unknown key(s) {', '.join(sorted(unknown))}; "
                            "known: enabled, seconds, max_mib, keep_pcap")
        opt = cls(**cfg)
        if not (opt.seconds > 0 and isinstance(opt.max_mib, int) and opt.max_mib > 0
                and isinstance(opt.keep_pcap, bool)):
            raise SpecError(f"{where}: [capture] needs seconds > 0, an integer max_mib > 0 "
                            "and a boolean keep_pcap")
        return opt


@dataclasses.dataclass
class Plan:
    name: str
    topology: str
    repetitions: int
    au_bar: float
    fixed: dict[str, Any]
    sweep: dict[str, list[Any]]
    mounts: dict[str, MountSpec]
    workload: workload.WorkloadSpec
    files: int
    file_bytes: int
    fmt: str
    records_per_file: int
    cache_mib: int
    stage_parallel: int
    capture: CaptureOption | None = None
    server: NfsServerSpec = NfsServerSpec()

    def points(self) -> list[dict[str, Any]]:
        """Every combination, the baseline impairments innermost and ascending, so that a
        point's baseline (same settings at 0) is measured before it."""
        keys = [k for k in self.sweep if k not in BASELINE_ZERO] + \
               [k for k in BASELINE_ZERO if k in self.sweep]
        values = [sorted(self.sweep[k]) if k in BASELINE_ZERO else self.sweep[k] for k in keys]
        return [dict(zip(keys, combo)) for combo in itertools.product(*values)]

    def value(self, point: dict[str, Any], key: str, default: Any = None) -> Any:
        return point.get(key, self.fixed.get(key, default))


def _check_key(key: str, where: str) -> None:
    if key not in SWEEPABLE:
        raise SpecError(f"{where}: unknown key {key!r}; sweepable: {', '.join(SWEEPABLE)}")


def load(path: str | Path) -> Plan:
    p = Path(path)
    if not p.is_file():
        raise SpecError(f"experiment file {p} not found")
    try:
        cfg = tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{p}: {exc}") from None
    fixed = dict(cfg.get("topology_params", {}))
    fixed.update(cfg.get("fixed", {}))
    for k in fixed:
        _check_key(k, f"{p}: [fixed]")
    sweep: dict[str, list[Any]] = {}
    for k, v in cfg.get("sweep", {}).items():
        _check_key(k, f"{p}: [sweep]")
        vals = v if isinstance(v, list) else [v]
        if not vals:
            raise SpecError(f"{p}: [sweep] {k} is empty")
        sweep[k] = vals
    for k in BASELINE_ZERO:  # the co-located baseline is always measured
        if k in sweep and 0 not in sweep[k]:
            sweep[k] = [0, *sweep[k]]
    if "distance_km" not in sweep:
        sweep["distance_km"] = sorted({0, fixed.pop("distance_km", 0)})
    mounts = {name: MountSpec.from_dict(m) for name, m in cfg.get("mounts", {}).items()}
    mounts.setdefault("default", MountSpec())
    for m in sweep.get("mount", [fixed.get("mount", "default")]):
        if m not in mounts:
            raise SpecError(f"{p}: mount profile {m!r} has no [mounts.{m}]")
    for dp in sweep.get("data_path", [fixed.get("data_path", "direct")]):
        if dp not in DATA_PATHS:
            raise SpecError(f"{p}: data_path {dp!r}; known: {', '.join(DATA_PATHS)}")
    wl_cfg = dict(cfg.get("workload", {}))
    ds = dict(cfg.get("dataset", {}))
    preset_name = wl_cfg.pop("preset", None)
    scale = float(wl_cfg.pop("scale", 1.0))
    if preset_name:
        pr = workload.preset(preset_name, scale)
        ds.setdefault("file_kib", max(4, pr["sample_bytes"] // 1024))
        for k in ("batch", "compute_ms", "readers", "au_bar"):
            wl_cfg.setdefault(k, pr[k])
    try:
        wl = workload.WorkloadSpec(**wl_cfg)
    except TypeError as exc:
        raise SpecError(f"{p}: [workload]: {exc}") from None
    fmt = ds.get("format", "raw")
    if fmt not in workload.FORMATS:
        raise SpecError(f"{p}: [dataset] format {fmt!r}; known: {', '.join(workload.FORMATS)}")
    reps = cfg.get("repetitions", 1)
    if not isinstance(reps, int) or reps < 1:
        raise SpecError(f"{p}: repetitions must be an integer >= 1, got {reps!r}")
    plan = Plan(name=cfg.get("name", p.stem), topology=cfg.get("topology", "apn"),
                repetitions=reps, au_bar=float(cfg.get("au_bar", wl.au_bar)), fixed=fixed,
                sweep=sweep, mounts=mounts, workload=wl, files=int(ds.get("files", 64)),
                file_bytes=int(ds.get("file_kib", 1024)) * 1024, fmt=fmt,
                records_per_file=int(ds.get("records_per_file", 8)),
                cache_mib=int(cfg.get("cache", {}).get("size_mib", 1024)),
                stage_parallel=int(cfg.get("staging", {}).get("parallel", 4)),
                capture=CaptureOption.from_dict(str(p), cfg["capture"]) if "capture" in cfg
                else None, server=_server_spec(str(p), cfg.get("server", {})))
    for point in plan.points()[:1]:  # validate the specs a point builds, before any work
        _mount_spec(plan, point)
        _workload_spec(plan, point)
    return plan


def _server_spec(where: str, cfg: dict[str, Any]) -> NfsServerSpec:
    try:
        return NfsServerSpec(**cfg)
    except TypeError as exc:
        raise SpecError(f"{where}: [server]: {exc}") from None


def _mount_spec(plan: Plan, point: dict[str, Any]) -> MountSpec:
    base = plan.mounts[plan.value(point, "mount", "default")]
    changes = {k: plan.value(point, k) for k in MOUNT_KEYS[1:]
               if plan.value(point, k) is not None}
    changes["fsc"] = plan.value(point, "data_path", "direct") == "cache"
    return MountSpec.from_dict({**dataclasses.asdict(base), **changes})


def _workload_spec(plan: Plan, point: dict[str, Any]) -> workload.WorkloadSpec:
    changes = {k: plan.value(point, k) for k in LOADER_KEYS if plan.value(point, k) is not None}
    try:
        return dataclasses.replace(plan.workload, **changes)
    except TypeError as exc:
        raise SpecError(f"workload: {exc}") from None


def point_id(point: dict[str, Any], rep: int) -> str:
    return "|".join(f"{k}={v}" for k, v in point.items()) + f"|rep={rep}"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", text)


def _drop_caches() -> None:
    with open("/proc/sys/vm/drop_caches", "w") as fh:
        fh.write("3")


def _cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs from /proc/stat."""
    fields = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
    return sum(fields) - idle, sum(fields)


class _Runner:
    """Runs the points of one topology group on one network and nfsd."""

    def __init__(self, plan: Plan, net: Network, server: NfsServer, data_dir: Path,
                 workers: list[str], fibre_key: tuple[str, str], out: Path) -> None:
        self.plan, self.net, self.server = plan, net, server
        self.data_dir, self.workers, self.fibre_key = data_dir, workers, fibre_key
        self.out = out

    def run_point(self, point: dict[str, Any], rep: int = 0) -> list[dict[str, Any]]:
        plan = self.plan
        capture = None
        if plan.capture is not None and rep == 0:
            capture = self._capture(point)
            capture.start()
        try:
            rows = self._run_point(point)
        finally:
            if capture is not None:
                capture.stop()
        if plan.capture is None:
            return rows
        for row in rows:  # every row has the same columns (one CSV header)
            row["captured"] = capture is not None and row["worker"] == self.workers[0]
            row.update(dict.fromkeys(CAPTURE_COLUMNS, math.nan))
        if capture is not None:
            rows[0].update(self._analyse(point, capture, rows[0]))
        return rows

    def _capture(self, point: dict[str, Any]) -> Capture:
        assert self.plan.capture is not None
        w = self.workers[0]
        d = self.net.run_dir / "capture"
        if not d.exists():
            d.mkdir()
            self.net.state.add_dir(str(d))
            self.net.callback(_rmtree, d)
        opt = self.plan.capture
        return Capture(self.net.namespace(w), topology.interface_name(w, 0),
                       d / f"{_slug(point_id(point, 0))}.pcap",
                       seconds=opt.seconds, max_bytes=opt.max_mib << 20)

    def _analyse(self, point: dict[str, Any], cap: Capture, row: dict[str, Any]
                 ) -> dict[str, Any]:
        """Dissect the point's capture into capture/<point>/; the in-flight columns."""
        assert self.plan.capture is not None
        d = self.out / "capture" / _slug(point_id(point, 0))
        d.mkdir(parents=True, exist_ok=True)
        pcap = cap.result.path
        try:
            a = nfs_rpc.analyse(pcap, rate_bps=row["rate_mbit"] * 1e6,
                                rtt_s=row["rtt_ms"] / 1000.0)
            a.rpcs.to_csv(d / "rpcs.csv", index=False)
            a.timeline.to_csv(d / "timeline.csv", index=False)
            summary = {**a.summary, "capture_packets": cap.result.packets,
                       "capture_dropped": cap.result.dropped,
                       "capture_stopped_by": cap.result.stopped_by}
            (d / "summary.json").write_text(json.dumps(summary, indent=2, default=float))
            nfs_rpc.plot(a, d / "inflight.png", title=point_id(point, 0))
        finally:
            if self.plan.capture.keep_pcap:
                pcap.replace(d / "capture.pcap")
            else:
                pcap.unlink(missing_ok=True)
        return {k: summary[k] for k in CAPTURE_COLUMNS}

    def _run_point(self, point: dict[str, Any]) -> list[dict[str, Any]]:
        plan = self.plan
        live = {k: plan.value(point, k) for k in FIBRE_KEYS if plan.value(point, k) is not None}
        spec = self.net.set_fibre(*self.fibre_key, **live)
        mspec = _mount_spec(plan, point)
        wl = _workload_spec(plan, point)
        data_path = plan.value(point, "data_path", "direct")
        cache = None
        if data_path == "cache":  # a fresh, empty cache for every point
            cache = CacheFiles(self.net, size_mib=plan.cache_mib)
            cache.start()
        mounts = [NfsMount(self.net, w, self.server, mspec) for w in self.workers]
        staged: list[StagedCopy] = []
        try:
            _drop_caches()
            for m in mounts:
                m.mount()
            prep: list[float] = [0.0] * len(mounts)
            roots = [m.path for m in mounts]
            if data_path == "staged":
                staged = [StagedCopy(self.net, m.worker, m.path, plan.stage_parallel)
                          for m in mounts]
                with ThreadPoolExecutor(len(staged)) as pool:
                    prep = [r.seconds for r in pool.map(lambda s: s.stage(), staged)]
                roots = [s.path for s in staged]
            elif data_path == "cache":
                with ThreadPoolExecutor(len(mounts)) as pool:
                    prep = list(pool.map(_fill_cache, mounts))
                _drop_caches()
            busy0, total0 = _cpu_times()
            with ThreadPoolExecutor(len(mounts)) as pool:
                runs = list(pool.map(lambda r: workload.run_loader(r, wl), roots))
            busy1, total1 = _cpu_times()
        finally:
            for s in staged:
                s.remove()
            for m in mounts:
                m.unmount()
            if cache is not None:
                cache.close()
        cpu_busy = 100.0 * (busy1 - busy0) / max(1.0, total1 - total0)
        sample_bytes = (plan.file_bytes if wl.access == "file"
                        else -(-plan.file_bytes // plan.records_per_file))
        rows = []
        for w, r, prep_s in zip(self.workers, runs, prep):
            rows.append({
                **{k: plan.value(point, k) for k in SWEEPABLE if plan.value(point, k) is not None},
                "worker": w, "data_path": data_path, "rtt_ms": spec.rtt_ms,
                "rate_mbit": spec.rate_mbit, "loss_pct": spec.loss_pct,
                "jitter_ms": spec.jitter_ms, "distance_km": spec.distance_km,
                "vers": mspec.vers, "rsize": mspec.rsize, "nconnect": mspec.nconnect,
                "read_ahead_kb": mspec.read_ahead_kb or 128, "readers": wl.readers,
                "reader_kind": wl.reader_kind, "access": wl.access, "prefetch": wl.prefetch,
                "batch": wl.batch, "compute_ms": wl.compute_ms, "sample_bytes": sample_bytes,
                **workload.summarise(r, wl), "prep_s": prep_s,
                "window_bound_MB_s": min(spec.rate_mbit / 8, results.window_bound_MB_s(
                    wl.readers, mspec.rsize, mspec.read_ahead_kb, sample_bytes, spec.rtt_ms,
                    wl.read_kib << 10, meta_rtts=1 if wl.access == "file" else 0))
                if data_path == "direct" else spec.rate_mbit / 8,
                "mathis_MB_s": results.mathis_MB_s(spec.rtt_ms, spec.loss_pct, mspec.nconnect),
                "link_MB_s": spec.rate_mbit / 8, "cpu_busy_pct": cpu_busy,
                "error": r.error or "",
            })
        return rows


def _fill_cache(m: NfsMount) -> float:
    """Read the whole set once through the fsc mount (FS-Cache keeps a copy); seconds."""
    t0 = time.monotonic()
    for f in sorted(p for p in m.path.rglob("*") if p.is_file()):
        with open(f, "rb", buffering=0) as fh:
            while fh.read(1 << 20):
                pass
    return time.monotonic() - t0


def run_file(path: str | Path, out_dir: str | Path | None = None, resume: bool = False,
             console: Console | None = None) -> Path:
    console = console or Console()
    plan = load(path)
    out = Path(out_dir) if out_dir else REPO / "results" / plan.name
    store = results.ResultStore(out)
    if store.csv.exists() and not resume:
        raise SpecError(f"{store.csv} exists: use --resume to continue it or --out elsewhere")
    done = store.done() if resume else set()
    points = plan.points()
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for pt in points:
        groups.setdefault(tuple(plan.value(pt, k) for k in TOPOLOGY_KEYS), []).append(pt)
    store.write_meta({
        "experiment": plan.name, "file": str(path),
        "plan": {k: v for k, v in dataclasses.asdict(plan).items()},
        "environment": results.environment(),
        "baseline": "same settings at distance 0, no loss or jitter, same run",
        "cache": "cold client for every point (fresh mounts + drop_caches, fresh FS-Cache); "
                 "server data in memory (tmpfs)"})
    base_walls: dict[str, list[float]] = {}
    settings = [k for k in plan.sweep if k not in BASELINE_ZERO]
    prior = store.frame() if resume else None
    if prior is not None and not prior.empty:
        for _, r in prior.iterrows():
            if all(float(r.get(k, 0) or 0) == 0 for k in BASELINE_ZERO if k in r):
                base_walls.setdefault(_setting_key(r, settings), []).append(float(r["wall_s"]))
    total = len(points) * plan.repetitions
    with Progress(console=console, refresh_per_second=1,
                  disable=not console.is_terminal) as progress:
        task = progress.add_task("points", total=total)
        for topo_values, pts in groups.items():
            params = {k: v for k, v in plan.fixed.items()
                      if k in FIBRE_KEYS + TOPOLOGY_KEYS}
            params.update({k: v for k, v in zip(TOPOLOGY_KEYS, topo_values) if v is not None})
            params["distance_km"] = 0
            params.pop("loss_pct", None)
            params.pop("jitter_ms", None)
            topo = topology.build(plan.topology, params)
            todo = [(pt, rep) for pt in pts for rep in range(plan.repetitions)
                    if point_id(pt, rep) not in done]
            progress.advance(task, len(pts) * plan.repetitions - len(todo))
            if not todo:
                continue
            with Network(topo) as net:
                runner = _start_site(plan, net, topo, console, out)
                for pt, rep in todo:
                    pid = point_id(pt, rep)
                    progress.update(task, description=pid)
                    if not console.is_terminal:
                        console.print(f"point {pid}")
                    rows = runner.run_point(pt, rep)
                    key = _setting_key(pt, settings)
                    if all(float(pt.get(k, 0) or 0) == 0 for k in BASELINE_ZERO):
                        base_walls.setdefault(key, []).extend(r["wall_s"] for r in rows)
                    base = statistics.median(base_walls[key]) if base_walls.get(key) \
                        else math.nan
                    for row in rows:
                        store.append({"point": pid, "repetition": rep, **row,
                                      "slowdown_pct": 100.0 * (row["wall_s"] / base - 1.0)})
                    progress.advance(task)
    return report(out, plan, console)


def _setting_key(point: Any, settings: list[str]) -> str:
    return "|".join(f"{k}={point[k]}" for k in settings)


def _start_site(plan: Plan, net: Network, topo: topology.SiteTopo,
                console: Console, out: Path) -> _Runner:
    data_dir = net.run_dir / "dataset"
    data_dir.mkdir(exist_ok=True)
    net.state.add_dir(str(data_dir))
    net.callback(_rmtree, data_dir)
    t0 = time.monotonic()
    workload.generate(data_dir, plan.files, plan.file_bytes, plan.fmt,
                      records_per_file=plan.records_per_file)
    console.print(f"dataset: {plan.files} x {plan.file_bytes >> 10} KiB {plan.fmt} files "
                  f"generated in {time.monotonic() - t0:.1f} s")
    server = net.enter(NfsServer(net, topology.storage_hosts(topo)[0], data_dir, plan.server))
    fibres = list(net.fibre_links())
    if not fibres:
        raise SpecError("the experiment's topology has no fibre link to vary")
    return _Runner(plan, net, server, data_dir, topology.worker_hosts(topo), fibres[0], out)


def _with_slowdown(df: Any, keys: list[str]) -> Any:
    """slowdown_pct of every row against the median wall time of its baseline point (same
    settings, baseline impairments at 0, all repetitions and workers)."""
    settings = [k for k in keys if k not in BASELINE_ZERO]
    base_mask = True
    for k in BASELINE_ZERO:
        if k in df:
            base_mask = base_mask & (df[k].fillna(0) == 0)
    base = df[base_mask].groupby(settings, dropna=False)["wall_s"].median() if settings \
        else df[base_mask]["wall_s"].median()
    if settings:
        ref = df.join(base.rename("base_wall_s"), on=settings)["base_wall_s"]
    else:
        ref = base
    df["slowdown_pct"] = 100.0 * (df["wall_s"] / ref - 1.0)
    return df


def report(out: Path, plan: Plan, console: Console) -> Path:
    """Table, largest distance meeting the bar, DLIO summaries and the plot, from the CSV."""
    store = results.ResultStore(out)
    df = store.frame()
    if df.empty:
        raise TestbedError(f"{store.csv}: no results")
    keys = [k for k in plan.sweep if k in df.columns]
    df = _with_slowdown(df, keys)
    store.write_parquet(df)
    s = results.summary(df, keys)
    table = Table(title=f"{plan.name}: medians over workers x repetitions; +- = AU spread; "
                        "bound = window/RTT MB/s", title_justify="left")
    show_prep = bool((s["prep_s"] > 0).any())
    show_note = bool(s["cpu_bound"].any())
    cols = [k.replace("distance_km", "km") for k in keys] + ["RTT ms", "MB/s", "AU %", "+-",
                                                              "slow %"]
    cols += (["prep s"] if show_prep else []) + ["bound"] + (["note"] if show_note else [])
    for col in cols:
        table.add_column(col, justify="right", no_wrap=True)
    for _, r in s.iterrows():
        cells = [f"{r[k]:g}" if isinstance(r[k], float) else str(r[k]) for k in keys]
        cells += [f"{r['rtt_ms']:.2f}", f"{r['throughput_MB_s']:.1f}", f"{r['au_pct']:.1f}",
                  f"{r['au_pct_spread']:.1f}", f"{r['slowdown_pct']:.1f}"]
        cells += ([f"{r['prep_s']:.1f}"] if show_prep else []) + \
            [f"{r['window_bound_MB_s']:.0f}"] + \
            (["CPU-bound" if r["cpu_bound"] else ""] if show_note else [])
        table.add_row(*cells)
    console.print(table)
    settings = [k for k in keys if k != "distance_km"]
    if len(plan.sweep.get("distance_km", [])) > 1:
        for name, km in results.max_distance_meeting_bar(df, plan.au_bar, settings).items():
            console.print(f"largest distance with AU >= {plan.au_bar:g}%: {name}: "
                          + ("none" if km is None else f"{km:g} km"))
    dlio = out / "dlio"
    for values, rows in df.groupby(keys, sort=True, dropna=False):
        vals = values if isinstance(values, tuple) else (values,)
        d = dlio / _slug("_".join(f"{k}={v}" for k, v in zip(keys, vals)))
        d.mkdir(parents=True, exist_ok=True)
        (d / "summary.json").write_text(json.dumps(results.dlio_summary(rows, plan.au_bar),
                                                   indent=2))
    x = "distance_km" if len(plan.sweep.get("distance_km", [])) > 1 else keys[0]
    png = results.plot(df, out / f"throughput_au_vs_{x}.png", plan.au_bar, x,
                       [k for k in keys if k != x])
    console.print(f"results: {store.csv}  summaries: {dlio}/*/summary.json  plot: {png}")
    if any(k for k in df.get("error", []) if isinstance(k, str) and k):
        console.print("[yellow]some points reported I/O errors: see the error column[/]")
    return out


def _rmtree(path: Path) -> None:
    import shutil
    shutil.rmtree(path, ignore_errors=True)

