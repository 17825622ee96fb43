"""The one reader of the kernel's CPU accounting (/proc/stat): the library's emulator
marks, the time-dilation calibration and the benchmarks all measure CPU busy time here."""

from __future__ import annotations

from pathlib import Path

PROC_STAT = Path("/proc/stat")


def cpu_times(path: Path = PROC_STAT) -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs from the first line of /proc/stat; idle and
    iowait count as not busy."""
    with open(path) as fh:
        fields = [float(x) for x in fh.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
    return sum(fields) - idle, sum(fields)


def busy_pct(before: tuple[float, float], after: tuple[float, float]) -> float:
    """The share of CPU time that was busy between two cpu_times() readings, in percent
    (0 when no time passed)."""
    total = after[1] - before[1]
    return 100.0 * (after[0] - before[0]) / total if total > 0 else 0.0
