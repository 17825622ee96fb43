"""The results folder's schema: what every writer of it needs (the runner in a lab
kernel, the job's kernel side writing into its job folder, the distributing host's
Sink), so that writers import this and not the measuring code.

results.csv has one fixed set of columns per plan (columns()): who and what (point,
repetition, status, reason, worker, site), every knob's value (fibre knobs per link), the
worker's path (km, RTT, rate, loss), the measurements (AU, samples/s, MB/s, stall,
preparation) and their context (guest CPU busy, the host's scheduler, the kernel's
read-ahead, bounds). steps.csv has every loader step's raw timings (STEP_COLUMNS);
search.csv a row per [search] setting (SEARCH_COLUMNS); meta.json the environment and
the whole plan (meta_of).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

from testbed import atomic, results, workload
import testbed.workload.recovery  # noqa: F401 (workload.recovery.COLUMNS)
from testbed.errors import SpecError
from testbed.experiment.plan import kinds
from testbed.experiment.plan.plan import Plan, Point, format_value
from testbed.experiment.resolve import explain as explain_mod
from testbed.experiment.resolve import resolve

RUN = ("point", "repetition", "status", "reason", "baseline", "baseline_point", "worker",
       "site")
PATH = ("time_scale_k", "path_km", "rtt_ms", "path_rate_mbit", "path_loss_pct", "mss_bytes")
METRICS = (*workload.loader.NAN_SUMMARY, "prep_s")
STEP_COLUMNS = ("point", "worker", "step", "start_s", "wait_s", "compute_s", "bytes",
                "samples", "measured")
SEARCH_COLUMNS = ("setting", "knob", "target", "meets_up_to", "fails_from",
                  "metric_at_meets", "metric_at_fails", "half_at_meets", "half_at_fails",
                  "crossing", "uncertainty", "points", "runs", "undecided", "note")
CONTEXT = ("cpu_busy_pct", "host_cpu_pct", "host_wait_pct", "host_steal_pct",
           "read_ahead_kb_kernel", "loss_seed", "line_use_pct", "tcp_mem_pressures",
           *explain_mod.COLUMNS, "remeasured", "remeasured_why")


# A checkpoint point's own figures (measure.measure_checkpoint), after METRICS.
CHECKPOINT = ("write_s", "write_ci_s", "read_s", "read_ci_s", "fsync_s", "warmup_write_s",
              "write_MB_s", "read_MB_s", "rank_MB", "checkpoint_MB", "checkpoints_verified",
              "interval_s", "training_time_lost_pct", "write_model_s", "write_full_model_s",
              "full_limited_by", "full_lost_pct", "read_model_s", "read_limited_by")
# A captured point's in-flight figures on its first worker (measure.capture), last.
CAPTURE = ("reads_in_flight_mean", "read_bytes_in_flight_mean", "bdp_bytes",
           "in_flight_of_bdp", "read_size_median", "read_latency_median_ms",
           "retransmitted_to_client", "capture_dropped")


# A point with fibre events (measure.event_cost): what was played and read back, its
# cost from the steps (workload.recovery), TCP's and NFS's counters, the outage model.
EVENT = ("event_what", "event_applied_s", "event_restored_s", "event_lag_ms",
         "event_changes", "event_readback_ok", *workload.recovery.COLUMNS,
         "tcp_rto_timeouts", "tcp_retrans_segs", "nfs_retrans", "nfs_major_timeouts",
         "event_model_extra_s", "event_model_recover_s", "event_model_queue_s",
         "event_limited_by", "event_model_extra_k1_s")


def columns(plan: Plan) -> list[str]:
    """results.csv's columns for this plan (the same for every row, failed ones too)."""
    first = plan.points[0]
    knob_cols = [k.column for k, _ in first.settings]
    ident = [k.column for k in plan.id_keys if k.column not in knob_cols]
    extra = [*CAPTURE, "captured"] if plan.capture else []
    own = CHECKPOINT if kinds.name_of(plan) == kinds.CHECKPOINT else ()
    events = EVENT if any(p.event.active for p in plan.points) else ()
    return [*RUN, *ident, *knob_cols, *PATH, *METRICS, *own, *events, *CONTEXT, *extra]


