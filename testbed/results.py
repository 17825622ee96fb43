"""Results: tidy rows appended as they finish, meta.json, the summary table and plots.

ResultStore   OUT/results.csv gets one row per finished point at once (a crash or Ctrl-C
              loses nothing; `done()` lets a resumed run skip finished points); meta.json
              records the environment; results.parquet is written at the end if pyarrow
              is installed.
plot          throughput and AU vs distance per setting, with the window/RTT bound.
"""

from __future__ import annotations

import csv
import json
import math
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import pandas as pd

def environment() -> dict[str, Any]:
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], capture_output=True, text=True, timeout=10,
                                  cwd=Path(__file__).parent).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return ""

    import matplotlib
    import pyroute2
    return {
        "kernel": platform.release(),
        "kernel_kind": os.environ.get("APN_LAB_KERNEL", "host"),
        "cpus": os.cpu_count(),
        "host": platform.node(),
        "python": platform.python_version(),
        "git_commit": git("rev-parse", "HEAD"),
        "versions": {"pandas": pd.__version__, "pyroute2": pyroute2.__version__,
                     "matplotlib": matplotlib.__version__},
    }


class ResultStore:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.csv = out / "results.csv"
        out.mkdir(parents=True, exist_ok=True)

    def done(self) -> set[str]:
        if not self.csv.exists():
            return set()
        with open(self.csv, newline="") as fh:
            return {row["point"] for row in csv.DictReader(fh)}

    def append(self, row: dict[str, Any]) -> None:
        new = not self.csv.exists()
        with open(self.csv, "a", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(row))
            if new:
                w.writeheader()
            w.writerow(row)
            fh.flush()
            os.fsync(fh.fileno())

    def frame(self) -> pd.DataFrame:
        return pd.read_csv(self.csv) if self.csv.exists() else pd.DataFrame()

    def write_meta(self, meta: dict[str, Any]) -> None:
        (self.out / "meta.json").write_text(json.dumps(meta, indent=2, default=str))

    def write_parquet(self) -> Path | None:
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            return None
        path = self.out / "results.parquet"
        self.frame().to_parquet(path)
        return path


def summary(df: pd.DataFrame, setting: str = "mount") -> pd.DataFrame:
    """Median over repetitions per (setting, distance)."""
    cols = ["throughput_MB_s", "samples_per_s", "au_pct", "slowdown_pct", "rtt_ms",
            "window_bound_MB_s"]
    g = df.groupby([setting, "distance_km"], sort=True)[cols].median().reset_index()
    return g


def max_distance_meeting_bar(df: pd.DataFrame, bar: float, setting: str = "mount") -> dict[str, float | None]:
    """Largest distance per setting whose median AU >= bar (None if none does)."""
    out: dict[str, float | None] = {}
    for name, g in summary(df, setting).groupby(setting):
        ok = g[g["au_pct"] >= bar]["distance_km"]
        out[str(name)] = float(ok.max()) if len(ok) else None
    return out


def plot(df: pd.DataFrame, path: Path, bar: float, setting: str = "mount") -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = summary(df, setting)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, g in s.groupby(setting):
        line, = ax1.plot(g["distance_km"], g["throughput_MB_s"], "o-", label=f"{name} measured")
        ax1.plot(g["distance_km"], g["window_bound_MB_s"], "--", color=line.get_color(),
                 alpha=0.6, label=f"{name} window/RTT bound")
        ax2.plot(g["distance_km"], g["au_pct"], "o-", color=line.get_color(), label=name)
    ax1.set_xlabel("distance (km)")
    ax1.set_ylabel("read throughput (MB/s)")
    ax1.set_yscale("log")
    ax1.legend(fontsize=7)
    ax1.set_title("throughput vs distance")
    ax2.axhline(bar, color="grey", ls=":", label=f"AU bar {bar:g}%")
    ax2.set_xlabel("distance (km)")
    ax2.set_ylabel("accelerator utilisation (%)")
    ax2.set_ylim(0, 105)
    ax2.legend(fontsize=7)
    ax2.set_title("emulated accelerator utilisation")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def window_bound_MB_s(readers: int, rsize: int, read_ahead_kb: int | None, file_bytes: int,
                      rtt_ms: float, request_bytes: int | None = None) -> float:
    """In-flight bytes the settings allow / RTT. A sequential reader has at most two
    read-ahead windows outstanding (the kernel issues the next window asynchronously when
    the reader enters the current one); a window is the bdi's read-ahead, or the
    application's read request up to one rsize if larger (NFS sets the bdi's io_pages to
    rsize; request_bytes None = large reads), and never more than the file. nconnect
    spreads those bytes over more connections but does not enlarge the window."""
    ra = (read_ahead_kb if read_ahead_kb is not None else 128) * 1024
    request = rsize if request_bytes is None else min(request_bytes, rsize)
    per_reader = min(file_bytes, 2 * max(ra, request))
    if rtt_ms <= 0:
        return math.inf
    return readers * per_reader / (rtt_ms / 1000.0) / 1e6

