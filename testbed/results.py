"""Results: tidy rows appended as they finish, meta.json, the summary table and plots.

ResultStore   OUT/results.csv gets one row per finished point at once (a crash or Ctrl-C
              loses nothing; `done()` lets a resumed run skip finished points); meta.json
              records the environment; results.parquet is written at the end if pyarrow
              is installed.
summary       median and spread per point; max_distance_meeting_bar; dlio_summary
              (DLIO's summary.json keys); window/RTT and Mathis bounds.
plot          throughput and AU vs the swept axis per setting, with both bounds.
"""

from __future__ import annotations

import csv
import json
import math
import os
import platform
import shutil
import statistics
from pathlib import Path
from typing import Any

import pandas as pd

from testbed import launch
from testbed.errors import ResultsError


def environment() -> dict[str, Any]:
    """The machine a result was measured on: kernel (and whether it is the lab's user-mode
    Linux, a VM or the host), CPUs, Python and library versions, the git commit."""
    import matplotlib
    import pyroute2
    git = launch.run(["git", "rev-parse", "HEAD"], timeout=10, what="git", check=False,
                     cwd=Path(__file__).parent) if shutil.which("git") else None
    return {
        "kernel": platform.release(),
        "kernel_kind": os.environ.get("APN_LAB_KERNEL", "host"),
        "cpus": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "host": platform.node(),
        "python": platform.python_version(),
        "git_commit": git.stdout.strip() if git is not None and git.returncode == 0 else "",
        "versions": {"pandas": pd.__version__, "pyroute2": pyroute2.__version__,
                     "matplotlib": matplotlib.__version__},
    }


def _cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo ("" if unknown)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


