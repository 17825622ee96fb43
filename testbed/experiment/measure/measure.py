"""Measuring one point on a rig: its fibres set live, cold caches, fresh mounts on every
worker, its data path prepared, one loader per worker feeding its emulated accelerator,
and one results row per worker (in record's columns). Everything the point sets up is
pushed on the point's own teardown stack, undone in reverse even when the point fails.

This runs in the lab kernel: it records what the host's scheduler gave the kernel (lab/run's
meter, host_cpu_pct and host_wait_pct) but leaves marking a starved run to whoever
receives its rows (marks.host_mark_rows).

A stuck read is bounded twice. The loader fails a batch not read within
workload.READ_TIMEOUT_S x k (300 s at k = 1), whatever the cause. And while the loaders
read through the mounts, the storage host's nfsd is checked every SERVER_CHECK_S (1 s):
once it has stopped serving (a hard mount, the default, would otherwise retry for ever)
the mounts are shut down (NfsMount.shutdown), the blocked reads fail at once, and the
point fails with a reason naming the server: its failed row was written 0.7-0.8 s after
`rpc.nfsd 0` in the lab kernel (UML 7.2.7, 2026-12-06, tests/system/test_server_faults.py).
On a kernel without the client's shutdown knob the loader's bound is what is left.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed import model, topology, workload
from testbed.errors import PointFailed
from testbed.experiment.measure import capture as capture_mod
from testbed.experiment.measure import event_cost
from testbed.experiment.resolve import explain as explain_mod
from testbed.experiment.plan import kinds
from testbed.experiment.measure import measure_checkpoint, measure_trace
from testbed.experiment.record import record
from testbed.experiment.plan.datapaths import REGISTRY as DATA_PATHS
from testbed.experiment.plan.datapaths import drop_caches
from testbed.experiment.plan.plan import Plan, Point
from testbed.experiment.measure.rig import Rig, counters
from testbed.services.nfs import NfsMount, NfsServer

log = logging.getLogger(__name__)
# How the other kinds (experiment.kinds) are measured, given the mounts and path rows.
OTHER_KINDS = {kinds.TRACE: measure_trace.measure, kinds.CHECKPOINT: measure_checkpoint.measure}

SERVER_CHECK_S = 1.0  # how often nfsd is checked while the loaders read (real seconds)


@dataclass(frozen=True)
class WorkerPath:
    """A worker's path from the storage host: the fibre spans it crosses, combined."""

    km: float
    rtt_ms: float
    rate_mbit: float
    loss_pct: float
    mss_bytes: int


def path_of(rig: Rig, point: Point, worker: str) -> WorkerPath:
    """The combined figures of the fibres between the storage host and `worker`."""
    names = [n for n, _ in topology.path_fibres(rig.topo, worker)]
    specs = [point.fibre(n) for n in names]
    if not specs:
        return WorkerPath(0.0, 0.0, math.inf, 0.0, int(point.value("mtu")) - 52)
    keep = math.prod(1 - s.loss_pct / 100 for s in specs)
    return WorkerPath(sum(s.distance_km for s in specs), sum(s.rtt_ms for s in specs),
                 min(s.rate_mbit for s in specs), 100 * (1 - keep), specs[0].mss_bytes)


def warmup_bytes(point: Point, rtt_ms: float, rate_mbit: float) -> int:
    """What a worker reads before its measured window: three bandwidth-delay products of
    its path (TCP's slow start to a full window moves about two), or ten steps' worth if
    that is less (a stream far below the line rate never fills the pipe), and two rounds
    of the loader's depth (read-ahead ramps up per file)."""
    bdp = rate_mbit * 1e6 / 8 * rtt_ms / 1000.0 if math.isfinite(rate_mbit) else 0.0
    wl = point.workload
    sample = point.dataset.sample_bytes(wl.access)
    return int(min(3 * bdp, 10 * wl.batch * sample) + 2 * wl.readers * sample)


def shuffle_seed(point: Point, rep: int, worker: int) -> int:
    """The loader's shuffle seed for one worker in one repetition: the point's `seed`
    moved on per repetition and per worker, so that repetitions sample different file
    orders (their interval then covers the order's effect) while a point and its
    co-located baseline meet the same order in the same repetition."""
    return (point.workload.seed + 1_000_003 * rep + worker) % 2**31


