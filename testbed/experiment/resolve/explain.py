"""Every point explained: what the model says should limit each worker (testbed.model:
compute, fibre, window, loss or latency, with every bound), and whether the emulator kept
up. A point the emulator could not carry in real time is labelled emulator-limited with
its reason, whatever the model says: such a figure describes the machine, not the fibre.

The emulator's evidence, one rule per row of EMULATOR_RULES:
  cpu        the lab kernel's CPU was >= 90 % busy over the loader's run
  timers     the emulated accelerator's sleeps overran their nominal time by >= 5 %
             (the machine could not schedule the lab kernel on time)
  queue      the fibre's netem queue dropped more than its configured loss explains
             (the emulated bottleneck overflowed)
  shortfall  the reads fell more than 15 % below the model's bound while the CPU was
             >= 75 % busy or the timers ran >= 2 % late
  tcg        the reads fell more than 15 % below the model's bound on a software-emulated
             CPU (QEMU TCG: the lab VM without KVM), whose guest sees idle time while
             the host is still emulating its instructions, so `cpu` cannot tell
  clock      CUBIC over a lossy path at k > 1: its window grows back after a loss on the
             kernel's clock, which dilation does not slow, so it recovers as over a k
             times shorter round trip than the emulated one (docs/time-dilation.md;
             measured: tuned mount, 3,000 km, 0.1 %: AU 28 at k = 1, 50 at k = 10).
             Reno counts round trips and is not marked; run lossy scenarios dilated
             with congestion = "reno", or CUBIC at k = 1
  tcpmem     TCP met the lab kernel's memory pressure (tcp_mem) during the run: the
             storage host and the workers share one kernel's TCP memory, which real
             hosts do not (testbed/network/tcp_memory.py raises it to fit the buffers)
"""

from __future__ import annotations

import functools
import math
import os
import platform
from dataclasses import dataclass
from typing import Any, Callable

from testbed import kernel, launch, model, topology
from testbed.errors import ServiceError
from testbed.experiment.plan.plan import Point, model_reading, planned_ra_kb

CPU_BUSY_PCT = 90.0
OVERSHOOT_PCT = 5.0
SHORTFALL = 0.85
COLUMNS = ("model_MB_s", "model_au_pct", "limited_by", "bound_compute_MB_s",
           "bound_fibre_MB_s", "bound_window_MB_s", "bound_slots_MB_s", "bound_loss_MB_s",
           "bound_latency_MB_s", "bound_host_MB_s", "emulator_limited", "emulator_reason",
           "qdisc_drops", "fibre_MB_s", "tcp_rmem_max")


@dataclass(frozen=True)
class Evidence:
    """What the run measured about the machine and the bottleneck."""

    cpu_busy_pct: float
    overshoot_pct: float
    drops: int
    expected_drops: float
    measured_MB_s: float
    model_MB_s: float
    emulated: bool = False
    cubic_clock: bool = False  # CUBIC, loss, k > 1: recovery on the undilated clock
    tcp_pressures: int = 0  # times TCP met the lab kernel's memory pressure


EMULATOR_RULES: tuple[tuple[str, Callable[[Evidence], bool]], ...] = (
    ("cpu", lambda e: e.cpu_busy_pct >= CPU_BUSY_PCT),
    ("timers", lambda e: e.overshoot_pct >= OVERSHOOT_PCT),
    ("queue", lambda e: e.drops > 2 * e.expected_drops + 20),
    ("shortfall", lambda e: e.measured_MB_s < SHORTFALL * e.model_MB_s
     and (e.cpu_busy_pct >= 75 or e.overshoot_pct >= 2)),
    ("tcg", lambda e: e.emulated and e.measured_MB_s < SHORTFALL * e.model_MB_s),
    ("clock", lambda e: e.cubic_clock),
    ("tcpmem", lambda e: e.tcp_pressures > 0),
)


# The share of its tcp_rmem maximum nfsd advertises to a writing client: 797,952 bytes of
# 1 MiB (UML 7.2, tests/system/test_write_model.py), the reading client's alike.
NFSD_WINDOW_SHARE = model.SKB_WINDOW_SHARE


