"""Measuring one point on a site: its fibres set live, cold caches, fresh mounts on every
worker, its data path prepared, one loader per worker feeding its emulated accelerator,
and one results row per worker. Everything the point sets up is pushed on the point's own
teardown stack, undone in reverse even when the point fails.

Rows have one fixed set of columns per plan (columns()): who and what (point, repetition,
status, reason, worker, site), every knob's value (fibre knobs per link), the worker's
path (km, RTT, rate, loss), the measurements (AU, samples/s, MB/s, stall, preparation)
and their context (guest CPU busy, the kernel's read-ahead, bounds).
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed import results, topology, workload
from testbed.errors import PointFailed
from testbed.experiment import capture as capture_mod
from testbed.experiment.datapaths import REGISTRY as DATA_PATHS
from testbed.experiment.datapaths import drop_caches
from testbed.experiment.plan import Plan, Point, format_value
from testbed.experiment.site import Site
from testbed.services.nfs import NfsMount

RUN = ("point", "repetition", "status", "reason", "baseline", "baseline_point", "worker",
       "site")
PATH = ("path_km", "rtt_ms", "path_rate_mbit", "path_loss_pct", "mss_bytes")
METRICS = ("au_pct", "samples_per_s", "throughput_MB_s", "stall_s", "wall_s",
           "step_wait_median_ms", "steps_measured", "prep_s")
CONTEXT = ("cpu_busy_pct", "read_ahead_kb_kernel", "window_bound_MB_s", "mathis_MB_s",
           "link_MB_s")


def columns(plan: Plan) -> list[str]:
    """results.csv's columns for this plan (the same for every row, failed ones too)."""
    first = plan.points[0]
    knob_cols = [k.column for k, _ in first.settings]
    ident = [k.column for k in plan.id_keys if k.column not in knob_cols]
    extra = [*capture_mod.COLUMNS, "captured"] if plan.capture else []
    return [*RUN, *ident, *knob_cols, *PATH, *METRICS, *CONTEXT, *extra]


@dataclass(frozen=True)
class Path_:
    """A worker's path from the storage host: the fibre spans it crosses, combined."""

    km: float
    rtt_ms: float
    rate_mbit: float
    loss_pct: float
    mss_bytes: int


def path_of(site: Site, point: Point, worker: str) -> Path_:
    """The combined figures of the fibres between the storage host and `worker`."""
    names = [n for n, _ in topology.path_fibres(site.topo, worker)]
    specs = [point.fibre(n) for n in names]
    if not specs:
        return Path_(0.0, 0.0, math.inf, 0.0, int(point.value("mtu")) - 52)
    keep = math.prod(1 - s.loss_pct / 100 for s in specs)
    return Path_(sum(s.distance_km for s in specs), sum(s.rtt_ms for s in specs),
                 min(s.rate_mbit for s in specs), 100 * (1 - keep), specs[0].mss_bytes)


def _cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs from /proc/stat."""
    with open("/proc/stat") as fh:
        fields = [float(x) for x in fh.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
    return sum(fields) - idle, sum(fields)


def base_row(plan: Plan, point: Point, rep: int, worker: str, site_name: str) -> dict[str, Any]:
    """A row with the point's identity and every knob's value; metrics blank (NaN)."""
    row: dict[str, Any] = dict.fromkeys(columns(plan), math.nan)
    row.update({"point": point.run_id(rep), "repetition": rep, "status": "ok", "reason": "",
                "baseline": point.is_baseline, "baseline_point": point.baseline_id,
                "worker": worker, "site": site_name})
    for key, value in point.ident:
        row[key.column] = format_value(value) if isinstance(value, tuple) else value
    for key, value in point.settings:
        row[key.column] = format_value(value) if isinstance(value, tuple) else value
    return row


def failed_rows(plan: Plan, point: Point, rep: int, reason: str,
                workers: list[str]) -> list[dict[str, Any]]:
    """The rows of a point that could not be measured: status failed, the reason, no
    measurements."""
    rows = []
    for w in workers or [""]:
        row = base_row(plan, point, rep, w, "")
        row.update({"status": "failed", "reason": reason.replace("\n", " ")[:500]})
        rows.append(row)
    return rows


def _bounds(point: Point, path: Path_) -> dict[str, float]:
    """The window/RTT and Mathis bounds of this worker's path (MB/s)."""
    wl, m = point.workload, point.mount
    link = path.rate_mbit / 8
    window = link
    if point.data_path == "direct":
        window = min(link, results.window_bound_MB_s(
            wl.readers, m.rsize, m.read_ahead_kb, point.dataset.sample_bytes(wl.access),
            path.rtt_ms, wl.read_kib << 10, meta_rtts=1 if wl.access == "file" else 0))
    return {"window_bound_MB_s": window, "link_MB_s": link,
            "mathis_MB_s": results.mathis_MB_s(path.rtt_ms, path.loss_pct, m.nconnect,
                                               mss=path.mss_bytes)}