class ServerWatch:
    """The storage host's nfsd, watched while the loaders read through `mounts`: called
    every SERVER_CHECK_S; the first time nfsd is found down, the reason is kept and every
    mount is shut down, so that reads blocked on it fail at once (see the module
    docstring). `reason` is None while the server served throughout."""

    def __init__(self, server: NfsServer, mounts: list[NfsMount]) -> None:
        self.server, self.mounts = server, mounts
        self.reason: str | None = None

    def __call__(self) -> None:
        """Check the server once; on its first failure, shut the mounts down."""
        if self.reason is not None or not self.mounts:
            return
        self.reason = self.server.why_down()
        if self.reason is None:
            return
        log.warning("%s (the loaders were reading): shutting down %d mount(s)",
                    self.reason, len(self.mounts))
        for m in self.mounts:
            m.shutdown()


def _run_loaders(roots: list[Path], point: Point, rep: int, paths: list[WorkerPath],
                 watch: ServerWatch | None = None,
                 together: workload.Together | None = None) -> list[workload.LoaderRun]:
    """One loader per worker at once, each with its warm-up sized for its path and its
    own file order, all loading until every window is complete, then measured over the
    stretch they all measured (workload.together: workers on a line share one window).
    `watch` is called every SERVER_CHECK_S while they load; `together`: their shared
    clock (a fresh one if None)."""
    spec, k = point.workload, point.time_scale
    windows = [spec.window(warmup_bytes(point, p.rtt_ms, p.rate_mbit)) for p in paths]
    specs = [dataclasses.replace(spec, seed=shuffle_seed(point, rep, i))
             for i in range(len(roots))]
    together = together or workload.Together(len(roots))
    with ThreadPoolExecutor(len(roots)) as pool:
        futures = [pool.submit(workload.run_loader, root, s, w, k, together=together)
                   for root, s, w in zip(roots, specs, windows)]
        while wait(futures, timeout=SERVER_CHECK_S).not_done:
            if watch is not None:
                watch()
        runs = [f.result() for f in futures]
    if watch is not None and any(r.error for r in runs):
        watch()  # a soft mount's reads may fail before the watch's next look
    workload.common_window(runs)
    return runs


@dataclass
class Measured:
    """One measurement of a run: its rows (one per worker) and its loaders' raw steps
    (steps.csv lines, record.step_lines; none for the other kinds). Whoever keeps the
    measurement writes both (the runner may set it aside and measure again)."""

    rows: list[dict[str, Any]]
    steps: list[tuple[Any, ...]]


def measure(plan: Plan, rig: Rig, point: Point, rep: int, out: Path) -> Measured:
    """Measure one repetition of a point on a running rig (captures land in `out`).

    Raises PointFailed (or the service's error) when the point cannot be measured; its
    teardown stack has run by then."""
    state = rig.net.state
    steps: list[tuple[Any, ...]] = []
    with ExitStack() as stack:
        mounts, prepared = _mount(rig, point, rep, stack)
        cap = None
        if plan.capture is not None and rep == 0:
            state.set_phase("capture")
            cap = capture_mod.start(rig.net, rig.workers[0], plan.capture, point.id, stack)
        kind = kinds.name_of(plan)
        state.set_phase(kind)
        if kind == kinds.LOADER:
            runs, ctx = _load(rig, point, rep, mounts, prepared)
            steps = record.step_lines(point.run_id(rep), rig.workers, runs)
            rows = _rows(plan, rig, point, rep, runs, prepared, ctx)
        else:
            rows = OTHER_KINDS[kind](plan, rig, point, rep, mounts, prepared,
                                     path_rows(plan, rig, point, rep))
        if cap is not None:
            _add_capture(plan, cap, rows, rig, point, out)
    state.set_phase("between points")
    return Measured(rows, steps)


def _mount(rig: Rig, point: Point, rep: int, stack: ExitStack) -> tuple[list[NfsMount],
                                                                        list[Any]]:
    """The point's fibres set live, cold caches, fresh mounts on every worker and its
    data path prepared on them (everything pushed on `stack`): (mounts, prepared)."""
    rig.apply(point, rep)
    drop_caches()
    data_path = DATA_PATHS[point.data_path]()
    data_path.before_mount(rig.net, point, stack)
    rig.net.state.set_phase("mounts")
    assert rig.server is not None
    mspec = point.mount.dilated(point.time_scale)
    mounts = [stack.enter_context(NfsMount(rig.net, w, rig.server, mspec))
              for w in rig.workers]
    return mounts, data_path.prepare(rig.net, point, mounts, stack)


