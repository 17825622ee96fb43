"""Measuring a checkpoint point: every GPU worker is one rank of the DLIO job and writes
its shard of each checkpoint through its own NFS mount across the fibre (DLIO's loop,
testbed.workload.checkpoint: compute for the time between checkpoints, barrier, write,
fsync; caches dropped; read back, every byte compared), then nfsd's own copy is compared
too. A rank that fails, a checkpoint read back different from what was written, or a copy
on the server that differs fails the point: a checkpoint is never counted unless it is
whole on both sides.

Figures per checkpoint are the slowest rank's (MLPerf Storage: every rank waits for the
last at the next barrier), in emulated seconds (real / k). The first checkpoint of each
phase is left out when three or more are written: fresh mounts' connections open with
small windows that later checkpoints no longer pay (it is kept in steps.csv-like detail
in the row's `warmup_write_s`). The training view: one period is the compute between
checkpoints then the blocking write, so AU = interval / (interval + write) and the step
time is interval + write; slowdown against the co-located baseline is then the training
run's, checkpoints included (the PoC's "< 1 % slower" covers them).

Scale. The lab writes `scale` x each rank's bytes and shrinks the interval alike, but a
checkpoint's round trips (its folder, OPEN and COMMIT per file) do not shrink: at 3,000
km they weigh more in a lab-sized checkpoint than in the full one (13.1 GiB per rank for
llama3 8B), so the measured AU and slowdown are those of the lab-sized job. The full
size's write time and training time lost are the write model's (write_full_model_s,
full_lost_pct), the model being checked against the measurement at the lab's size in the
same row (write_s against write_model_s). The interval between checkpoints is the
point's checkpoint_interval_s where set, else the config's time_between_checkpoints
(kinds.interval_s); the report adds the training time lost at a realistic interval
(dlio_checkpoint.REALISTIC_INTERVAL_S) from the full size's model. The read-back has its
model beside the write's (read_model_s, read_limited_by: model.read_back, a rank's files
read cold through the mount's read-ahead over its connections, after a warm-up read as
measured).
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

from testbed import model
from testbed.errors import PointFailed
from testbed.experiment.plan import kinds
from testbed.experiment.resolve import explain as explain_mod
from testbed.experiment.plan.plan import Plan, Point, planned_ra_kb
from testbed.services.nfs import NfsMount, NfsServer
from testbed.stats import mean_ci
from testbed.workload import checkpoint as ck
from testbed.workload.dlio_checkpoint import CheckpointJob

TRANSFER = 1 << 20  # bytes per write() (torch.save streams tensors in large writes)
WARMUP_FROM = 3  # with this many checkpoints or more, the first of each phase is warm-up
MLPERF_RANK_KIND = "process"  # one process per rank: no GIL between ranks
STALL_S = 10.0  # emulated seconds a lab-sized checkpoint may take before the point fails


def plan_of(job: CheckpointJob, point: Point, rep: int, workers: int) -> ck.CheckpointPlan:
    """The checkpoint loop for this point: rank r = worker r, its DLIO files scaled by
    the workload's scale, the compute between checkpoints scaled alike and dilated by k."""
    ranks, scale = job.ranks(workers), float(point.value("workload_scale"))
    if workers > ranks:
        raise PointFailed(f"{workers} workers for a {ranks}-rank checkpoint of {job.name}")
    layouts = tuple(job.rank_files(r, ranks, scale) for r in range(workers))
    return ck.CheckpointPlan(layouts, seed=int(point.value("seed")) * 1000 + rep,
                             transfer_size=TRANSFER, num_write=job.writes,
                             num_read=job.reads,
                             interval_s=kinds.interval_s(point, job) * scale * point.time_scale,
                             fsync=job.fsync, stall_s=STALL_S * point.time_scale)


def run(job: CheckpointJob, point: Point, rep: int, mounts: list[NfsMount],
        server: NfsServer) -> tuple[ck.CheckpointPlan, ck.CheckpointRun]:
    """Write and read the point's checkpoints on every worker's mount; PointFailed when a
    rank failed or nfsd's copy differs. The checkpoints are removed from the export after
    (it lives in the lab kernel's memory)."""
    plan = plan_of(job, point, rep, len(mounts))
    folder = f"ckpt-{rep}"
    try:
        result = ck.run_checkpoints([m.path / folder for m in mounts], plan, MLPERF_RANK_KIND)
        if result.error:
            raise PointFailed(f"checkpoint failed: {result.error}")
        problem = _server_check(server.export_dir / folder, plan)
        if problem:
            raise PointFailed(f"checkpoint on the server: {problem}")
    finally:
        shutil.rmtree(server.export_dir / folder, ignore_errors=True)
    return plan, result


def _server_check(export: Path, plan: ck.CheckpointPlan) -> str | None:
    """None when nfsd's copy of every checkpoint is what each rank wrote; else why."""
    for rank, lay in enumerate(plan.layouts):
        for i in range(1, plan.num_write + 1):
            got = ck.read_back(export, *plan.args(rank), index=i, files=lay)
            if got.problem:
                return got.problem
    return None


def slowest(result: ck.CheckpointRun, phase: str, n: int, k: float) -> list[float]:
    """Per checkpoint 1..n of a phase, the slowest rank's seconds (emulated: / k)."""
    return [max(r.seconds for r in result.of(phase, i)) / k for i in range(1, n + 1)
            if result.of(phase, i)]


