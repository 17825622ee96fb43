"""Jobs: the unit of work a host hands to one lab kernel.

A job is either some runs (point x repetition) of the grid that share a testbed (the
points' `group`: topology, nfsd, dataset), measured in order in one fresh lab kernel, or
one setting's whole [search] (its bisection is sequential; different settings are
different jobs). A fresh kernel costs a boot, a testbed and the NFSv4 grace period
(~15 s), so the grid's runs of a group are split into as many jobs as there are free lab
kernels, not one per run.

A job travels as a spec (plain JSON types, so that it can cross to a Dask worker on
another host): the experiment file's text and name, the -p overrides, the run ids or the
search setting's index, and for a search the rows measured so far (so that it reuses
them as the sequential search does). A plan with time_scale = "auto" is calibrated once,
by a calibration job in a lab kernel of its own before the grid; every other job then
carries that capacity, so all lab kernels choose the same k for a point.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.errors import SpecError
from testbed.experiment.plan.plan import Plan, Point

SPEC_VERSION = 1


@dataclass(frozen=True)
class Job:
    """One lab kernel's work: grid run ids (in order) or a search setting's index."""

    id: str
    runs: tuple[str, ...] = ()
    setting: int | None = None
    attempt: int = 0
    calibrate: bool = False

    @property
    def label(self) -> str:
        """A short name for logs and progress."""
        if self.calibrate:
            return "calibration (time_scale auto)"
        if self.setting is not None:
            return f"search setting {self.setting}"
        extra = f" +{len(self.runs) - 1}" if len(self.runs) > 1 else ""
        return f"{self.runs[0]}{extra}" if self.runs else self.id


def grid_runs(plan: Plan) -> dict[str, tuple[Point, int]]:
    """Every grid run of the plan by its run id (point|rep=N), in run order."""
    return {p.run_id(r): (p, r) for p, r in plan.runs()}


def spec(job: Job, plan: Plan, overrides: dict[str, str], seed_csv: str | None = None,
         timeout_s: int = 1800, capacity_MB_s: float | None = None) -> dict[str, Any]:
    """The job's wire form (see the module docstring); capacity_MB_s is the calibrated
    capacity (MB/s the lab kernel moves per CPU) that resolves time_scale = "auto"
    (None: not calibrated)."""
    return {"version": SPEC_VERSION, "id": job.id, "attempt": job.attempt,
            "experiment": {"name": Path(plan.path).name,
                           "text": Path(plan.path).read_text(encoding="utf-8")},
            "overrides": dict(overrides), "runs": list(job.runs), "setting": job.setting,
            "calibrate": job.calibrate, "capacity_MB_s": capacity_MB_s,
            "seed_csv": seed_csv, "timeout_s": int(timeout_s),
            "dlio": _sent(plan.resolver.raw.dlio), "trace": _sent(plan.resolver.raw.trace)}


def _sent(path: str) -> dict[str, str] | None:
    """A file the plan names (its DLIO config, its trace), as text: the job may run
    where its path is not."""
    if not path:
        return None
    return {"name": Path(path).name, "text": Path(path).read_text(encoding="utf-8")}


def runs_of(plan: Plan, run_ids: list[str]) -> list[tuple[Point, int]]:
    """The (point, repetition) of each run id; SpecError for an id not in the grid (the
    host and the worker disagree on the plan: different code or file)."""
    index = grid_runs(plan)
    missing = [r for r in run_ids if r not in index]
    if missing:
        raise SpecError(f"{plan.path}: run {missing[0]!r} is not in this plan (is the "
                        "same version of the project installed on every host?)")
    return [index[r] for r in run_ids]


class Batcher:
    """The grid's runs still to measure, handed out as jobs: all runs of one job share a
    testbed group; a group's runs are split evenly over the lab kernels, in chunks sized
    when the group is first taken (a kernel that frees up early takes its share, not the
    rest of the group)."""

    def __init__(self, plan: Plan, run_ids: list[str]) -> None:
        """The runs to hand out, in run order, each with its testbed group."""
        index = grid_runs(plan)
        self.group = {r: index[r][0].group for r in run_ids}
        self.pending: list[str] = list(run_ids)
        self.chunk: dict[Any, int] = {}
        self._count = 0

    def __len__(self) -> int:
        """How many runs are still pending."""
        return len(self.pending)

    def add(self, run_id: str, group: Any) -> None:
        """Put a run back (a retry), at the end."""
        self.group[run_id] = group
        self.pending.append(run_id)

    def take(self, kernels: int) -> Job | None:
        """The next job for `kernels` lab kernels (None when nothing is pending): the
        first pending run's group, its chunk (ceil(its runs / kernels) when first taken)
        of them, in order."""
        if not self.pending:
            return None
        g = self.group[self.pending[0]]
        same = [r for r in self.pending if self.group[r] == g]
        size = self.chunk.setdefault(g, math.ceil(len(same) / max(1, kernels)))
        chosen = same[:size]
        taken = set(chosen)
        self.pending = [r for r in self.pending if r not in taken]
        self._count += 1
        return Job(id=f"g{self._count}", runs=tuple(chosen))