def _load(rig: Rig, point: Point, rep: int, mounts: list[NfsMount],
          prepared: list[Any]) -> tuple[list[workload.LoaderRun], _Context]:
    """Run the loaders; around them, read the fibres' counters, the CPU's busy time and
    lab/run's host meter: (the loaders' runs, what they measured besides)."""
    paths = [path_of(rig, point, w) for w in rig.workers]
    assert rig.server is not None
    watch = ServerWatch(rig.server, [m for m, p in zip(mounts, prepared)
                                     if p.root == m.path or m.path in p.root.parents])
    before, machine0, t0 = rig.fibre_readback(), rig.machine(), time.monotonic()
    with _Events(rig, point, mounts) as events:
        runs = _run_loaders([p.root for p in prepared], point, rep, paths, watch,
                            events.together(len(prepared)))
    if watch.reason is not None:
        errors = "; ".join(f"{w}: {r.error}" for w, r in zip(rig.workers, runs) if r.error)
        raise PointFailed(f"{watch.reason}" + (f"; the loaders' reads failed ({errors})"
                                               if errors else ""))
    after, machine1, t1 = rig.fibre_readback(), rig.machine(), time.monotonic()
    busy, host, pressures = machine1.since(machine0)
    ctx = _Context([m.read_ahead_kb() for m in mounts], busy,
                   {n: tuple(b - a for a, b in zip(counters(before[n]), counters(after[n])))
                    for n in after},
                   t1 - t0, host, {n: r.seed for n, r in before.items()}, pressures, events)
    return runs, ctx


class _Events:
    """A point's fibre events around its loaders (event_cost): the player started when
    their common window starts, the hosts' and mounts' counters read before and after;
    nothing without an event. A player's error fails the point."""

    def __init__(self, rig: Rig, point: Point, mounts: list[NfsMount]) -> None:
        self.rig, self.point, self.mounts = rig, point, mounts
        self.player = event_cost.player(rig, point) if point.event.active else None
        self.t0 = 0.0
        self.counted: dict[str, int] = {}

    def together(self, loaders: int) -> workload.Together:
        """The loaders' shared clock, starting the player with their window."""
        t = workload.Together(loaders, self.player.begin if self.player else None)
        self.t0 = t.t0
        return t

    def __enter__(self) -> _Events:
        if self.player is not None:
            self.counted = event_cost.counters(self.rig, self.mounts)
            self.player.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.player is None:
            return
        self.player.__exit__(*exc)
        if exc[0] is not None:
            return
        after = event_cost.counters(self.rig, self.mounts)
        self.counted = {n: after[n] - v for n, v in self.counted.items()}
        if self.player.error and exc[0] is None:
            raise PointFailed(f"{self.point.event.describe()}: {self.player.error}")


@dataclass(frozen=True)
class _Context:
    """What a point's run measured besides the loaders: each mount's read-ahead (from
    the kernel), the CPU's busy share, each fibre's counter deltas, the run's seconds,
    and what the host's scheduler gave the lab kernel meanwhile (lab/run's meter: the
    host_cpu_pct and host_wait_pct columns; {} when unknown)."""

    ra_kb: list[int]
    cpu_busy_pct: float
    counters: dict[str, tuple[int, ...]]
    seconds: float
    host: dict[str, float]
    seeds: dict[str, int | None]  # each fibre's netem seed as the kernel reports it
    tcp_pressures: int = 0  # times the hosts' TCP met the kernel's tcp_mem pressure
    events: _Events | None = None  # the point's fibre events (event_cost)


def _explained(rig: Rig, point: Point, worker: str, row: dict[str, Any], ra_kb: int,
               ctx: _Context) -> dict[str, Any]:
    """The model's explanation of a worker's row, with the fibres' counters."""
    spans = [n for n, _ in topology.path_fibres(rig.topo, worker)]
    player = ctx.events.player if ctx.events is not None else None
    # drops a fibre event made (a span down) are the event's, not a queue's: left out
    drops = sum(ctx.counters[n][0] - (player.drops_during(n, True) if player else 0)
                for n in spans)
    sent = ctx.counters[spans[0]][1] if spans else 0
    rmem = int(rig.net.tcp.read_sysctl(worker, "net.ipv4.tcp_rmem").split()[2])
    b = explain_mod.bounds(rig.topo, point, worker, ra_kb, rmem, rig.net.tcp.congestion)
    return explain_mod.explain(b, row, drops, sent / int(point.value("mtu")),
                               row["path_loss_pct"] / 100.0,
                               sent / max(ctx.seconds, 1e-9) / 1e6 * point.time_scale, rmem)


