"""One kernel's TCP memory, shared by every namespace in it.

net.ipv4.tcp_mem (pages: below the first TCP is free, above the second it is under
memory pressure and clamps every socket's buffers, above the third it drops) is global,
not per namespace, and Linux sizes it from the machine's memory at boot: 262 MB of
pressure threshold in a 4 GiB lab kernel. On the testbed the storage host and every
worker are namespaces of that one kernel, so the server's send buffers and the workers'
receive buffers draw on one budget that real hosts each have to themselves. At 100
Gbit/s x 3,000 km the bandwidth-delay product is 367 MB: under pressure the windows
collapse and the reads stall in bursts (unet3d, 256 MiB buffers, 2026-12-05: 2.1-2.6
GB/s against 3.2 modelled, falling from run to run).

TcpMemory raises tcp_mem (never lowers it) so that every host's socket buffers fit
below the pressure threshold, capped at three quarters of the kernel's memory, and puts
the old value back on exit, unless something raised it again meanwhile (another run in
the same kernel: its value is left). Each raise is recorded in the run's registry, so
that `testbed clean` puts back what a killed run raised (restore_found). pressures()
reads how often TCP entered memory pressure in one namespace (TcpExt
TCPMemoryPressures, counted per namespace): a run that met it is the emulator's, not
the fibre's.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from testbed.network.namespace import in_namespace

log = logging.getLogger(__name__)
TCP_MEM = Path("/proc/sys/net/ipv4/tcp_mem")
MEMINFO = Path("/proc/meminfo")
PAGE = 4096
CAP = 0.75  # of the kernel's memory, at most, for TCP's pressure threshold


def as_text(values: Sequence[int]) -> str:
    """tcp_mem's thresholds as the file takes them (and as messages show them)."""
    return " ".join(map(str, values))


def read_tcp_mem(path: Path = TCP_MEM) -> tuple[int, int, int]:
    """tcp_mem's three thresholds (pages)."""
    low, pressure, high = (int(x) for x in path.read_text().split())
    return low, pressure, high


def mem_total_bytes(meminfo: Path = MEMINFO) -> int:
    """The kernel's memory (MemTotal)."""
    for line in meminfo.read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return 0


def wanted(now: tuple[int, int, int], need_bytes: int, total_bytes: int) -> tuple[int, int, int]:
    """tcp_mem with its pressure threshold at least need_bytes (capped at CAP of the
    memory), never below what it is; low at half and high at 1.5 x the threshold."""
    pages = min(math.ceil(need_bytes / PAGE), int(CAP * total_bytes / PAGE))
    if pages <= now[1]:
        return now
    return max(now[0], pages // 2), pages, max(now[2], pages * 3 // 2)


class TcpMemory:
    """tcp_mem of the kernel the network runs in, raised as the buffers grow and put
    back by restore() (the network's teardown calls it)."""

    def __init__(self, path: Path = TCP_MEM, meminfo: Path = MEMINFO,
                 record: Callable[[tuple[int, ...], tuple[int, ...]], None] | None = None
                 ) -> None:
        self.path, self.meminfo, self.record = path, meminfo, record
        self.original: tuple[int, int, int] | None = None
        self.raised: tuple[int, int, int] | None = None

    def ensure(self, need_bytes: int) -> None:
        """Room below the pressure threshold for need_bytes of socket buffers."""
        try:
            now = read_tcp_mem(self.path)
            new = wanted(now, need_bytes, mem_total_bytes(self.meminfo))
            if new == now:
                return
            self.original = self.original or now
            if self.record is not None:  # recorded first: a kill right after loses nothing
                self.record(self.original, new)
            self.path.write_text(as_text(new))
            self.raised = new
        except OSError as exc:  # a kernel or namespace that does not let us: say so
            log.warning("tcp_mem not raised (%s): TCP may meet memory pressure", exc)

    def restore(self) -> None:
        """Put tcp_mem back as it was before the first ensure(), if it is still what we
        raised it to; forget the raise either way."""
        if self.original is not None and self.raised is not None:
            restore_found(self.path, self.original, self.raised)
        if self.original is not None and self.record is not None:
            self.record((), ())
        self.original = self.raised = None


def restore_found(path: Path, found: Sequence[int], raised: Sequence[int]) -> str:
    """Write `found` back to tcp_mem if it still holds `raised` (a value someone raised
    since is theirs, left as it is); what was done, in words."""
    try:
        now = read_tcp_mem(path)
        if list(now) != list(raised):
            return f"tcp_mem left at {as_text(now)} (raised since)"
        path.write_text(as_text(found))
        return f"tcp_mem put back to {as_text(found)}"
    except (OSError, ValueError) as exc:
        log.warning("tcp_mem not restored: %s", exc)
        return f"tcp_mem not restored: {exc}"


def pressures(namespace: str) -> int:
    """TcpExt TCPMemoryPressures in a namespace: how often its sockets met tcp_mem's
    pressure threshold (0 where the kernel does not count it)."""
    with in_namespace(namespace):
        lines = Path("/proc/thread-self/net/netstat").read_text().splitlines()
    for names, values in zip(lines[::2], lines[1::2]):
        if names.startswith("TcpExt:"):
            row = dict(zip(names.split()[1:], values.split()[1:]))
            return int(row.get("TCPMemoryPressures", 0))
    return 0


def total_pressures(namespaces: Iterable[str]) -> int:
    """TCPMemoryPressures summed over namespaces: read before and after a measurement, the
    difference says whether TCP met the kernel's memory pressure meanwhile."""
    return sum(pressures(ns) for ns in namespaces)