def measured(values: list[float]) -> tuple[list[float], list[float]]:
    """(warm-up, measured): the first value is warm-up when there are WARMUP_FROM or more."""
    cut = 1 if len(values) >= WARMUP_FROM else 0
    return values[:cut], values[cut:]


def figures(job: CheckpointJob, plan: ck.CheckpointPlan, result: ck.CheckpointRun,
            point: Point, rank: int) -> dict[str, Any]:
    """A rank's row figures: the job's (slowest rank per checkpoint) and its own."""
    k = point.time_scale
    warm_w, writes = measured(slowest(result, "write", plan.num_write, k))
    _, reads = measured(slowest(result, "read", plan.num_read, k))
    (write_s, write_ci), (read_s, read_ci) = mean_ci(writes), mean_ci(reads)
    interval = kinds.interval_s(point, job) * float(point.value("workload_scale"))
    own = [r for r in result.results if r.rank == rank and r.phase == "write"]
    _, own = measured(own)
    rank_bytes = sum(f.nbytes for f in plan.layouts[rank])
    period = interval + write_s
    return {
        "write_s": write_s, "write_ci_s": write_ci, "read_s": read_s, "read_ci_s": read_ci,
        "fsync_s": mean_ci([r.fsync_s / k for r in own])[0] if own else math.nan,
        "warmup_write_s": warm_w[0] if warm_w else math.nan,
        "write_MB_s": rank_bytes / 1e6 / write_s if write_s > 0 else math.nan,
        "read_MB_s": rank_bytes / 1e6 / read_s if read_s > 0 else math.nan,
        "rank_MB": rank_bytes / 1e6,
        "checkpoint_MB": sum(sum(f.nbytes for f in lay) for lay in plan.layouts) / 1e6,
        "checkpoints_verified": plan.num_write, "interval_s": interval,
        "training_time_lost_pct": ck.training_time_lost_pct(write_s, interval),
        "au_pct": 100.0 * interval / period if period > 0 else math.nan,
        "au_ci_pct": 100.0 * interval * write_ci / period ** 2 if period > 0 else math.nan,
        "step_s": period, "step_ci_s": write_ci,
        "throughput_MB_s": rank_bytes / 1e6 / write_s if write_s > 0 else math.nan,
        "wall_s": sum(writes) + sum(reads), "steps_measured": len(writes),
    }


def read_model(wp: model.WritePath, point: Point, files: list[int], idle_s: float,
               reads: int, rto: float | None = None) -> model.ReadBound:
    """The read-back model (model.read_back) for one rank reading `files` back `reads`
    times idle_s apart, as the measurement does: the mean of all but the first (its
    warm-up), through the point's mount (rsize, read-ahead, version); rto: each
    connection's RTO where not the path's own (model.read_back_bound's)."""
    return model.read_back_bound(wp, files, idle_s, rsize=point.mount.rsize,
                                 ra_bytes=planned_ra_kb(point) << 10, vers=point.mount.vers,
                                 checkpoints=max(1, reads - 1), rto=rto)


def model_columns(rig: Any, point: Point, worker: str, files: list[int],
                  full_files: list[int], rmem_max: int, interval_s: float,
                  reads: int = 1) -> dict[str, Any]:
    """The write path's model for one rank: the bound on its write + fsync at the run's
    size (what the measurement checks: the connections idle for the scaled interval
    between its checkpoints) and at the job's full size (idle for the interval itself),
    with what binds each, the full-size job's training time lost at its own interval
    (model.write), and the read-back model at the run's size (read_model)."""
    wp = explain_mod.write_path(rig.topo, point, worker, rmem_max)
    scale = float(point.value("workload_scale"))
    bound = model.write_bound(wp, files, idle_s=interval_s * scale)
    full = model.write_bound(wp, full_files, idle_s=interval_s)
    read = read_model(wp, point, files, interval_s * scale, reads)
    return {"write_model_s": bound.seconds, "write_full_model_s": full.seconds,
            "read_model_s": read.seconds, "read_limited_by": read.limited_by,
            "limited_by": bound.limited_by, "full_limited_by": full.limited_by,
            "full_lost_pct": ck.training_time_lost_pct(full.seconds, interval_s),
            "model_MB_s": sum(files) / 1e6 / bound.seconds if bound.seconds > 0 else math.nan}


def measure(plan: Plan, rig: Any, point: Point, rep: int, mounts: list[NfsMount],
            prepared: list[Any], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The point's checkpoints written and read back by every worker; its rows (one per
    worker: the job's figures, the rank's own, the write path's model, the emulator's
    marks from the CPU and lab/run's host meter over the checkpoints)."""
    job = plan.resolver.raw.checkpoint
    assert job is not None and rig.server is not None
    before = rig.machine()
    ck_plan, result = run(job, point, rep, mounts, rig.server)
    busy, host, pressures = rig.machine().since(before)
    ranks = job.ranks(len(mounts))
    for rank, row in enumerate(rows):
        row.update(figures(job, ck_plan, result, point, rank))
        rmem = int(rig.net.tcp.read_sysctl(row["worker"], "net.ipv4.tcp_rmem").split()[2])
        full = [f.nbytes for f in job.rank_files(rank, ranks, 1.0)]
        row.update(model_columns(rig, point, row["worker"],
                                 [f.nbytes for f in ck_plan.layouts[rank]], full, rmem,
                                 kinds.interval_s(point, job), ck_plan.num_read))
        row["tcp_rmem_max"] = rmem
        row.update(host)
        row.update(explain_mod.write_marks(row, busy, pressures))
    return rows
