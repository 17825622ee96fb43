"""Results: tidy rows appended as they finish, meta.json, DLIO summaries.

ResultStore   OUT/results.csv gets rows as soon as a point is measured (a crash or Ctrl-C
              loses nothing; `done()` lets a resumed run skip finished points); meta.json
              records the environment; results.parquet is written at the end if pyarrow
              is installed.
environment   the machine a figure was measured on (kernel and its kind, CPUs, commit).
dlio_summary  DLIO's summary.json keys for one point.
"""

from __future__ import annotations

import csv
import json
import os
import platform
import shutil
import statistics
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from testbed import atomic, launch
from testbed.errors import ResultsError


def environment() -> dict[str, Any]:
    """The machine a result was measured on: kernel (and whether it is the lab's user-mode
    Linux, a VM or the host, and its clock: the host's or lab/run --clock's virtual one),
    CPUs (the guest's, and the host's that lab/run passes in), Python and library versions,
    the git commit, when (UTC) and by which command."""
    import matplotlib
    import pyroute2
    git = launch.run(["git", "rev-parse", "HEAD"], timeout=10, what="git", check=False,
                     cwd=Path(__file__).parent) if shutil.which("git") else None
    return {
        "kernel": platform.release(),
        "kernel_kind": os.environ.get("APN_LAB_KERNEL", "host"),
        "clock": os.environ.get("APN_LAB_CLOCK", "real"),
        "cpus": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "host": platform.node(),
        "host_cpu": os.environ.get("APN_LAB_HOST_CPU", ""),
        "started_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "argv": " ".join(sys.argv),
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
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # read-only, a file in the way, no permission
            raise ResultsError(f"{out}: cannot create the results folder: "
                               f"{exc.strerror or exc}") from None

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
        with atomic.appending(self.csv) as fh:
            w = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
            if header is None:
                w.writeheader()
            w.writerows(rows)

    def append(self, row: dict[str, Any]) -> None:
        """Append one row (see append_rows)."""
        self.append_rows([row])

    def frame(self) -> pd.DataFrame:
        """results.csv as a DataFrame (empty if there is none)."""
        return pd.read_csv(self.csv) if self.csv.exists() else pd.DataFrame()

    def write_meta(self, meta: dict[str, Any]) -> None:
        """meta.json: how and where the results were measured."""
        atomic.write_text(self.out / "meta.json", json.dumps(meta, indent=2, default=str))

    def write_parquet(self, df: pd.DataFrame | None = None) -> Path | None:
        """results.parquet, when pyarrow is installed (None otherwise)."""
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            return None
        path = self.out / "results.parquet"
        (self.frame() if df is None else df).to_parquet(path)
        return path


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
