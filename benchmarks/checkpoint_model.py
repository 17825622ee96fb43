"""Benchmark (host side, no kernel): a measured checkpoint table against the write model
as it is now, point by point: the write (write + fsync, the slowest rank) and its fsync
lap (the wire's part: all but the write lap's round trips, mkdir, ACCESS and an OPEN
per file) over the model's, with what the model lacks where a ratio leaves 15 %.

    .venv/bin/python -m benchmarks.checkpoint_model [DIR]   # default docs/results/checkpoint

The model is fed as the run was configured (meta.json's points, each point's TCP buffer
as read back in results.csv, the end hosts the run had: none before host profiles
existed), with the lab's interval between lab-sized checkpoints as the idle before each
(model.write.restarts). Prints a markdown table and

    CHECKPOINT_MODEL points=<n> within_15pct=<n> write_x=<min>..<max> fsync_x=<min>..<max>
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pandas as pd

from testbed import model
from testbed.experiment.plan import kinds
from testbed.experiment.plan import plan as plan_mod
from testbed.experiment.resolve import explain
from testbed.model.write import FOLDER_RTTS
from testbed.topology import worker_hosts

TOLERANCE = 0.15
REPO = Path(__file__).resolve().parents[1]
LACKS = {  # what a point's residual is, by where it sits (see docs/own-job.md)
    "write lap": "the client's side of the write lap (8 ranks' data made and copied into "
                 "the page cache on the lab's one CPU: client_Bps is not measured)",
    "emulator": "the lab kernel's CPU (the row is marked emulator-limited)",
}


def main() -> int:
    """Print the table (the folder's points against the model now) and the closing line."""
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "docs/results/checkpoint"
    meta = json.loads((folder / "meta.json").read_text())
    summary = pd.read_csv(folder / "summary.csv")
    results = pd.read_csv(folder / "results.csv")
    plan = plan_mod.load(REPO / meta["file"], {"host": "ideal"})  # no host limits then
    job = plan.resolver.raw.checkpoint
    assert job is not None
    print("| mount | km | write s | model s | write x model | fsync s | model wire s | "
          "fsync x model | slow start s | what the model lacks |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    writes, fsyncs, within = [], [], 0
    for point in plan.points:
        key = {"mount": point.value("mount"), "distance_km": point.value("distance_km")}
        row = summary[(summary["mount"] == key["mount"]) &
                      (summary["distance_km"] == key["distance_km"])].iloc[0]
        rmem = int(results[(results["mount"] == key["mount"]) &
                           (results["distance_km"] == key["distance_km"])]
                   ["tcp_rmem_max"].iloc[0])
        topo = plan.resolver.topo(point)
        wp = explain.write_path(topo, point, worker_hosts(topo)[0], rmem)
        files = kinds.rank_files(point, 0, job)
        idle = kinds.interval_s(point, job) * float(point.value("workload_scale"))
        bound = model.write_bound(wp, files, idle_s=idle)
        wire = bound.seconds - (FOLDER_RTTS + len(files)) * wp.rtt_s
        wx, fx = row["write_s"] / bound.seconds, row["fsync_s"] / wire
        ok = abs(wx - 1) <= TOLERANCE
        within += ok
        writes.append(wx)
        fsyncs.append(fx)
        lack = "" if ok else LACKS["emulator"] if row["emulator_limited"] in (True, "True") \
            else LACKS["write lap"] if abs(fx - 1) <= TOLERANCE else "?"
        print(f"| {key['mount']} | {key['distance_km']:g} | {row['write_s']:.3f} | "
              f"{bound.seconds:.3f} | {wx:.2f} | {row['fsync_s']:.3f} | {wire:.3f} | "
              f"{fx:.2f} | {bound.terms['slow start']:.3f} | {lack} |")
    print(f"\nCHECKPOINT_MODEL points={len(writes)} within_15pct={within} "
          f"write_x={min(writes):.2f}..{max(writes):.2f} "
          f"fsync_x={min(fsyncs):.2f}..{max(fsyncs):.2f}")
    return 0 if all(math.isfinite(x) for x in writes) else 1


if __name__ == "__main__":
    sys.exit(main())
