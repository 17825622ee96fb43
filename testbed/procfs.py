"""The one reader of the kernel's CPU accounting (/proc/stat): the library's emulator
marks, the time-dilation calibration and the benchmarks all measure CPU busy time here,
and lab/run's host meter the machine's steal."""

from __future__ import annotations

import os
from pathlib import Path

PROC_STAT = Path("/proc/stat")
USER_HZ = os.sysconf("SC_CLK_TCK")  # /proc/stat's unit: ticks per second


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


def steal_s(path: Path = PROC_STAT) -> float:
    """Seconds the hypervisor has taken from this machine so far, per CPU: the `steal`
    figure of /proc/stat's cpu line (its 8th, in USER_HZ ticks summed over the CPUs)
    over the number of CPUs. Its rate is the share of wall time a CPU of this machine was
    not running while it had work: on a shared 2-core VM 3-23 % for a minute at a time
    (2026-12-07), invisible to every process inside the machine (a task whose vCPU is
    not running neither runs nor waits). 0.0 when unreadable or absent (no steal to
    report: bare metal, an old kernel)."""
    try:
        lines = path.read_text().splitlines()
        ticks = int(lines[0].split()[8])
    except (OSError, IndexError, ValueError):
        return 0.0
    cpus = sum(1 for line in lines[1:] if line.startswith("cpu"))
    return ticks / USER_HZ / max(cpus, 1)
