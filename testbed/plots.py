"""Plots a person reads at a glance: one figure per experiment, two panels sharing the
x axis (the swept or searched knob, in words and units): read throughput per worker with
the workload's demand and the model's bound, and accelerator utilisation with the AU bar.

Measurements are points with their 95 % intervals (never joined by lines that would pose
as data between sparse values); model bounds are continuous curves over the whole axis;
points the emulator could not carry in real time are drawn hollow. Linear axes. One legend
beside the panels (never over the data), a colour per setting, and the line styles (model
bound, demand, AU bar) and the hollow mark explained once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from testbed import atomic


@dataclass(frozen=True)
class Series:
    """One line of the legend: a setting's per-point summary rows, sorted by x."""

    label: str
    rows: pd.DataFrame
    demand_MB_s: float = float("nan")
    bound: Callable[[float], float] | None = None  # model bound (MB/s) as a function of x


def _errorbars(ax: object, rows: pd.DataFrame, x: str, y: str, color: str, label: str) -> None:
    limited = rows["emulator_limited"].astype(bool) if "emulator_limited" in rows \
        else pd.Series(False, index=rows.index)
    for hollow, part in ((False, rows[~limited]), (True, rows[limited])):
        if part.empty:
            continue
        yerr = part.get(f"{y}_ci")
        ax.errorbar(part[x], part[y], yerr=None if yerr is None else yerr.fillna(0),  # type: ignore[attr-defined]
                    fmt="o", color=color, mfc="white" if hollow else color, ms=6, capsize=3)


def _numeric_x(series: list[Series], x: str) -> tuple[list[Series], list[str]]:
    """Series whose x values are names (mount profiles, data paths) placed at 0, 1, 2 ...
    with those names as tick labels; numeric ones unchanged."""
    values = pd.concat([s.rows[x] for s in series]) if series else pd.Series([], dtype=float)
    if pd.api.types.is_numeric_dtype(values):
        return series, []
    names = list(dict.fromkeys(values.astype(str)))
    placed = [Series(s.label, s.rows.assign(**{x: s.rows[x].astype(str).map(names.index)}),
                     s.demand_MB_s, None) for s in series]
    return placed, names


def plot(series: list[Series], path: Path, *, x: str, x_label: str, title: str,
         au_bar: float) -> Path:
    """Write the two-panel figure to `path` (PNG); returns it."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.6))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    series, ticks = _numeric_x(series, x)
    xs = pd.concat([s.rows[x] for s in series]) if series else pd.Series([0.0])
    grid = np.linspace(float(xs.min()), float(xs.max()), 200)
    for i, s in enumerate(series):
        c = colors[i % len(colors)]
        _errorbars(ax1, s.rows, x, "throughput_MB_s", c, s.label)
        if s.bound is not None:
            ax1.plot(grid, [s.bound(v) for v in grid], "-", color=c, alpha=0.5, lw=1.2)
        if s.demand_MB_s == s.demand_MB_s:
            ax1.axhline(s.demand_MB_s, color=c, ls=":", lw=1, alpha=0.8)
        _errorbars(ax2, s.rows, x, "au_pct", c, s.label)
    ax2.axhline(au_bar, color="grey", ls="--", lw=1)
    ax1.set(xlabel=x_label, ylabel="read throughput per worker (MB/s)", ylim=(0, None),
            title="How fast each worker reads")
    ax2.set(xlabel=x_label, ylabel="accelerator utilisation (%)", ylim=(0, 105),
            title="How busy each accelerator is")
    for ax in (ax1, ax2):
        if ticks:
            ax.set_xticks(range(len(ticks)), ticks)
        ax.grid(alpha=0.3)
    fig.legend(handles=_legend(series, colors, au_bar), loc="center left",
               bbox_to_anchor=(1.0, 0.5), fontsize=7, frameon=False)
    fig.suptitle(title)
    return _save(fig, path)


def _legend(series: list[Series], colors: list[str], au_bar: float) -> list[object]:
    """The figure's legend: a marker per setting in its colour, then the styles once."""
    from matplotlib.lines import Line2D
    handles: list[object] = [Line2D([], [], color=colors[i % len(colors)], marker="o", ls="",
                                    label=s.label) for i, s in enumerate(series)]
    styles = [("-", "", "grey", "model bound"),
              (":", "", "grey", "demand at 100 % AU"),
              ("--", "", "grey", f"AU bar {au_bar:g} %"),
              ("", "o", "white", "hollow: emulator-limited")]
    for ls, marker, face, label in styles:
        handles.append(Line2D([], [], color="grey", ls=ls, marker=marker, mfc=face,
                              label=label))
    return handles


@dataclass(frozen=True)
class Timeline:
    """One point's steps around its event: time (emulated s from the event's start),
    read throughput (MB/s) and AU (%) of each step, and the event's duration."""

    label: str
    t_s: list[float]
    MB_s: list[float]
    au_pct: list[float]
    duration_s: float


def timelines(lines: list[Timeline], path: Path, *, title: str, au_bar: float) -> Path:
    """Write the two-panel figure of each point's steps around its event (PNG): read
    throughput and AU per step against time from the event's start, the event shaded."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.6))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, line in enumerate(lines):
        c = colors[i % len(colors)]
        ax1.step(line.t_s, line.MB_s, where="post", color=c, lw=1, label=line.label)
        ax2.step(line.t_s, line.au_pct, where="post", color=c, lw=1, label=line.label)
    longest = max((line.duration_s for line in lines), default=0.0)
    for ax in (ax1, ax2):
        ax.axvspan(0.0, longest, color="grey", alpha=0.15, lw=0)
        ax.axvline(0.0, color="grey", lw=0.8)
        ax.grid(alpha=0.3)
    ax2.axhline(au_bar, color="grey", ls="--", lw=1)
    ax1.set(xlabel="time from the event's start (s)", ylim=(0, None),
            ylabel="read throughput per step (MB/s)", title="What each step read")
    ax2.set(xlabel="time from the event's start (s)", ylabel="accelerator utilisation (%)",
            ylim=(0, 105), title="How busy the accelerator was, step by step")
    fig.legend(*ax1.get_legend_handles_labels(), loc="center left",
               bbox_to_anchor=(1.0, 0.5), fontsize=7, frameon=False)
    fig.suptitle(f"{title} (shaded: the longest event)")
    return _save(fig, path)


def _save(fig: Any, path: Path) -> Path:
    """Lay the figure out, write it to path atomically (a reader never sees half a PNG)
    and close it, also when writing fails."""
    import matplotlib.pyplot as plt
    fig.tight_layout()
    try:
        with atomic.replacing(path) as tmp:
            fig.savefig(tmp, dpi=110, bbox_inches="tight")
    finally:
        plt.close(fig)
    return path
