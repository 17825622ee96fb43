"""A point's fibre events (point.event): played while its loaders read, and what they cost.

Events  the player (testbed.network.fibre_events) on every fibre span of the point, its
        clock started when the loaders' common measured window starts; TCP's counters
        (RTOs, retransmitted segments) of every host and NFS's (RPC retransmissions,
        major timeouts) of every mount read before and after
rows    each worker's event columns (COLUMNS): the changes read back, the cost read
        from its steps (testbed.workload.recovery), the counters' differences, and the
        model's prediction for an outage (testbed.model.outage) beside it

Only a span-down event is modelled; the other kinds get the measured columns alone. The
model predicts for the point as run (its k: TCP's 200 ms minimum RTO is k times shorter
in emulated seconds) and, in event_model_extra_k1_s, for the same fibre undilated: the
figure for a real site, where the kernel's fixed timers weigh their full length.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from testbed import topology
from testbed.experiment.measure.rig import Rig
from testbed.experiment.plan.plan import Point
from testbed.experiment.record import record
from testbed.model import outage
from testbed.network import tcp_counters
from testbed.network.fibre_events import EventPlayer
from testbed.services.nfs import NfsMount, mount_rpc_stats
from testbed.workload import LoaderRun, recovery

COLUMNS = record.EVENT  # results.csv's event columns, declared with the others
DATA_CROSSING = {"direct": "network", "cache": "metadata", "staged": "local"}


def player(rig: Rig, point: Point) -> EventPlayer:
    """The point's event player on every fibre span of its topology (use as a context
    manager; it plays nothing without an event)."""
    paths = topology.fibre_paths(rig.topo)
    names = rig.net.fibre_names()
    # a span's forward (a->b) direction carries data to the workers when a is the end
    # nearer the storage host (whose own path does not cross the span)
    to_workers = {n: n not in [s for s, _ in paths.get(a, [])] for n, (a, _) in names.items()}
    applied = rig.net.fibre_links()  # as the rig set them for this run (its netem seeds)
    spans = {n: applied[ends] for n, ends in names.items()}
    return EventPlayer(rig.net, point.event, spans, to_workers)


def counters(rig: Rig, mounts: list[NfsMount]) -> dict[str, int]:
    """TCP's RTOs and retransmitted segments over every host, NFS's RPC retransmissions
    and major timeouts over the mounts (what COUNTED differences are taken of)."""
    tcp = tcp_counters.timeouts(rig.net.namespace(h) for h in rig.net.hosts)
    retrans = timeouts = 0
    for m in mounts:
        for op, c in mount_rpc_stats(m.path).items():
            if op.isupper() and "trans" in c:
                retrans += c["trans"] - c["ops"]
                timeouts += c.get("timeouts", 0)
    return {"tcp_rto_timeouts": tcp["TCPTimeouts"], "tcp_retrans_segs": tcp["RetransSegs"],
            "nfs_retrans": retrans, "nfs_major_timeouts": timeouts}


def loader_times(played: EventPlayer, t0: float) -> list[tuple[float, float]]:
    """Each event's (start, end) on the loaders' clock (started at t0), real seconds:
    when the kernel held the change (read back), else when it was planned."""
    if played.t0 is None:
        return []
    shift = played.t0 - t0
    out = []
    for i, (start, end) in enumerate(played.event.real_times()):
        got = {a.state: a.applied_s for a in played.applied if a.occurrence == i}
        out.append((shift + got.get("event", start), shift + got.get("restored", end)))
    return out


def model_job(point: Point, row: dict[str, Any]) -> outage.Job:
    """The job the outage model predicts for, from a worker's row before the event."""
    return outage.Job(
        rtt_s=float(row["rtt_ms"]) / 1000.0, time_scale=point.time_scale,
        compute_s=point.workload.compute_ms / 1000.0, prefetch=point.workload.prefetch,
        au_pct=float(row.get("event_au_pre_pct", math.nan)),
        read_Bps=float(row["throughput_MB_s"]) * 1e6,
        connections=point.mount.nconnect, mss_bytes=int(row["mss_bytes"]),
        data=DATA_CROSSING.get(point.data_path, "network"))


def columns(point: Point, played: EventPlayer, run: LoaderRun, t0: float,
            counted: dict[str, int], row: dict[str, Any]) -> dict[str, Any]:
    """One worker's event columns (see the module docstring); `row` has its path and
    throughput already."""
    k = point.time_scale
    out: dict[str, Any] = {"event_what": point.event.describe(), **played.summary(k),
                           **counted}
    window_start = run.steps[run.warmup_steps].start_s if run.warmup_steps is not None \
        and run.warmup_steps < len(run.steps) else math.nan
    out.update(recovery.cost(run.steps, window_start, loader_times(played, t0), k))
    if point.event.kind == "down" and math.isfinite(float(out["event_au_pre_pct"])):
        job = model_job(point, {**row, **out})
        p = outage.predict(point.event.duration_s, job)
        real = outage.predict(point.event.duration_s, dataclasses.replace(job, time_scale=1.0))
        out.update({"event_model_extra_s": p.extra_s * point.event.count,
                    "event_model_recover_s": p.recover_s, "event_model_queue_s": p.queue_s,
                    "event_limited_by": p.limited_by,
                    "event_model_extra_k1_s": real.extra_s * point.event.count})
    return out