@functools.cache
def software_emulated() -> bool:
    """Whether this kernel runs on QEMU's software emulation: lab/run --vm says so
    (APN_LAB_KERNEL=qemu-tcg); directly on a VM (Vagrant) systemd-detect-virt does
    ("qemu" for TCG, "kvm" with KVM)."""
    kind = os.environ.get("APN_LAB_KERNEL", "")
    if kind:
        return kind == "qemu-tcg"
    try:
        proc = launch.run(["systemd-detect-virt"], timeout=10, what="systemd-detect-virt",
                          check=False)
    except ServiceError:
        return False
    return proc.stdout.strip() == "qemu"


def cubic_clock(row: dict[str, Any]) -> bool:
    """Whether a row ran CUBIC over a lossy path at a time scale k > 1."""
    return (row.get("congestion") == "cubic" and float(row.get("time_scale_k", 1)) > 1
            and float(row.get("path_loss_pct", 0)) > 0)


def emulator_reasons(e: Evidence) -> list[str]:
    """The names of the rules the evidence trips (empty: the emulator kept up)."""
    return [name for name, rule in EMULATOR_RULES if rule(e)]


def share_Bps(topo: topology.SiteTopo, point: Point, worker: str) -> float:
    """The worker's fair share of its path: every span's rate divided among the workers
    whose paths cross it; the smallest."""
    paths = topology.fibre_paths(topo)
    spans = paths.get(worker, [])
    if not spans:
        return math.inf
    crossing = {name: 0 for name, _ in spans}
    for w in topology.worker_hosts(topo):
        for name, _ in paths.get(w, []):
            if name in crossing:
                crossing[name] += 1
    return min(point.fibre(n).rate_mbit * 1e6 / 8 / crossing[n] for n, _ in spans)


def host_share(topo: topology.SiteTopo, point: Point, worker: str,
               write: bool = False) -> model.HostShare:
    """Where a worker sits among the point's end hosts (model.host): its transport and
    connections, the workers on its GPU host and on the server, its line's payload."""
    m = point.mount
    return model.HostShare(m.transport, write, m.nconnect,
                           topology.host_sizes(topo, point.host.gpus).get(worker, 1),
                           len(topology.worker_hosts(topo)),
                           model.payload_share(int(point.value("mtu")), m.transport))


def inputs(topo: topology.SiteTopo, point: Point, worker: str, ra_kb: int, rmem_max: int,
           cc: str) -> tuple[model.Path, model.Reading, float]:
    """What the model needs of one worker of a point: its path (round trip, fair share,
    loss, connections, TCP buffers, its end hosts' terms), how its loader reads, and its
    demand (bytes/s)."""
    specs = [point.fibre(n) for n, _ in topology.path_fibres(topo, worker)]
    keep = math.prod(1 - s.loss_pct / 100 for s in specs)
    wl, m = point.workload, point.mount
    path = model.Path(rtt_s=sum(s.rtt_ms for s in specs) / 1000.0,
                      share_Bps=share_Bps(topo, point, worker), loss=1 - keep,
                      mtu=int(point.value("mtu")), connections=m.nconnect,
                      buffer_bytes=rmem_max, cc=cc, transport=m.transport,
                      window_share=model.window_share(platform.release()),
                      clock_scale=point.time_scale,
                      rpc_slots=m.rpc_slots or kernel.RPC_SLOTS,  # v3 only (spec)
                      host=model.host_terms(point.host, host_share(topo, point, worker)))
    sample = point.dataset.sample_bytes(wl.access)
    reading = model_reading(point, ra_kb)
    demand = wl.batch * sample / (wl.compute_ms / 1000.0) if wl.compute_ms > 0 else math.inf
    return path, reading, demand


def write_path(topo: topology.SiteTopo, point: Point, worker: str,
               rmem_max: int) -> model.WritePath:
    """The write model's path for one worker (a checkpoint rank): its round trip, fair
    share of the line (payload), the mount's wsize and connections, the TCP buffers, the
    requests in flight (NFSv4.1+: the session's slots; NFSv3: the RPC slot tables')."""
    path, _, _ = inputs(topo, point, worker, kernel.READ_AHEAD_KB, rmem_max, point.congestion)
    return model.WritePath(rtt_s=path.rtt_s, share_Bps=model.fibre_Bps(path),
                           wsize=point.mount.wsize, connections=point.mount.nconnect,
                           buffer_bytes=rmem_max,
                           slots=kernel.SESSION_SLOTS if point.mount.vers != "3"
                           else path.connections * path.rpc_slots,
                           window_share=min(path.window_share, NFSD_WINDOW_SHARE),
                           loss=path.loss, mtu=path.mtu, cc=path.cc,
                           host=model.host_terms(point.host,
                                                 host_share(topo, point, worker, True)),
                           slow_start_after_idle=point.slow_start_after_idle)