class ResultStore:
    """A results folder: results.csv appended row by row, meta.json, results.parquet."""

    def __init__(self, out: Path, columns: list[str] | None = None) -> None:
        self.out = out
        self.csv = out / "results.csv"
        self.columns = columns
        out.mkdir(parents=True, exist_ok=True)

    def done(self) -> set[str]:
        """The ids (point|rep) already measured successfully (failed ones run again)."""
        if not self.csv.exists():
            return set()
        with open(self.csv, newline="") as fh:
            return {row["point"] for row in csv.DictReader(fh)
                    if row.get("status", "ok") == "ok"}

    def _header(self) -> list[str] | None:
        if not self.csv.exists():
            return None
        with open(self.csv, newline="") as fh:
            return next(csv.reader(fh), None)

    def append_rows(self, rows: list[dict[str, Any]]) -> None:
        """Append rows and fsync at once: a crash right after loses nothing.

        Raises ResultsError if the file has other columns (another experiment's)."""
        if not rows:
            return
        fields = self.columns or list(rows[0])
        header = self._header()
        if header is not None and header != fields:
            raise ResultsError(f"{self.csv} has other columns than this run's rows (was it "
                               "written by another experiment file?): use --out elsewhere")
        with open(self.csv, "a", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
            if header is None:
                w.writeheader()
            w.writerows(rows)
            fh.flush()
            os.fsync(fh.fileno())

    def append(self, row: dict[str, Any]) -> None:
        """Append one row (see append_rows)."""
        self.append_rows([row])

    def frame(self) -> pd.DataFrame:
        """results.csv as a DataFrame (empty if there is none)."""
        return pd.read_csv(self.csv) if self.csv.exists() else pd.DataFrame()

    def write_meta(self, meta: dict[str, Any]) -> None:
        """meta.json: how and where the results were measured."""
        (self.out / "meta.json").write_text(json.dumps(meta, indent=2, default=str))

    def write_parquet(self, df: pd.DataFrame | None = None) -> Path | None:
        """results.parquet, when pyarrow is installed (None otherwise)."""
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            return None
        path = self.out / "results.parquet"
        (self.frame() if df is None else df).to_parquet(path)
        return path


METRICS = ("throughput_MB_s", "samples_per_s", "au_pct", "slowdown_pct", "prep_s")
CONTEXT = ("rtt_ms", "window_bound_MB_s", "mathis_MB_s", "cpu_busy_pct")
CPU_BOUND_PCT = 90.0  # a point whose (lab) CPU was this busy measured the CPU, not the fibre


def summary(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per point (the swept `keys`), over workers and repetitions: the median of each
    metric and its spread (max - min, column <metric>_spread), the context columns'
    medians, n rows, and cpu_bound (the lab's CPU, not the fibre, was the limit)."""
    metrics = [c for c in METRICS if c in df.columns]
    g = df.groupby(keys, sort=True, dropna=False)
    out = g[metrics + [c for c in CONTEXT if c in df.columns]].median()
    for c in metrics:
        out[f"{c}_spread"] = g[c].max() - g[c].min()
    out["n"] = g.size()
    out["cpu_bound"] = (g["cpu_busy_pct"].max() >= CPU_BOUND_PCT) if "cpu_busy_pct" in df \
        else False
    return out.reset_index()


def setting_label(row: pd.Series, keys: list[str]) -> str:
    return ", ".join(f"{k}={row[k]}" for k in keys) or "all"


def _groups(s: pd.DataFrame, keys: list[str]) -> Any:
    return s.groupby(keys, sort=True) if keys else [((), s)]


def max_distance_meeting_bar(df: pd.DataFrame, bar: float,
                             setting_keys: list[str]) -> dict[str, float | None]:
    """Largest distance per setting whose median AU >= bar (None if none does)."""
    out: dict[str, float | None] = {}
    s = summary(df, setting_keys + ["distance_km"])
    for _, g in _groups(s, setting_keys):
        ok = g[g["au_pct"] >= bar]["distance_km"]
        out[setting_label(g.iloc[0], setting_keys)] = float(ok.max()) if len(ok) else None
    return out


def mathis_MB_s(rtt_ms: float, loss_pct: float, connections: int = 1,
                mss: int = 1448) -> float:
    """Mathis et al. (1997): a loss-limited TCP flow moves at most MSS/RTT x 1.22/sqrt(p);
    `connections` flows (nconnect) each get that. inf without loss."""
    if loss_pct <= 0 or rtt_ms <= 0:
        return math.inf
    return connections * mss / (rtt_ms / 1000.0) * 1.22 / math.sqrt(loss_pct / 100.0) / 1e6


def dlio_summary(rows: pd.DataFrame, bar: float) -> dict[str, Any]:
    """A DLIO-style summary.json for one point: metrics over its workers x repetitions."""
    au = [float(x) for x in rows["au_pct"]]
    sps = [float(x) for x in rows["samples_per_s"]]
    io = [float(x) for x in rows["throughput_MB_s"]]

    def sd(xs: list[float]) -> float:
        return statistics.pstdev(xs) if len(xs) > 1 else 0.0

    return {
        "num_accelerators": int(rows["worker"].nunique()),
        "hostname": platform.node(),
        "metric": {
            "train_au_percentage": au,
            "train_au_mean_percentage": statistics.fmean(au),
            "train_au_stdev_percentage": sd(au),
            "train_au_meet_expectation": "success" if statistics.fmean(au) >= bar else "fail",
            "train_throughput_samples_per_second": sps,
            "train_throughput_mean_samples_per_second": statistics.fmean(sps),
            "train_throughput_stdev_samples_per_second": sd(sps),
            "train_io_mean_MB_per_second": statistics.fmean(io),
            "train_io_stdev_MB_per_second": sd(io),
        },
    }


def plot(df: pd.DataFrame, path: Path, bar: float, x: str, setting_keys: list[str]) -> Path:
    """Throughput (window/RTT bound dashed, Mathis bound dotted) and AU vs x, one line per
    setting (the other swept keys)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = summary(df, setting_keys + [x])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for _, g in _groups(s, setting_keys):
        name = setting_label(g.iloc[0], setting_keys)
        line, = ax1.plot(g[x], g["throughput_MB_s"], "o-", label=name)
        ax1.plot(g[x], g["window_bound_MB_s"], "--", color=line.get_color(), alpha=0.6,
                 label=f"{name}: window/RTT bound")
        mathis = g["mathis_MB_s"].replace(math.inf, math.nan)
        if mathis.notna().any():
            ax1.plot(g[x], mathis, ":", color=line.get_color(), alpha=0.8,
                     label=f"{name}: Mathis bound")
        ax2.plot(g[x], g["au_pct"], "o-", color=line.get_color(), label=name)
    ax1.set_xlabel(x)
    ax1.set_ylabel("read throughput per worker (MB/s)")
    ax1.set_yscale("log")
    ax1.legend(fontsize=6)
    ax1.set_title(f"throughput vs {x}")
    ax2.axhline(bar, color="grey", ls=":", label=f"AU bar {bar:g}%")
    ax2.set_xlabel(x)
    ax2.set_ylabel("accelerator utilisation (%)")
    ax2.set_ylim(0, 105)
    ax2.legend(fontsize=6)
    ax2.set_title("emulated accelerator utilisation")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def window_bound_MB_s(readers: int, rsize: int, read_ahead_kb: int | None, file_bytes: int,
                      rtt_ms: float, request_bytes: int | None = None,
                      meta_rtts: int = 0) -> float:
    """In-flight bytes the settings allow / RTT. A sequential reader has at most two
    read-ahead windows outstanding (the kernel issues the next window asynchronously when
    the reader enters the current one); a window is the bdi's read-ahead, or the
    application's read request up to one rsize if larger (NFS sets the bdi's io_pages to
    rsize; request_bytes None = large reads), and never more than the file. nconnect
    spreads those bytes over more connections but does not enlarge the window.
    meta_rtts: round trips each file costs besides its data (NFSv4 OPEN: 1; the client
    sends CLOSE asynchronously), so a reader moves one file per
    (meta_rtts + ceil(file / window)) RTTs."""
    ra = (read_ahead_kb if read_ahead_kb is not None else 128) * 1024
    request = rsize if request_bytes is None else min(request_bytes, rsize)
    window = 2 * max(ra, request)
    if rtt_ms <= 0:
        return math.inf
    rounds = meta_rtts + math.ceil(file_bytes / window)
    return readers * file_bytes / (rounds * rtt_ms / 1000.0) / 1e6
