"""Measuring a replayed trace: every GPU worker replays the recorded job's reads
(testbed.workload.replay: its opens and reads at their offsets and sizes, the recorded
gaps between calls as compute, dilated by k) against the trace's files on its own mount
across the fibre, all workers at once. Rows carry the main stream's AU, step time (a
step: the calls between two gaps of at least replay.STEP_GAP_MS), throughput and stall,
in emulated units, as a loader's do, so slowdown against the co-located baseline reads
the same. The recorded job is not modelled: limited_by says so.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from testbed.errors import PointFailed
from testbed.experiment.plan import kinds
from testbed.experiment.plan.plan import Plan, Point
from testbed.services.nfs import NfsMount
from testbed.workload import replay

NOT_MODELLED = "trace (not modelled)"


def measure(plan: Plan, rig: Any, point: Point, rep: int, mounts: list[NfsMount],
            prepared: list[Any], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Replay the plan's trace on every worker at once (each on its data path's root);
    its rows. PointFailed when a replay hit an I/O error."""
    trace = kinds.load_trace(plan.resolver.raw.trace)
    k = point.time_scale
    with ThreadPoolExecutor(len(prepared)) as pool:
        runs = list(pool.map(lambda p: replay.replay(trace, p.root, time_scale=k), prepared))
    errors = [f"{row['worker']}: {r.error}" for row, r in zip(rows, runs) if r.error]
    if errors:
        raise PointFailed("; ".join(errors))
    for row, r, prep in zip(rows, runs, prepared):
        row.update(replay.summarise(r, k))
        row.update({"steps_measured": len(r.steps), "prep_s": prep.prep_s / k,
                    "limited_by": NOT_MODELLED})
    return rows