def _run_loaders(roots: list[Path], spec: workload.WorkloadSpec) -> list[workload.LoaderRun]:
    with ThreadPoolExecutor(len(roots)) as pool:
        return list(pool.map(lambda r: workload.run_loader(r, spec), roots))


def measure(plan: Plan, site: Site, point: Point, rep: int, out: Path) -> list[dict[str, Any]]:
    """Measure one repetition of a point on a running site; its rows, one per worker.

    Raises PointFailed (or the service's error) when the point cannot be measured; its
    teardown stack has run by then."""
    state = site.net.state
    with ExitStack() as stack:
        site.apply(point)
        drop_caches()
        data_path = DATA_PATHS[point.data_path]()
        data_path.before_mount(site.net, point, stack)
        state.set_phase("mounts")
        assert site.server is not None
        mounts = [stack.enter_context(NfsMount(site.net, w, site.server, point.mount))
                  for w in site.workers]
        prepared = data_path.prepare(site.net, point, mounts, stack)
        cap = None
        if plan.capture is not None and rep == 0:
            state.set_phase("capture")
            cap = capture_mod.start(site.net, site.workers[0], plan.capture, point.id, stack)
        state.set_phase("loader")
        busy0, total0 = _cpu_times()
        runs = _run_loaders([p.root for p in prepared], point.workload)
        busy1, total1 = _cpu_times()
        ra = [m.read_ahead_kb() for m in mounts]
        cpu = 100.0 * (busy1 - busy0) / max(1.0, total1 - total0)
        rows = _rows(plan, site, point, rep, runs, prepared, ra, cpu)
        if cap is not None:
            _add_capture(plan, cap, rows, site, point, out)
    state.set_phase("between points")
    return rows


def _rows(plan: Plan, site: Site, point: Point, rep: int, runs: list[workload.LoaderRun],
          prepared: list[Any], ra: list[int], cpu: float) -> list[dict[str, Any]]:
    """One row per worker; PointFailed if any worker's loader hit an I/O error."""
    errors = [f"{w}: {r.error}" for w, r in zip(site.workers, runs) if r.error]
    if errors:
        raise PointFailed("; ".join(errors))
    rows = []
    for w, run, prep, ra_kb in zip(site.workers, runs, prepared, ra):
        path = path_of(site, point, w)
        row = base_row(plan, point, rep, w, topology.site_of(site.topo, w))
        row.update({"path_km": path.km, "rtt_ms": path.rtt_ms,
                    "path_rate_mbit": path.rate_mbit, "path_loss_pct": path.loss_pct,
                    "mss_bytes": path.mss_bytes, **workload.summarise(run, point.workload),
                    "steps_measured": len(run.steps) - point.workload.warmup_steps,
                    "prep_s": prep.prep_s, "cpu_busy_pct": cpu,
                    "read_ahead_kb_kernel": ra_kb, **_bounds(point, path)})
        if plan.capture is not None:
            row["captured"] = False
        rows.append(row)
    return rows


def _add_capture(plan: Plan, cap: Any, rows: list[dict[str, Any]], site: Site,
                 point: Point, out: Path) -> None:
    """The capture's analysis into the first worker's row."""
    assert plan.capture is not None
    path = path_of(site, point, site.workers[0])
    rows[0].update(capture_mod.analyse(cap, plan.capture, out, point.id, path.rate_mbit,
                                       path.rtt_ms))
    rows[0]["captured"] = True
