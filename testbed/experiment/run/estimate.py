"""`testbed run FILE --check`: the validated plan, resolved as a typical lab kernel would
resolve it (resolve.nominal), as a table and an estimate of how long it will take,
without touching the kernel. distribute sizes its jobs' timeouts from the same estimate.

The estimate adds, per testbed (points sharing topology, nfsd and dataset), the set-up
(network, dataset generation, nfsd's grace period) and, per point and repetition, the
mount/teardown overhead, any data-path preparation, the warm-up and the measured window
at the slower of the emulated compute and the reads the link and window allow. It is a planning figure
for a lab kernel that keeps up, not a measurement.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from rich.table import Table

from testbed.topology import SiteTopo, worker_hosts
from testbed.experiment.resolve import explain, resolve
from testbed.experiment.plan import kinds
from testbed.experiment.run import search as search_mod
from testbed.experiment.measure.measure import warmup_bytes
from testbed.experiment.plan.plan import Plan, Point, format_value
from testbed.model.write import write_bound
from testbed.workload.dlio_checkpoint import CheckpointJob

SITE_SETUP_S = 4.0          # namespaces, links, nfsd start (lab kernel, measured ~3-4 s)
DATASET_MB_S = 150.0        # dataset generation into tmpfs in the lab kernel
POINT_OVERHEAD_S = 2.0      # fibre change, drop_caches, mounts, loader start, unmounts
CHECKPOINT_OVERHEAD_S = 1.0  # per checkpoint: rank processes' barrier, drop_caches, checks
READ_REQUEST = 1 << 20      # a checkpoint is read back in 1 MiB reads (measure_checkpoint)
COLD_WINDOW = 10 * 1448     # TCP's initial window, where an idle connection restarts


def _read_MB_s(point: Point, topo: SiteTopo, fetch: bool = False) -> float:
    """A worker's expected read rate: the model's prediction for the first worker, with
    the kernel's default read-ahead (128 KiB) where the mount leaves it, and the TCP
    buffers the engine would set (2 x BDP, at least 6 MiB). fetch: over the fibre, as
    fast as it goes (a cache fill or staging copy)."""
    return explain.planned_bounds(topo, point, worker_hosts(topo)[0],
                                  fetch=fetch).predicted / 1e6


def _dilated_and_lossy(point: Point) -> bool:
    """Whether a point runs at k > 1 (or auto) over a lossy path: its recovery from a
    loss then meets the kernel's fixed timers k times sooner in emulated time."""
    dilated = point.value("time_scale") == "auto" or point.time_scale > 1
    return dilated and any(f.loss_pct > 0 for _, f in point.fibres)


def dilated_cubic_under_loss(point: Point) -> bool:
    """Whether a point runs CUBIC over a lossy path at k > 1 (or auto): its
    window then grows on the undilated kernel clock (docs/time-dilation.md)."""
    return _dilated_and_lossy(point) and point.congestion == "cubic"


def dilated_delayed_ack_under_loss(point: Point) -> bool:
    """Whether a point delays ACKs over a lossy path at k > 1 (or auto): the delayed-ACK
    timer's 40 ms floor stays 40 ms while the round trip is k times longer."""
    return _dilated_and_lossy(point) and point.delayed_ack


def dilated_loss_probe_under_loss(point: Point) -> bool:
    """Whether a point sends tail loss probes over a lossy path at k > 1 (or auto): a
    probe's two-jiffy allowance stays fixed while the round trip is k times longer, and
    each probe is an extra wire packet that shifts the seeded loss draw."""
    return _dilated_and_lossy(point) and point.loss_probe


# What --check says when a plan has points a fixed kernel timer makes read differently
# under time dilation: (which points, the note).
CLOCK_NOTES: tuple[tuple[Callable[[Point], bool], str], ...] = (
    (dilated_cubic_under_loss,
     "note: CUBIC with loss under time dilation grows its window on the real clock (as "
     "over a k times longer round trip): those points are the dilated CUBIC's, not the "
     "scenario's (the model says so); congestion = \"reno\" counts round trips and is "
     "invariant"),
    (dilated_delayed_ack_under_loss,
     "note: delayed ACKs with loss under time dilation keep their 40 ms floor in real "
     "time, k times shorter in emulated time: such points read a little high (Reno, "
     "1,000 km, 0.1 % loss, k = 10: +1.5 AU points, +5.7 %); delayed_ack = false (route "
     "quickack) removes most of it"),
    (dilated_loss_probe_under_loss,
     "note: tail loss probes with loss under time dilation fire two jiffies (20 ms at HZ "
     "= 100) after 2 x srtt in real time, and each is an extra packet that shifts the "
     "seeded draw: such points meet other losses than at k = 1 (Reno, 1,000 km, 0.1 % "
     "loss: k = 2 read 7 % below k = 10 with them, within 1.6 % without); loss_probe = "
     "false removes them"),
)


def point_seconds(point: Point, topo: SiteTopo) -> float:
    """Estimated wall time of one repetition of a point: overhead, preparation, warm-up
    (its bytes at the expected rate) and the measured window (longer when reads, not
    compute, set the pace: the AU interval then takes longer to narrow)."""
    wl = point.workload
    rate = max(_read_MB_s(point, topo), 1e-3)
    demand = wl.batch * point.dataset.sample_bytes(wl.access) / 1e6 / \
        max(wl.compute_ms / 1000.0, 1e-6)
    rtt = max((f.rtt_ms for _, f in point.fibres), default=0.0)
    warm = max(0.5, warmup_bytes(point, rtt, rate * 8) / 1e6 / min(rate, demand))
    step = wl.batch * point.dataset.sample_bytes(wl.access) / 1e6 / min(rate, demand)
    slow = max(min(wl.measure_max_s, 2 * wl.measure_s), wl.measure_stall_s)
    measure = max(wl.measure_s if rate >= demand else slow, wl.min_steps * step)
    prep = 0.0 if point.data_path == "direct" else \
        point.dataset.total_bytes / 1e6 / max(_read_MB_s(point, topo, fetch=True), 1e-3)
    return POINT_OVERHEAD_S + point.time_scale * (prep + min(warm, wl.warmup_max_s) + measure)