def _seed_text(rig: Rig, worker: str, seeds: dict[str, int | None]) -> str:
    """The netem seed of the first fibre on the worker's path, as 0x + 16 hex digits
    (text: a u64 does not survive CSV as a number); "" without a fibre or a kernel seed."""
    spans = [n for n, _ in topology.path_fibres(rig.topo, worker)]
    seed = seeds.get(spans[0]) if spans else None
    return "" if seed is None else f"0x{seed:016x}"


def path_rows(plan: Plan, rig: Rig, point: Point, rep: int) -> list[dict[str, Any]]:
    """One row per worker with the point's identity and the worker's path filled in."""
    rows = []
    for w in rig.workers:
        path = path_of(rig, point, w)
        row = record.base_row(plan, point, rep, w, topology.site_of(rig.topo, w))
        row.update({"path_km": path.km, "rtt_ms": path.rtt_ms,
                    "path_rate_mbit": path.rate_mbit, "path_loss_pct": path.loss_pct,
                    "mss_bytes": path.mss_bytes})
        rows.append(row)
    return rows


def _rows(plan: Plan, rig: Rig, point: Point, rep: int, runs: list[workload.LoaderRun],
          prepared: list[Any], ctx: _Context) -> list[dict[str, Any]]:
    """One row per worker; PointFailed if any worker's loader hit an I/O error."""
    errors = [f"{w}: {r.error}" for w, r in zip(rig.workers, runs) if r.error]
    if errors:
        during = f" (fibre event: {point.event.describe()})" if point.event.active else ""
        raise PointFailed("; ".join(errors) + during)
    rows = path_rows(plan, rig, point, rep)
    for row, w, run, prep, ra_kb in zip(rows, rig.workers, runs, prepared, ctx.ra_kb):
        row.update({**workload.summarise(run, point.workload, point.time_scale),
                    "prep_s": prep.prep_s / point.time_scale,
                    "cpu_busy_pct": ctx.cpu_busy_pct, **ctx.host,
                    "read_ahead_kb_kernel": ra_kb, "tcp_mem_pressures": ctx.tcp_pressures,
                    "loss_seed": _seed_text(rig, w, ctx.seeds)})
        row.update(_explained(rig, point, w, row, ra_kb, ctx))
        ev = ctx.events
        if ev is not None and ev.player is not None:
            row.update(event_cost.columns(point, ev.player, run, ev.t0, ev.counted, row))
        if plan.capture is not None:
            row["captured"] = False
    _line_use(rig, point, rows)
    return rows


def _span_MB_s(point: Point, span: str) -> float:
    """The payload a fibre span carries at its line rate (MB/s)."""
    path = model.Path(rtt_s=0.0, share_Bps=point.fibre(span).rate_mbit * 1e6 / 8,
                      mtu=int(point.value("mtu")), transport=point.mount.transport)
    return model.fibre_Bps(path) / 1e6


def _line_use(rig: Rig, point: Point, rows: list[dict[str, Any]]) -> None:
    """Each row's line_use_pct: of the spans on its worker's path, the largest share of a
    span's payload rate that the workers crossing it read together in their (common)
    window. Above 100 the workers were not measured over one stretch of time."""
    paths = topology.fibre_paths(rig.topo)
    spans = {w: [n for n, _ in paths.get(w, [])] for w in rig.workers}
    read = {r["worker"]: float(r["throughput_MB_s"]) for r in rows}
    for row in rows:
        uses = [100.0 * sum(read[w] for w in rig.workers if n in spans[w])
                / _span_MB_s(point, n) for n in spans[row["worker"]]]
        row["line_use_pct"] = max(uses, default=math.nan)


def _add_capture(plan: Plan, cap: Any, rows: list[dict[str, Any]], rig: Rig,
                 point: Point, out: Path) -> None:
    """The capture's analysis into the first worker's row."""
    assert plan.capture is not None
    path = path_of(rig, point, rig.workers[0])
    rows[0].update(capture_mod.analyse(cap, plan.capture, out, point.id, path.rate_mbit,
                                       path.rtt_ms))
    rows[0]["captured"] = True
