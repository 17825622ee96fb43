"""Every decision made before a run starts, so that the plan a runner gets is complete
and frozen: nothing rescales it once a run has begun (not the runner, not a lab kernel,
not the search).

time_scale = "auto" is the one decision a plan leaves open when it is loaded: per point,
the smallest nice k (1, 2, 3, 5, 7, 10, 20, ...) for which the point needs at most
HEADROOM of what the lab kernel moves per CPU (its capacity). The capacity comes from,
by who resolves:

  the CLI in a lab kernel, run_file   a calibration of this kernel (dilation.calibrate)
  distribute (from the host)          a calibration job in a lab kernel of its own, before
                                      any other job starts
  a job's kernel side                 the host's calibration, carried by the job spec
  any of these with --resume          the calibration meta.json recorded, so that every
                                      point keeps its k
  --check                             NOMINAL_LAB_MB_S, a typical lab kernel (nominal)

A resolved plan carries its capacity (Plan.capacity_MB_s) and keeps its rule for k in its
resolver, so the points a search adds later get theirs the same way; meta.json records
the capacity and every point's k (scale_record).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from pathlib import Path
from typing import Any, Callable

from testbed import topology
from testbed.experiment.resolve import explain
from testbed.experiment.plan import kinds
from testbed.experiment.plan.plan import Plan, Point
from testbed.model.write import write_bound, write_rates

log = logging.getLogger(__name__)

# The emulated scenario may use at most this share of what one CPU of the lab moves in
# the calibration (dilation.calibrate): its sequential 1 MiB reads cost about half per byte what a loader's
# do (2026-12-03, UML 7.2: 1,379 MB/s per CPU calibrated; unet3d at 45 MB/s real kept
# the kernel 7.4 % busy on the host, ~610 MB/s per CPU), so 0.25 keeps a point near half
# a CPU.
HEADROOM = 0.25
NOMINAL_LAB_MB_S = 1300.0   # a typical calibration of the user-mode lab kernel (MB/s at
                            # one CPU: dilation.calibrate), for --check's estimate
STEPS = (1, 2, 3, 5, 7)


def nice_up(x: float) -> float:
    """The smallest of 1, 2, 3, 5, 7, 10, 20, 30 ... that is >= x."""
    if x <= 1:
        return 1.0
    decade = 10 ** math.floor(math.log10(x))
    for m in STEPS + (10,):
        if m * decade >= x - 1e-9:
            return float(m * decade)
    return float(10 * decade)


def need_MB_s(plan: Plan, point: Point) -> float:
    """What a point asks the lab to move, in emulated MB/s: the model's read rate of each
    worker (demand or a bound), summed over the workers of the site; for checkpoints the
    write path's streaming rate per rank, for a trace its fair share of the line. Workers
    on the same spans are alike: one is asked for their group."""
    topo = plan.resolver.topo(point)
    paths = topology.fibre_paths(topo)
    alike: dict[tuple[str, ...], list[str]] = {}  # workers on the same spans read alike
    for w in topology.worker_hosts(topo):
        alike.setdefault(tuple(n for n, _ in paths.get(w, [])), []).append(w)
    kind = kinds.name_of(plan)
    rate = (lambda w: explain.planned_bounds(topo, point, w).predicted) \
        if kind == kinds.LOADER else (lambda w: _other_Bps(plan, topo, point, w))
    return sum(len(ws) * rate(ws[0]) / 1e6 for ws in alike.values())


# A checkpoint streams its bytes for a moment between round trips: k is chosen so that
# moving its bytes at the lab's HEADROOM adds at most this share of the model's write time
# (at 3,000 km, 100 Gbit/s, 8 ranks of llama3 8B at 1/1000 size: k = 20 where the line's
# streaming rate asks 70, and each k-times-longer round trip costs wall time).
CHECKPOINT_ALLOWANCE = 0.05


def _other_Bps(plan: Plan, topo: topology.SiteTopo, point: Point, worker: str) -> float:
    """A checkpoint rank's or a trace replay's planned rate (bytes/s): for a checkpoint
    the rate that keeps its bytes' time within CHECKPOINT_ALLOWANCE of the write model's
    (checkpoint_need_Bps), for a trace the worker's share of the line (a trace is not
    modelled: it may read as fast as the line lets it)."""
    job = plan.resolver.raw.checkpoint
    if job is not None:
        return checkpoint_need_Bps(topo, point, worker, kinds.rank_files(point, 0, job))
    return explain.share_Bps(topo, point, worker)


def min_write_Bps(topo: topology.SiteTopo, point: Point, worker: str) -> float:
    """A rank's streaming write rate: the smallest of the write model's rate terms."""
    _, rmem = explain.planned_inputs(point)
    return min(write_rates(explain.write_path(topo, point, worker, rmem)).values())


def checkpoint_need_Bps(topo: topology.SiteTopo, point: Point, worker: str,
                        files: list[int]) -> float:
    """What a rank asks the lab to carry: its bytes b over the time they may take, the
    write model's streaming time b / r plus CHECKPOINT_ALLOWANCE of its whole time T
    (round trips, slow start). A lab carrying it moves the bytes at most
    CHECKPOINT_ALLOWANCE x T late; alike ranks sum to the group's bytes over the same."""
    _, rmem = explain.planned_inputs(point)
    path = explain.write_path(topo, point, worker, rmem)
    nbytes = float(sum(files))
    stream = min_write_Bps(topo, point, worker)
    if nbytes <= 0 or not math.isfinite(stream):
        return stream
    total = write_bound(path, files).seconds
    return nbytes / (nbytes / stream + CHECKPOINT_ALLOWANCE * total)


