"""What a plan's workers run, and so what the storage host exports: the loader (a
preset or a DLIO training config: a generated training set, read-only), a recorded trace
replayed ([workload] trace: the files it read, at their sizes, read-only), or checkpoints
(a checkpoint-only DLIO config: an empty export the workers write into).

One table (KINDS) says, per kind, whether the export is writable and what fills it; the
measuring of each kind lives in its own module (measure, measure_trace,
measure_checkpoint), chosen by the same name.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

from testbed.experiment.plan.plan import Plan, Point
from testbed.workload import trace as trace_mod
from testbed.workload import tracefile
from testbed.workload.dlio_checkpoint import CheckpointJob

LOADER, TRACE, CHECKPOINT = "loader", "trace", "checkpoint"


@dataclass(frozen=True)
class Export:
    """What the storage host serves: writable or not, and how its folder is filled."""

    writable: bool
    fill: Callable[[Point, Path], None]


def name_of(plan: Plan) -> str:
    """The plan's kind: checkpoint, trace or loader."""
    raw = plan.resolver.raw
    return CHECKPOINT if raw.checkpoint is not None else TRACE if raw.trace else LOADER


@lru_cache(maxsize=8)
def load_trace(path: str) -> tracefile.Trace:
    """A trace file, read once per process (the plan checked it when it was parsed)."""
    return tracefile.load(path)


def export_of(plan: Plan) -> Export:
    """The export a plan's rig serves."""
    kind = name_of(plan)
    if kind == TRACE:
        path = plan.resolver.raw.trace
        return Export(False, lambda point, folder: _trace_files(path, folder))
    if kind == CHECKPOINT:
        return Export(True, lambda point, folder: None)
    return Export(False, lambda point, folder: point.dataset.generate(folder))


def _trace_files(path: str, folder: Path) -> None:
    """The files a trace reads, at their recorded sizes, under the export's folder."""
    trace_mod.generate(load_trace(path), folder)


def export_bytes(plan: Plan, point: Point) -> int | None:
    """What a trace's or checkpoint's export holds at its fullest (every checkpoint
    written stays until it is read back, as DLIO keeps them; each rank counted at rank
    0's size); None for the loader (its training set and data path:
    runner.memory_need_bytes)."""
    kind = name_of(plan)
    if kind == TRACE:
        return sum(size for _, size in trace_mod.requirements(load_trace(plan.resolver.raw.trace)))
    if kind == CHECKPOINT:
        job = plan.resolver.raw.checkpoint
        assert job is not None
        rank0 = sum(rank_files(point, 0, job))
        return job.writes * point.workers * rank0  # rank 0 holds the most (its norms)
    return None


def rank_files(point: Point, rank: int, job: CheckpointJob) -> list[int]:
    """The sizes of the files one rank of `job` writes per checkpoint at the point's
    scale (rank 0 writes the most: its shard holds the norms)."""
    ranks, scale = job.ranks(point.workers), float(point.value("workload_scale"))
    return [f.nbytes for f in job.rank_files(rank, ranks, scale)]


def interval_s(point: Point, job: CheckpointJob) -> float:
    """A checkpoint job's training seconds between two checkpoints at full size: the
    point's checkpoint_interval_s, else the DLIO config's time_between_checkpoints."""
    value = point.value("checkpoint_interval_s")
    return job.interval_s if value is None else float(value)