def bounds(topo: topology.SiteTopo, point: Point, worker: str, ra_kb: int,
           rmem_max: int, cc: str, fetch: bool = False) -> model.Bounds:
    """The model's bounds for one worker of a point, from the kernel's own read-ahead and
    TCP buffer settings (read back), the point's path and loader. fetch: the bounds of
    fetching the set over the fibre as fast as it goes (a cache fill, a staging copy)."""
    path, reading, demand = inputs(topo, point, worker, ra_kb, rmem_max, cc)
    if fetch:
        return model.predict(path, reading, math.inf)
    return model.predict(path, reading, demand, local=point.data_path != "direct")


def planned_inputs(point: Point) -> tuple[int, int]:
    """The read-ahead (KiB) and TCP buffer maximum (bytes) a point not measured yet
    will run with: the mount's read-ahead (the kernel's 128 KiB where it leaves it) and
    the point's buffers, else 2 x the largest BDP, at least 6 MiB (the engine's rule)."""
    ra_kb = planned_ra_kb(point)
    rmem = point.tcp_buffer_bytes or \
        max([f.tcp_buffer_bytes() for _, f in point.fibres], default=kernel.TCP_BUFFER_BYTES)
    return ra_kb, rmem


def planned_bounds(topo: topology.SiteTopo, point: Point, worker: str,
                   ra_kb: int | None = None, fetch: bool = False) -> model.Bounds:
    """The model's bounds for a point not measured yet (planned_inputs; ra_kb when read
    back) with the point's congestion control."""
    planned_ra, rmem = planned_inputs(point)
    return bounds(topo, point, worker, planned_ra if ra_kb is None else ra_kb, rmem,
                  point.congestion, fetch=fetch)


def explain(b: model.Bounds, row: dict[str, Any], drops: int, sent_pkts_est: float,
            loss: float, fibre_MB_s: float, rmem_max: int) -> dict[str, Any]:
    """The explanation columns of a row: bounds, prediction, limited_by, emulator marks."""
    mb = lambda v: v / 1e6 if math.isfinite(v) else math.inf  # noqa: E731
    e = Evidence(row["cpu_busy_pct"], row["compute_overshoot_pct"], drops,
                 loss * sent_pkts_est, row["throughput_MB_s"], mb(b.predicted),
                 software_emulated(), cubic_clock(row),
                 int(row.get("tcp_mem_pressures", 0) or 0))
    reasons = emulator_reasons(e)
    return {
        "model_MB_s": mb(b.predicted), "model_au_pct": b.au_pct(),
        "limited_by": "emulator" if reasons else b.limited_by,
        **{f"bound_{k}_MB_s": mb(v) for k, v in b.values.items()},
        "emulator_limited": bool(reasons), "emulator_reason": "+".join(reasons),
        "qdisc_drops": drops, "fibre_MB_s": fibre_MB_s, "tcp_rmem_max": rmem_max,
    }


def write_marks(row: dict[str, Any], cpu_busy_pct: float, tcp_pressures: int) -> dict[str, Any]:
    """The emulator marks of a checkpoint row (its write_s against write_model_s, the CPU's
    busy share over the checkpoints): a co-located write the lab kernel's CPU holds back
    is the emulator's figure, not the scenario's, as a read point's is. The row's
    limited_by becomes "emulator" when a rule trips."""
    rank_MB, write_s, model_s = (float(row.get(c, math.nan))
                                 for c in ("rank_MB", "write_s", "write_model_s"))
    mb = lambda s: rank_MB / s if s > 0 else math.nan  # noqa: E731
    e = Evidence(cpu_busy_pct, 0.0, 0, 0.0, mb(write_s), mb(model_s), software_emulated(),
                 False, tcp_pressures)
    reasons = emulator_reasons(e)
    return {"cpu_busy_pct": cpu_busy_pct, "tcp_mem_pressures": tcp_pressures,
            "emulator_limited": bool(reasons), "emulator_reason": "+".join(reasons),
            **({"limited_by": "emulator"} if reasons else {})}