def choose(plan: Plan, capacity_MB_s: float) -> Callable[[Point], float]:
    """k for a point: the smallest nice k that keeps what it needs within HEADROOM of
    what the lab moves. Points get their own k (a starved far point needs no dilation
    where its co-located baseline needs much); the invariance benchmark is what makes
    figures measured at different k comparable, and every row records its k."""
    room = HEADROOM * capacity_MB_s

    def k_for(point: Point) -> float:
        """The point's k at this capacity."""
        return nice_up(need_MB_s(plan, point) / room) if room > 0 else 1.0
    return k_for


def rescale(plan: Plan, capacity_MB_s: float) -> Plan:
    """The plan with time_scale "auto" resolved at a capacity, point by point; the
    resolver keeps the rule (the points the search adds later get theirs the same way)."""
    plan.resolver.auto_scale = choose(plan, capacity_MB_s)
    points = tuple(plan.resolver.point(dict(p.assignment), plan.id_keys)
                   for p in plan.points)
    return dataclasses.replace(plan, points=points, capacity_MB_s=capacity_MB_s)


def scale_record(plan: Plan) -> dict[str, Any] | list[float]:
    """meta.json's time_scale: for a plan resolved at a capacity, the capacity and every
    point's k; otherwise the plan's values of k."""
    if plan.capacity_MB_s is None:
        return sorted({p.time_scale for p in plan.points})
    return _auto_record(plan, plan.capacity_MB_s)


def _auto_record(plan: Plan, capacity: float) -> dict[str, Any]:
    """What time_scale "auto" decided: the capacity and every point's k."""
    return {"auto": True, "calibrated_MB_s": capacity,
            "per_point": {p.id: p.time_scale for p in plan.points}}


def is_resolved(plan: Plan) -> bool:
    """Whether nothing is left to decide (no time_scale "auto" without a capacity)."""
    return not plan.auto_scale or plan.capacity_MB_s is not None


def apply_capacity(plan: Plan, capacity: float) -> tuple[Plan, dict[str, Any]]:
    """The plan with time_scale "auto" resolved from a calibration (MB/s per CPU),
    and what was decided, for meta.json (the same on the host and in every lab kernel)."""
    scaled = rescale(plan, capacity)
    record = _auto_record(scaled, capacity)
    log.warning("time_scale auto: the lab kernel moves %.0f MB/s of NFS reads per CPU; "
                "k = %s", capacity,
                ", ".join(f"{k:g}" for k in sorted(set(record["per_point"].values()))))
    return scaled, record


def previous_capacity(out: Path) -> float | None:
    """The calibration a results folder's meta.json recorded for time_scale auto."""
    try:
        scale = json.loads((out / "meta.json").read_text()).get("time_scale")
    except (OSError, ValueError):
        return None
    return float(scale["calibrated_MB_s"]) if isinstance(scale, dict) and \
        scale.get("calibrated_MB_s") else None


def auto_scale(plan: Plan, out: Path | None = None, resume: bool = False,
               calibrate: Callable[[], float] | None = None
               ) -> tuple[Plan, dict[str, Any]]:
    """For time_scale = "auto": resuming, take the run's own calibration from its
    meta.json (every point keeps its k); else calibrate (the caller says how: this lab
    kernel, or a calibration job); choose k. (The plan to run, what was decided for
    meta.json; the plan itself and {} when it has no "auto".)"""
    if not plan.auto_scale:
        return plan, {}
    earlier = previous_capacity(out) if resume and out is not None else None
    if earlier is None:
        if calibrate is None:
            raise ValueError(f"{plan.path}: time_scale = \"auto\" needs a calibration")
        earlier = calibrate()
    return apply_capacity(plan, earlier)


def nominal(plan: Plan) -> Plan:
    """The plan as a typical lab kernel (NOMINAL_LAB_MB_S) would resolve it, for an
    estimate before any calibration; a plan with nothing to decide as it is."""
    return plan if is_resolved(plan) else rescale(plan, NOMINAL_LAB_MB_S)
