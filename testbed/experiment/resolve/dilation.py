"""Time dilation for scenarios the lab cannot carry in real time (DieCast, NSDI 2008;
time-warped emulation, NSDI 2006): run everything k times slower. Rates / k, delays,
jitter, emulated compute and timeouts x k, so bytes in flight, windows, queue depths and
packet counts stay those of the full-speed scenario while the emulator gets k times the
CPU per byte. Results are reported in emulated units (throughput x k, times / k).

What scales (set by the testbed): the fibres' rates and delays (FibreSpec.time_scale), the
end hosts' limits on the access links (HostSpec.time_scale, docs/hosts.md), the
hosts' route rto_min (so RTOs, and the restart of slow start after an idle RTO, keep their
ratio to the RTT), NFS timeo, the loader's compute and windows, its read timeout.
What does not (fixed kernel timers): delayed ACKs (40 ms minimum ATO), TLP's 10 ms floor,
the initial SYN timeout (1 s), NFSv4 lease renewals; each shrinks, in emulated time, by k.

time_scale = "auto" picks, per point, the smallest k (1, 2, 3, 5, 7, 10, 20, ...) for
which the point needs at most a share of what the lab kernel can move; that choice is
made before the run starts (testbed.experiment.resolve.resolve). This module measures what the
lab kernel can move (calibrate): NFS reads at 0 km, and the CPU they cost, so that the
capacity is what one full CPU would move (a single stream's rate alone understates it:
unet3d's 45 MB/s real at k = 70 kept the lab kernel 7 % busy on the host). Each row
records its k.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from testbed import labkernel, procfs, topology
from testbed.experiment.plan.datapaths import drop_caches
from testbed.network.engine import Network
from testbed.services.nfs import NfsMount, NfsServer
from testbed.spec import MountSpec

CALIBRATION_MIB = 256
CALIBRATION_S = 8.0  # read (passes over the file) at least this long: the host meter
                     # samples twice a second


@dataclass(frozen=True)
class Calibration:
    """One calibration read: the rate reached (MB/s, real), the CPU it cost (CPU seconds
    per second, over all the kernel's CPUs) and how many CPUs the kernel has."""

    rate_MB_s: float
    cpu_per_s: float
    cpus: int

    @property
    def capacity_MB_s(self) -> float:
        """What the kernel is credited with: the rate scaled up to one full CPU when the
        read used less (never less than the rate; the read's margins count as busy, so
        this errs low). A kernel of several CPUs gets more only where the read itself
        spread over them: that the work would spread is not assumed (in user-mode Linux
        7.2 with SMP it does not: docs/multi-cpu.md)."""
        return self.rate_MB_s / min(1.0, self.cpu_per_s) if self.cpu_per_s > 0 \
            else self.rate_MB_s


def measure(seconds_cap: float = 60.0) -> Calibration:
    """One worker at 0 km, a tuned mount (nconnect 4, 16 MiB read-ahead), a 256 MiB file
    read cold in 1 MiB requests, pass after pass for CALIBRATION_S, and the CPU the lab
    kernel spent meanwhile."""
    topo = topology.build("apn", {"workers": 1, "distance_km": 0, "rate": "100gbit"})
    with Network(topo) as net:
        data = net.scratch("calibration")
        with open(data / "big.bin", "wb") as fh:
            for _ in range(CALIBRATION_MIB):
                fh.write(bytes(1 << 20))
        server = net.enter(NfsServer(net, "srv", data))
        with NfsMount(net, "w1", server, MountSpec(nconnect=4, read_ahead_kb=16384)) as m:
            drop_caches()
            cpu0 = _cpu_seconds()
            nbytes, seconds = _read_passes(m.path / "big.bin", seconds_cap)
            time.sleep(2 * labkernel.HOST_METER_PERIOD_S)  # the meter's next sample
            cpu1 = _cpu_seconds()
    seconds = max(seconds, 1e-9)
    return Calibration(nbytes / 1e6 / seconds, (cpu1 - cpu0) / seconds, os.cpu_count() or 1)


def calibrate(seconds_cap: float = 60.0) -> float:
    """What the lab kernel moves (MB/s, real): measure()'s capacity, what one full CPU
    moves, or more where the kernel's CPUs (lab/run --cpus N) carried the read
    together."""
    return measure(seconds_cap).capacity_MB_s


def _cpu_seconds() -> float:
    """CPU seconds this lab kernel has used: from lab/run's host meter (the guest's own
    accounting misses what the host spends on it), else from the guest's /proc/stat."""
    host = labkernel.host_sample()
    if host is not None:
        return host[1]
    return procfs.cpu_times()[0] / os.sysconf("SC_CLK_TCK")


def _read_passes(path: Path, seconds_cap: float) -> tuple[int, float]:
    """(bytes, seconds) reading `path` start to end, dropped from the page cache after
    each pass, pass after pass until CALIBRATION_S have passed (or seconds_cap)."""
    buf = bytearray(1 << 20)
    t0, n = time.monotonic(), 0
    while time.monotonic() - t0 < min(CALIBRATION_S, seconds_cap):
        with open(path, "rb", buffering=0) as fh:
            while (got := fh.readinto(buf)) and time.monotonic() - t0 < seconds_cap:
                n += got
            os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    return n, time.monotonic() - t0