def base_row(plan: Plan, point: Point, rep: int, worker: str, site_name: str) -> dict[str, Any]:
    """A row with the point's identity and every knob's value; metrics blank (NaN)."""
    row: dict[str, Any] = dict.fromkeys(columns(plan), math.nan)
    row.update({"point": point.run_id(rep), "repetition": rep, "status": "ok", "reason": "",
                "baseline": point.is_baseline, "baseline_point": point.baseline_id,
                "worker": worker, "site": site_name,
                "time_scale_k": point.time_scale})  # the k a time_scale of "auto" chose
    for key, value in point.ident:
        row[key.column] = format_value(value) if isinstance(value, tuple) else value
    for key, value in point.settings:
        row[key.column] = format_value(value) if isinstance(value, tuple) else value
    return row


def failed_rows(plan: Plan, point: Point, rep: int, reason: str,
                workers: list[str]) -> list[dict[str, Any]]:
    """The rows of a point that could not be measured: status failed, the reason, no
    measurements."""
    rows = []
    for w in workers or [""]:
        row = base_row(plan, point, rep, w, "")
        row.update({"status": "failed", "reason": reason.replace("\n", " ")[:500]})
        rows.append(row)
    return rows


def step_lines(run_id: str, workers: list[str],
               runs: list[workload.LoaderRun]) -> list[tuple[Any, ...]]:
    """Every loader step's raw timings as steps.csv lines (STEP_COLUMNS), so that any
    figure can be recomputed."""
    return [(run_id, worker, s.index, f"{s.start_s:.6f}", f"{s.wait_s:.6f}",
             f"{s.compute_s:.6f}", s.bytes, s.samples, i in run.window)
            for worker, run in zip(workers, runs) for i, s in enumerate(run.steps)]


def write_steps(out: Path, lines: list[tuple[Any, ...]]) -> None:
    """Append steps.csv lines (step_lines), the header first in a new file."""
    if not lines:
        return
    path = out / "steps.csv"
    new = not path.exists()
    with atomic.appending(path) as fh:
        w = csv.writer(fh)
        if new:
            w.writerow(STEP_COLUMNS)
        w.writerows(lines)


def open_store(plan: Plan, out: Path, resume: bool) -> results.ResultStore:
    """The results folder `out` for a plan; SpecError when it holds results and resume
    is False (a run never writes over another's)."""
    store = results.ResultStore(out, columns(plan))
    if store.csv.exists() and not resume:
        raise SpecError(f"{store.csv} exists: use --resume to continue it or --out elsewhere")
    return store


def meta_of(plan: Plan) -> dict[str, Any]:
    """meta.json: the environment and the whole plan (every point's settings, and its
    time scales as resolved: for "auto", the calibration and every point's k)."""
    return {
        "experiment": plan.name, "file": str(plan.path), "topology": plan.topology,
        "dlio": plan.resolver.raw.dlio or None, "trace": plan.resolver.raw.trace or None,
        "kind": kinds.name_of(plan),
        "description": plan.description, "repetitions": plan.repetitions,
        "au_bar": plan.au_bar, "environment": results.environment(),
        "search": None if plan.search is None else {
            "knob": plan.search.key.text, "range": [plan.search.lo, plan.search.hi],
            "target": plan.search.text, "tolerance": plan.search.tolerance},
        "points": {p.id: {k.column: v for k, v in p.settings} for p in plan.points},
        "baseline": "the same point with every fibre at 0 km, no loss, no jitter, no "
                    "equipment delay, measured in the same run",
        "cache": "cold client for every point (fresh mounts + drop_caches, fresh FS-Cache); "
                 "server data in memory (tmpfs)",
        "time_scale": resolve.scale_record(plan),
    }
