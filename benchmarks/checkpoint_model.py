"""Benchmark (host side, no kernel): measured checkpoint tables against the write and
read-back models as they are now, point by point. The write (write + fsync, the slowest
rank) and its fsync lap (the wire's part: all but the write lap's round trips, mkdir,
ACCESS and an OPEN per file) over model.write's; the read-back (the slowest rank, cold)
over model.read_back's, and over the same model with each connection's RTO at one RTT
(every READ restarting from the initial window): with what a model lacks where a ratio
leaves 15 %.

    .venv/bin/python -m benchmarks.checkpoint_model [DIR ...]
    # default docs/results/checkpoint and docs/results/checkpoint-idle where present

The models are fed as the run was configured (meta.json's points, each point's TCP buffer
as read back in results.csv, the end hosts the run had: none before host profiles
existed), with the lab's interval between lab-sized checkpoints as the idle before each
(model.write.restarts; model.read_back times the reads after the first, as measured).
Prints two markdown tables and

    CHECKPOINT_MODEL points=<n> within_15pct=<n> write_x=<min>..<max> fsync_x=<min>..<max>
        read_within_15pct=<n> read_x=<min>..<max>
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from testbed import model
from testbed.experiment.measure import measure_checkpoint
from testbed.experiment.plan import kinds
from testbed.experiment.plan import plan as plan_mod
from testbed.experiment.resolve import explain
from testbed.model.write import FOLDER_RTTS
from testbed.topology import worker_hosts

TOLERANCE = 0.15
REPO = Path(__file__).resolve().parents[1]
DEFAULT_FOLDERS = (REPO / "docs/results/checkpoint", REPO / "docs/results/checkpoint-idle")
LACKS = {  # what a point's residual is, by where it sits (see docs/own-job.md)
    "write lap": "the client's side of the write lap (8 ranks' data made and copied into "
                 "the page cache on the lab's one CPU: client_Bps is not measured)",
    "emulator": "the lab kernel's CPU (the row is marked emulator-limited)",
    "co-located": "co-located: the lab's one CPU making, copying and sending 8 ranks' data "
                  "(at 0 km the model's wire is the line alone; client_Bps is not measured)",
    "early writeback": "writeback before fsync: over several connections the flusher sends "
                       "during the write lap (fsync lap {fx:.2f} x the model's wire), which "
                       "the model, flushing everything at fsync, does not overlap",
}
READ_LACKS = {  # what a read-back point's residual is (see docs/own-job.md)
    "client": "co-located: the client's side, which the model leaves out (8 ranks reading "
              "and comparing every byte on the lab's one CPU; a host profile's read terms)",
    "restart": "restarts that feed themselves: eight connections ramping from cold each "
               "come back to a turn after more than their RTO and restart again (nfsd's "
               "RTO read back: RTT + 200 ms; at k = 1 too, tests/system/"
               "test_read_back_model.py); the model ramps once and keeps the windows "
               "({x:.2f} x the model with every READ restarting)",
    "kept": "this run's conditions, not the term: at k = 1 one rank's eight connections "
            "keep their windows with the sysctl off and read within the model (0.92 x, "
            "tests/system/test_read_back_model.py); here k = 30 and 8 ranks share the "
            "lab's one CPU (which of the two is not separated)",
}


def _rows(folder: Path) -> list[tuple[Any, Any, dict[str, Any]]]:
    """(point, its model inputs, its measured figures) for every point of a run folder:
    the write path as configured, rank 0's files, the lab's idle between checkpoints,
    the figures averaged over the point's repetitions (results.csv: each worker's row
    carries the job's figures, the slowest rank's)."""
    meta = json.loads((folder / "meta.json").read_text())
    results = pd.read_csv(folder / "results.csv")
    point_id = results["point"].str.replace(r"\|rep=\d+$", "", regex=True)
    hosts = {p.get("host", "ideal") for p in meta["points"].values()}  # none: before
    plan = plan_mod.load(REPO / meta["file"], {"host": hosts.pop()})  # host profiles
    job = plan.resolver.raw.checkpoint
    assert job is not None
    out = []
    for point in plan.points:
        got = results[(point_id == point.id) & (results["status"] == "ok")]
        if got.empty:
            continue  # not measured (yet)
        topo = plan.resolver.topo(point)
        wp = explain.write_path(topo, point, worker_hosts(topo)[0],
                                int(got["tcp_rmem_max"].iloc[0]))
        idle = kinds.interval_s(point, job) * float(point.value("workload_scale"))
        figures = {c: got[c].mean() for c in ("write_s", "fsync_s", "read_s", "read_ci_s")}
        figures["emulator_limited"] = got["emulator_limited"].astype(str).eq("True").any()
        out.append((point, (wp, kinds.rank_files(point, 0, job), idle, job.reads), figures))
    return out


def _label(point: Any) -> str:
    """mount, and the idle restart where the run varied it."""
    swept = "slow_start_after_idle" in point.id
    return f"{point.value('mount')}" + (f", idle restart {'on' if point.slow_start_after_idle else 'off'}"
                                        if swept else "")


def _write_lack(emulated: bool, km: float, wx: float, fx: float) -> str:
    """What the write model lacks where it misses by more than TOLERANCE: the lab's CPU
    (marked, or co-located), the client's write lap (the wire's fsync lap agrees), or
    writeback the model does not overlap (both laps shorter than the model's)."""
    if emulated:
        return LACKS["emulator"]
    if km == 0:
        return LACKS["co-located"]
    if abs(fx - 1) <= TOLERANCE:
        return LACKS["write lap"]
    return LACKS["early writeback"].format(fx=fx) if wx < 1 and fx < 1 else "?"


def _read_lack(rx: float, km: float, short_x: float, idle_restart: bool) -> str:
    """What the read model lacks where it misses by more than TOLERANCE."""
    if abs(rx - 1) <= TOLERANCE:
        return ""
    if km == 0:
        return READ_LACKS["client"]
    if not idle_restart:
        return READ_LACKS["kept"]
    if abs(short_x - 1) <= 0.3:
        return READ_LACKS["restart"].format(x=short_x)
    return "?"


def _read_row(point: Any, inputs: tuple[Any, list[int], float, int],
              row: dict[str, Any]) -> tuple[str, float]:
    """A point's line of the read-back table and its read over the model."""
    wp, files, idle, n_reads = inputs
    km = float(point.value("distance_km"))
    read = measure_checkpoint.read_model(wp, point, files, idle, n_reads)
    short = measure_checkpoint.read_model(wp, point, files, idle, n_reads, rto=wp.rtt_s)
    rx, sx = row["read_s"] / read.seconds, row["read_s"] / short.seconds
    rtts = f"{row['read_s'] / wp.rtt_s:.1f}" if wp.rtt_s > 0 else "-"
    return (f"| {_label(point)} | {km:g} | {row['read_s']:.3f} ± {row['read_ci_s']:.3f} | "
            f"{rtts} | {read.seconds:.3f} | {rx:.2f} | {read.limited_by} | "
            f"{read.terms['slow start']:.3f} | {short.seconds:.3f} | {sx:.2f} | "
            f"{_read_lack(rx, km, sx, wp.slow_start_after_idle)} |"), rx


def main() -> int:
    """Print the tables (the folders' points against the models now) and the closing line."""
    folders = [Path(a) for a in sys.argv[1:]] or \
        [f for f in DEFAULT_FOLDERS if (f / "results.csv").exists()]
    rows = [r for f in folders for r in _rows(f)]
    print("| mount | km | write s | model s | write x model | fsync s | model wire s | "
          "fsync x model | slow start s | what the model lacks |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    writes, fsyncs, within = [], [], 0
    reads: list[str] = []
    read_x, read_within = [], 0
    for point, (wp, files, idle, n_reads), row in rows:
        km = float(point.value("distance_km"))
        bound = model.write_bound(wp, files, idle_s=idle)
        wire = bound.seconds - (FOLDER_RTTS + len(files)) * wp.rtt_s
        wx, fx = row["write_s"] / bound.seconds, row["fsync_s"] / wire
        ok = abs(wx - 1) <= TOLERANCE
        within += ok
        writes.append(wx)
        fsyncs.append(fx)
        lack = "" if ok else _write_lack(bool(row["emulator_limited"]), km, wx, fx)
        print(f"| {_label(point)} | {km:g} | {row['write_s']:.3f} | "
              f"{bound.seconds:.3f} | {wx:.2f} | {row['fsync_s']:.3f} | {wire:.3f} | "
              f"{fx:.2f} | {bound.terms['slow start']:.3f} | {lack} |")
        line, rx = _read_row(point, (wp, files, idle, n_reads), row)
        read_within += abs(rx - 1) <= TOLERANCE
        read_x.append(rx)
        reads.append(line)
    print("\n| mount | km | read s | = RTTs | model s | read x model | limited by | "
          "slow start s | model, RTO = RTT s | read x it | what the model lacks |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(reads))
    print(f"\nCHECKPOINT_MODEL points={len(writes)} within_15pct={within} "
          f"write_x={min(writes):.2f}..{max(writes):.2f} "
          f"fsync_x={min(fsyncs):.2f}..{max(fsyncs):.2f} "
          f"read_within_15pct={read_within} read_x={min(read_x):.2f}..{max(read_x):.2f}")
    return 0 if all(math.isfinite(x) for x in writes + read_x) else 1


if __name__ == "__main__":
    sys.exit(main())
