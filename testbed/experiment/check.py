"""`testbed run FILE --check`: the validated plan as a table and an estimate of how long
it will take, without touching the kernel.

The estimate adds, per testbed (points sharing topology, nfsd and dataset), the set-up
(network, dataset generation, nfsd's grace period) and, per point and repetition, the
mount/teardown overhead, any data-path preparation and the measured steps at the slower
of the emulated compute and the reads the link and window allow. It is a planning figure
for a lab kernel that keeps up, not a measurement.
"""

from __future__ import annotations

import math

from rich.table import Table

from testbed import results
from testbed.experiment import search as search_mod
from testbed.experiment.plan import Plan, Point, format_value

SITE_SETUP_S = 4.0          # namespaces, links, nfsd start (lab kernel, measured ~3-4 s)
DATASET_MB_S = 150.0        # dataset generation into tmpfs in the lab kernel
POINT_OVERHEAD_S = 2.0      # fibre change, drop_caches, mounts, loader start, unmounts


def _read_MB_s(point: Point) -> float:
    """A worker's expected read rate: the link's fair share, the window/RTT bound."""
    rtt = max((f.rtt_ms for _, f in point.fibres), default=0.0)
    rate = min((f.rate_mbit for _, f in point.fibres), default=10_000.0) / 8 / point.workers
    wl, m = point.workload, point.mount
    if point.data_path != "direct" or rtt <= 0:
        return rate
    return min(rate, results.window_bound_MB_s(
        wl.readers, m.rsize, m.read_ahead_kb, point.dataset.sample_bytes(wl.access), rtt,
        wl.read_kib << 10, meta_rtts=1 if wl.access == "file" else 0))


def point_seconds(point: Point) -> float:
    """Estimated wall time of one repetition of a point."""
    wl = point.workload
    step_mb = wl.batch * point.dataset.sample_bytes(wl.access) / 1e6
    step = max(wl.compute_ms / 1000.0, step_mb / max(_read_MB_s(point), 1e-3))
    prep = 0.0 if point.data_path == "direct" else \
        point.dataset.total_bytes / 1e6 / max(_read_MB_s(point), 1e-3)
    return POINT_OVERHEAD_S + prep + wl.steps * step


def site_seconds(point: Point) -> float:
    """Estimated set-up time of a testbed for a point's group."""
    return SITE_SETUP_S + point.dataset.total_bytes / 1e6 / DATASET_MB_S + \
        point.server.grace_s + 0.5


def estimate_seconds(plan: Plan) -> tuple[float, float]:
    """(grid, search at most) estimated seconds."""
    grid, group = 0.0, None
    for p in plan.points:
        if p.group != group:
            grid, group = grid + site_seconds(p), p.group
        grid += plan.repetitions * point_seconds(p)
    search = 0.0
    if plan.search is not None:
        mean = sum(point_seconds(p) for p in plan.points) / max(1, len(plan.points))
        search = search_mod.max_runs(plan) * mean
    return grid, search


def describe(plan: Plan) -> tuple[Table, list[str]]:
    """The plan's points as a table, and summary lines (counts, search, estimate)."""
    table = Table(title=f"{plan.name} ({plan.path}): {len(plan.points)} points x "
                        f"{plan.repetitions} repetition(s) on topology {plan.topology}",
                  title_justify="left")
    cols = [k.column for k in plan.id_keys]
    for c in cols + ["baseline", "workers", "mount", "data path", "testbed"]:
        table.add_column(c, justify="right", no_wrap=True)
    groups: dict[tuple, int] = {}
    for p in plan.points:
        g = groups.setdefault(p.group, len(groups) + 1)
        table.add_row(*[format_value(v) for _, v in p.ident],
                      "yes" if p.is_baseline else "", str(p.workers),
                      f"{p.value('mount')}: {p.mount.options().split(',proto')[0]}",
                      p.data_path, str(g))
    grid, search = estimate_seconds(plan)
    lines = [f"{len(plan.points) * plan.repetitions} runs on {len(groups)} testbed(s); "
             f"every point has its co-located baseline in the plan"]
    if plan.search is not None:
        s = plan.search
        lines.append(f"search: {s.text} over {s.key.text} {format_value(s.lo)}..."
                     f"{format_value(s.hi)} to within {format_value(s.tolerance)}, for each of "
                     f"{len(search_mod.search_settings(plan.resolver.raw))} setting(s); about "
                     f"{search_mod.expected_probes(plan)} probes each (at most {s.max_points})")
    total = grid + search
    lines.append(f"estimated run time: {math.ceil(grid / 60)} min for the grid"
                 + (f", up to {math.ceil(search / 60)} min for the search" if search else "")
                 + f" (about {math.ceil(total / 60)} min in all, if the lab kernel keeps up)")
    return table, lines
