"""Statistics over results rows: slowdown against each point's co-located baseline, and
per-point means with 95 % confidence intervals. Pure functions of DataFrames (no I/O),
shared by the report and the search.

Slowdown is time per training step against the baseline's (mean over its workers and
repetitions): a point and its baseline may measure different numbers of steps. Intervals
of a point over several rows (workers x repetitions) are Student t intervals over the
rows; a point measured once takes its row's own interval (batch means over its steps)
widened by the spread between reruns measured for its kind of point (reruns).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from testbed import stats as base_stats
from testbed.experiment.record import reruns
from testbed.stats import t95  # noqa: F401 (the experiment's intervals use it too)

def ok_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of points that were measured (status ok)."""
    if df.empty:
        return df
    return df[df["status"] == "ok"] if "status" in df else df


def latest_runs(df: pd.DataFrame) -> pd.DataFrame:
    """The rows without the failures a later run of the same point and repetition
    replaced (`--resume` measures failed runs again): results.csv keeps both, the report
    counts what the point finally measured."""
    if df.empty or "status" not in df or "point" not in df:
        return df
    measured = set(df.loc[df["status"] == "ok", "point"])
    return df[(df["status"] == "ok") | ~df["point"].isin(measured)]


def point_of(run_id: str) -> str:
    """The point id of a run id ("...|rep=2" -> "...")."""
    return run_id.rsplit("|rep=", 1)[0]


def with_slowdown(df: pd.DataFrame) -> pd.DataFrame:
    """The rows with `point_id`, `slowdown_pct` and its 95 % half-width `slowdown_ci_pct`
    (NaN only where the baseline was not measured)."""
    df = df.copy()
    df["point_id"] = df["point"].map(point_of)
    ok = ok_rows(df)
    base = ok.groupby("point_id")["step_s"].mean()
    base_ci = ok.groupby("point_id")["step_ci_s"].mean()
    ref = df["baseline_point"].map(base)
    ratio = df["step_s"] / ref
    df["slowdown_pct"] = 100.0 * (ratio - 1.0)
    rel = ((df["step_ci_s"] / df["step_s"]) ** 2
           + (df["baseline_point"].map(base_ci) / ref) ** 2) ** 0.5
    df["slowdown_ci_pct"] = 100.0 * ratio * rel
    return df


def mean_ci(values: pd.Series) -> tuple[float, float]:
    """Mean and the half-width of its 95 % interval (NaN with fewer than 2 values)."""
    return base_stats.mean_ci(values.dropna().astype(float))


def point_ci(rows: pd.DataFrame, metric: str, own_ci: str | None) -> tuple[float, float]:
    """A metric's mean over a point's rows and its 95 % half-width: over the rows when
    there are several, else the row's own interval (column own_ci) widened by the rerun
    spread measured for its kind of point (reruns), so that it covers a rerun."""
    mean, ci = mean_ci(rows[metric])
    if len(rows) == 1 and own_ci and own_ci in rows:
        kind = str(rows["limited_by"].iloc[0]) if "limited_by" in rows else ""
        ci = reruns.widened(float(rows[own_ci].iloc[0]), metric, kind)
    elif own_ci and own_ci in rows and rows[metric].nunique(dropna=False) == 1:
        ci = float(rows[own_ci].max())  # one figure of the whole job on every row (a
        # checkpoint's slowest rank): its own interval, not the rows' zero spread
    return mean, ci


CI_OF = {"au_pct": "au_ci_pct", "slowdown_pct": "slowdown_ci_pct", "throughput_MB_s": None,
         "samples_per_s": None, "write_s": "write_ci_s", "read_s": "read_ci_s",
         "training_time_lost_pct": "au_ci_pct"}  # lost = 100 - AU for checkpoints
CONTEXT = ("rtt_ms", "path_km", "model_MB_s", "model_au_pct", "bound_compute_MB_s",
           "bound_fibre_MB_s", "bound_window_MB_s", "bound_slots_MB_s", "bound_loss_MB_s",
           "bound_latency_MB_s", "bound_host_MB_s",
           "cpu_busy_pct", "compute_overshoot_pct", "prep_s", "write_model_s", "read_model_s",
           "write_full_model_s", "fsync_s", "write_MB_s", "read_MB_s", "rank_MB",
           "checkpoint_MB", "interval_s", "checkpoints_verified", "time_scale_k",
           "full_lost_pct", "event_extra_s", "event_recover_s", "event_au_min_pct",
           "event_model_extra_s", "event_model_extra_k1_s", "tcp_rto_timeouts")


def _labels(ok: pd.DataFrame) -> dict[str, Any]:
    """A point's limited_by (emulator if any of its rows was), and why."""
    if ok.empty or "limited_by" not in ok:
        return {"limited_by": "", "emulator_limited": False, "emulator_reason": ""}
    emu = ok["emulator_limited"].astype(str).str.lower() == "true"
    reasons = sorted({r for x in ok.loc[emu, "emulator_reason"].dropna() for r in str(x).split("+")})
    label = "emulator" if emu.any() else str(ok["limited_by"].mode().iloc[0])
    return {"limited_by": label, "emulator_limited": bool(emu.any()),
            "emulator_reason": "+".join(reasons)}


def summarise(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Per group of `by` (point_id and, say, site): n, failures, and mean +- 95 % CI of
    AU, throughput and slowdown, with the medians of the context columns, the largest
    line_use_pct (the workers' sum against the line they share), steal and host wait,
    and how many measurements were set aside and measured again."""
    rows: list[dict[str, Any]] = []
    for key, g in df.groupby(by, sort=False, dropna=False):
        ok = ok_rows(g)
        row = dict(zip(by, key if isinstance(key, tuple) else (key,)))
        row.update({"n": len(ok), "failed": len(g) - len(ok)})
        for metric, own in CI_OF.items():
            if metric in ok:
                row[metric], row[f"{metric}_ci"] = point_ci(ok, metric, own)
        for col in CONTEXT:
            if col in ok:
                row[col] = float(ok[col].median()) if len(ok) else math.nan
        for col in ("full_limited_by", "event_limited_by", "event_what"):  # the commonest
            if col in ok:
                row[col] = str(ok[col].mode().iloc[0]) if ok[col].notna().any() else ""
        for col in ("line_use_pct", "host_steal_pct", "host_wait_pct"):  # the worst
            if col in ok:
                row[col] = float(ok[col].max()) if len(ok) else math.nan
        if "remeasured" in ok:
            row["remeasured"] = int(ok["remeasured"].fillna(0).sum())
        row.update(_labels(ok))
        rows.append(row)
    return pd.DataFrame(rows)