def run_seconds(plan: Plan, point: Point) -> float:
    """Estimated wall time of one repetition of a point of `plan`, by its kind: a
    checkpoint's (checkpoint_seconds) or a loader's (point_seconds)."""
    topo = plan.resolver.topo(point)
    job = plan.resolver.raw.checkpoint
    return point_seconds(point, topo) if job is None else \
        checkpoint_seconds(job, point, topo)


def checkpoint_seconds(job: CheckpointJob, point: Point, topo: SiteTopo) -> float:
    """Estimated wall time of a checkpoint point: k x (each checkpoint's training
    interval and write, each read back), the write and the read back both taken at the
    write model's time for rank 0 (the largest): at a distance the round trips, k times
    longer in real time, are most of it."""
    files = kinds.rank_files(point, 0, job)
    _, rmem = explain.planned_inputs(point)
    path = explain.write_path(topo, point, worker_hosts(topo)[0], rmem)
    interval = kinds.interval_s(point, job) * float(point.value("workload_scale"))
    write_s = write_bound(path, files, idle_s=interval).seconds
    request = min(point.mount.rsize, READ_REQUEST)
    read_s = sum(1 + cold_read_rtts(n, request, path.connections,
                                    int(path.buffer_bytes * path.window_share))
                 for n in files) * path.rtt_s + sum(files) / path.share_Bps
    emulated = job.writes * (interval + write_s) + job.reads * read_s
    return POINT_OVERHEAD_S + (job.writes + job.reads) * CHECKPOINT_OVERHEAD_S + \
        point.time_scale * emulated


def cold_read_rtts(nbytes: int, request: int, connections: int, cap: int) -> int:
    """Round trips to read a file of `nbytes` in sequential requests of `request` bytes,
    one at a time, spread round-robin over `connections` that start cold (an idle TCP
    connection restarts from 10 segments) and double their window each round trip up to
    `cap`. A planning figure for a checkpoint's read back: with nconnect 8 every
    connection pays its own slow start (1,000 km, llama3 8B at 1/1000: 0.59 s read back
    with 8 connections against 0.13 s with one, docs/results/checkpoint); with one it
    overstates by ~1.5x (the read-ahead overlaps requests)."""
    cwnd, rtts = [COLD_WINDOW] * max(1, connections), 0
    for i, start in enumerate(range(0, nbytes, request)):
        left, c = min(request, nbytes - start), i % len(cwnd)
        while left > 0:
            left -= min(cwnd[c], left)
            cwnd[c] = min(2 * cwnd[c], max(cap, COLD_WINDOW))
            rtts += 1
    return rtts


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
        grid += plan.repetitions * run_seconds(plan, p)
    search = 0.0
    if plan.search is not None:
        mean = sum(run_seconds(plan, p) for p in plan.points) / max(1, len(plan.points))
        search = search_mod.max_runs(plan) * mean
    return grid, search


def _table(plan: Plan) -> tuple[Table, int]:
    """The plan's points as a table (a row per point, its testbed numbered), and how
    many testbeds they need."""
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
                      "yes" if p.is_baseline else "", str(p.workers), str(p.value("mount")),
                      p.data_path, str(g))
    return table, len(groups)


def describe(plan: Plan) -> tuple[Table, list[str]]:
    """The plan's points as a table, and summary lines (counts, search, estimate).

    The plan comes resolved (for time_scale "auto": resolve.nominal, at a typical lab
    kernel's capacity), so that the estimate uses the k a run would."""
    if not resolve.is_resolved(plan):
        raise ValueError(f"{plan.path}: resolve the plan (resolve.nominal) to estimate it")
    table, testbeds = _table(plan)
    grid, search = estimate_seconds(plan)
    lines = [f"{len(plan.points) * plan.repetitions} runs on {testbeds} testbed(s); "
             f"every point has its co-located baseline in the plan"]
    if plan.auto_scale:
        ks = ", ".join(f"{k:g}" for k in sorted({p.time_scale for p in plan.points}))
        lines.append("time_scale auto: k is chosen when the run starts, from a calibration "
                     f"of what the lab kernel moves per CPU; at {plan.capacity_MB_s:g} MB/s "
                     f"(user-mode Linux on a recent x86 core) it would be {ks}")
    lines += [note for rule, note in CLOCK_NOTES if any(rule(p) for p in plan.points)]
    if plan.search is not None:
        s = plan.search
        lines.append(f"search: {s.text} over {s.key.text} {format_value(s.lo)}..."
                     f"{format_value(s.hi)} to within {format_value(s.tolerance)}, for each of "
                     f"{len(search_mod.search_settings(plan.resolver.raw))} setting(s); about "
                     f"{search_mod.expected_probes(plan)} probes each (at most {s.max_points}); "
                     f"a probe whose interval holds the target is measured again, up to "
                     f"{s.max_runs} runs")
    total = grid + search
    lines.append(f"estimated run time: {math.ceil(grid / 60)} min for the grid"
                 + (f", up to {math.ceil(search / 60)} min for the search" if search else "")
                 + f" (about {math.ceil(total / 60)} min in all, if the lab kernel keeps up)")
    return table, lines
