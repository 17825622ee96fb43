"""Statistics over results rows: slowdown against each point's co-located baseline, and
per-point means with 95 % confidence intervals. Pure functions of DataFrames (no I/O),
shared by the report and the search.

Slowdown is time per training step against the baseline's (median over its workers and
repetitions): a point and its baseline may measure different numbers of steps.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

Z95 = 1.96
# Two-sided 95 % Student t quantiles by degrees of freedom (1..30); beyond, the normal's.
T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
       2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
       2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t95(n: int) -> float:
    """The two-sided 95 % Student t quantile for n samples (n - 1 degrees of freedom)."""
    if n < 2:
        return math.nan
    return T95[n - 2] if n - 1 <= len(T95) else Z95


def ok_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of points that were measured (status ok)."""
    if df.empty:
        return df
    return df[df["status"] == "ok"] if "status" in df else df


def point_of(run_id: str) -> str:
    """The point id of a run id ("...|rep=2" -> "...")."""
    return run_id.rsplit("|rep=", 1)[0]


def with_slowdown(df: pd.DataFrame) -> pd.DataFrame:
    """The rows with `point_id`, `step_s` and `slowdown_pct` (NaN only where the
    baseline was not measured)."""
    df = df.copy()
    df["point_id"] = df["point"].map(point_of)
    steps = df["steps_measured"].where(df["steps_measured"] > 0)
    df["step_s"] = df["wall_s"] / steps
    ok = ok_rows(df)
    base = ok.groupby("point_id")["step_s"].median()
    ref = df["baseline_point"].map(base)
    df["slowdown_pct"] = 100.0 * (df["step_s"] / ref - 1.0)
    return df


def mean_ci(values: pd.Series) -> tuple[float, float]:
    """Mean and the half-width of its 95 % interval (NaN with fewer than 2 values)."""
    v = values.dropna().astype(float)
    if v.empty:
        return math.nan, math.nan
    if len(v) < 2:
        return float(v.mean()), math.nan
    return float(v.mean()), t95(len(v)) * float(v.std(ddof=1)) / math.sqrt(len(v))


def summarise(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Per group of `by` (point_id and, say, site): n, failures, and mean +- 95 % CI of
    AU, throughput and slowdown, with the medians of the context columns."""
    rows: list[dict[str, Any]] = []
    for key, g in df.groupby(by, sort=False, dropna=False):
        ok = ok_rows(g)
        row = dict(zip(by, key if isinstance(key, tuple) else (key,)))
        row.update({"n": len(ok), "failed": len(g) - len(ok)})
        for metric in ("au_pct", "throughput_MB_s", "slowdown_pct", "samples_per_s"):
            if metric in ok:
                row[metric], row[f"{metric}_ci"] = mean_ci(ok[metric])
        for col in ("rtt_ms", "path_km", "window_bound_MB_s", "mathis_MB_s", "link_MB_s",
                    "cpu_busy_pct", "prep_s"):
            if col in ok:
                row[col] = float(ok[col].median()) if len(ok) else math.nan
        rows.append(row)
    return pd.DataFrame(rows)
