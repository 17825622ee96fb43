"""The figure of a run whose points had fibre events: each point's steps around its
event (read throughput and AU per step, against emulated time from the event's start),
from steps.csv and results.csv (testbed.plots.timelines).

A point's event started `event_applied_s` (emulated, read back) into its measured window;
the window starts at its first measured step, so on the loaders' clock the event began
at that step's start + event_applied_s x k.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from testbed import plots
from testbed.experiment.plan.plan import Plan

BEFORE_S = 3.0  # emulated seconds of steps shown before the event
AFTER_S = 15.0  # and after its start
MAX_LINES = 8   # more points than this: the costliest of each event (kind, duration) only


def _labels(points: pd.Series) -> dict[str, str]:
    """Each point's label: the parts of its id that differ between the points drawn
    (data_path=direct|event=down|event_duration_s=1, not the knobs they all share)."""
    parts = {p: str(p).rsplit("|rep=", 1)[0].split("|") for p in points.unique()}
    common = set.intersection(*(set(v) for v in parts.values())) if parts else set()
    return {p: "|".join(x for x in v if x not in common) or str(p) for p, v in parts.items()}


def _chosen(played: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The points to draw and a note for the title: all of them, or with more than
    MAX_LINES the one whose event cost the most of each event kind and duration."""
    if played["point"].nunique() <= MAX_LINES or "event_extra_s" not in played:
        return played, ""
    keys = [k for k in ("event", "event_duration_s") if k in played]
    worst = played.assign(_cost=played["event_extra_s"].fillna(-math.inf)) \
        .sort_values("_cost", ascending=False).drop_duplicates(keys)
    return worst.drop(columns="_cost"), " (the costliest point of each event)"


def _timeline(row: pd.Series, steps: pd.DataFrame, label: str) -> plots.Timeline | None:
    """One worker's steps around its event (None: not enough to draw)."""
    mine = steps[(steps["point"] == row["point"]) & (steps["worker"] == row["worker"])]
    measured = mine[mine["measured"].astype(str) == "True"]
    k = float(row["time_scale_k"])
    if measured.empty or not math.isfinite(float(row["event_applied_s"])):
        return None
    t0 = float(measured["start_s"].iloc[0]) + float(row["event_applied_s"]) * k
    t = (mine["start_s"] - t0) / k
    near = mine[(t >= -BEFORE_S) & (t <= AFTER_S)]
    if len(near) < 2:
        return None
    took = near["wait_s"] + near["compute_s"]
    return plots.Timeline(label, list((near["start_s"] - t0) / k),
                          list(near["bytes"] / took / 1e6 * k),
                          list(100 * near["compute_s"] / took), float(row["event_duration_s"]))


def plot(plan: Plan, df: pd.DataFrame, out: Path) -> Path | None:
    """events_timeline.png for a run with fibre events (None: no event was measured)."""
    steps_csv = out / "steps.csv"
    if "event_applied_s" not in df.columns or not steps_csv.exists():
        return None
    played = df[(df["status"] == "ok") & df["event_applied_s"].notna()]
    if played.empty:
        return None
    steps = pd.read_csv(steps_csv)
    played, note = _chosen(played)
    labels = _labels(played["point"])
    lines = [line for _, row in played.iterrows()
             if (line := _timeline(row, steps, labels[row["point"]]))]
    if not lines:
        return None
    return plots.timelines(lines, out / "events_timeline.png",
                           title=(plan.description or plan.name) + note, au_bar=plan.au_bar)
