"""What should limit reading a checkpoint back cold: a model of one rank reading its
files through NFS after its page cache was dropped (testbed.workload.checkpoint.read_back:
per file open, then sequential read() calls of 1 MiB until the end), and the name of the
term that binds. Pure functions, no I/O; driven by the write model's WritePath.

    read_back_bound(path, file_bytes, idle_s, ...) -> ReadBound (seconds, per-term
                                                                 seconds, limited_by)

How a rank reads (the readers' simulation, sim.py, one reader, file after file): each
file costs an OPEN round trip, then Linux's read-ahead turns the 1 MiB read() calls into
READs of rsize (an NFS mount's bdi has read_ahead_kb 128 KiB but io_pages = rsize, so a
1 MiB read() asks for one 1 MiB READ and marks the next: one or two READs in flight;
readahead.py). The replies come back over the mount's connections (Connections below),
the new part:

  connections  nconnect TCP connections, each RPC on the next one (sunrpc's round-robin
               transport iterator), each reply sent from its connection's congestion
               window on the server: a reply larger than the window takes a round trip
               per window, the window growing by what was acknowledged (slow start from
               Linux's 10 segments, RFC 6928) up to the receiver's window (the buffer x
               window_share). A window is grown only by replies that fill it: the small
               replies of the write phase leave the server's at the initial window, so
               a mount's first read-back ramps every connection (the checkpoint the
               measurement leaves out as warm-up).
  idle restart with tcp_slow_start_after_idle (the path's slow_start_after_idle), a
               connection whose last send is older than its RTO when it sends again
               restarts: tcp_cwnd_restart halves the window once per RTO elapsed, down
               to min(initial window, window) (RFC 2861). One connection reading 1 MiB
               READs back to back never idles that long; eight take turns, each idle
               through the others' READs.

seconds = the simulated read of every file, with restarts where Linux makes them, the
replies crossing at the smallest rate term of the write model but the window (write_rates:
fibre, slots, loss, server, host; the window binds per connection, as its cap). Terms
(seconds, in series, they add up to it): the slowest rate term (the bytes at that rate,
the window's included), "round trips" (the opens and READ round trips the read-ahead does not overlap: the same read
with every connection's window kept open, less the bytes at the rate) and "slow start"
(what the windows' ramps and restarts add to that). limited_by names the largest.

Measured (docs/results/checkpoint, UML 7.2.7, 2026-12-07; a lab-sized llama3 8B rank,
14.05 MB in two files = 14 READs, 100 Gbit/s shared by 8 ranks, each with its own mount):
the default mount (one connection) read back in 12.4 RTTs at 1,000 km and 12.2 at 3,000
km; this model says 11.6 and 11.2 (0.93-0.94 x the measurement). The tuned mount
(nconnect 8) took 65.9 and 65.8 RTTs: a read whose every READ starts from the initial
window (7 round trips for 1 MiB: 10 + 20 + ... + 640 segments). The model restarts every
READ only where a connection's idle exceeds its RTO; with the RTO the lab sets (RTT +
200 ms in emulated time: rto_min is stretched by k, network/tcp_policy.py) the tuned
mount's connections idle less than that inside a checkpoint and keep their windows
(model: 11.6 RTTs at 1,000 km, 5.7 x off); with an RTO below the idle, every READ
restarts (model: 89 RTTs, the measurement 0.74 x it: the read-ahead overlaps cold READs
more than the simulation does). benchmarks/checkpoint_model.py prints both. Without
dilation (tests/system/test_read_back_model.py, UML 7.2.7, 2026-12-08: one rank, 1,000
km, 1 Gbit/s, nfsd's RTO read back at 220 ms) one connection either way and eight with
the sysctl off read 0.90-0.92 x this model; eight with it on took 61 then 44 RTTs after
the warm-up against its 19: each connection ramping from cold comes back to a turn
after more than its RTO and restarts again, a regime this model, ramping once in the
warm-up and keeping the windows after, does not carry over.

Left out: the CLOSE after each file (asynchronous; it would move the round robin by
one), cubic's HyStart leaving slow start early, the decay of an application-limited
window (tcp_cwnd_application_limited), the RPC and NFS headers of a READ reply, loss
during slow start and the server's disk (the export is in memory).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import testbed.model.tcp as tcp
from testbed import kernel
from testbed.errors import SpecError
from testbed.model.sim import PAGE, Reading, Setting, Simulation, open_rtts
from testbed.model.write import (INIT_CWND, RATE_LABELS, WriteBound, WritePath, _sizes,
                                 rto_s, write_rates)

READ_LABELS = (*RATE_LABELS, "slow start", "round trips")
READ_BYTES = 1 << 20  # the read() size of testbed.workload.checkpoint (its transfer_size)


class Connections:
    """The reply direction of a mount's nconnect TCP connections (module docstring):
    each reply on the next connection, sent from its congestion window in rounds one
    RTT apart, through one FIFO at the rank's rate. cwnd_bytes: each connection's
    window to start from (None: the initial window); restart: tcp_slow_start_after_idle;
    rto_s: each connection's RTO; cap_bytes: the receiver's window."""

    def __init__(self, path: WritePath, *, restart: bool, rto: float, cap_bytes: float,
                 rate_Bps: float, cwnd_bytes: float | None = None) -> None:  # noqa: N803
        self.rtt, self.rate, self.rto, self.restart = path.rtt_s, rate_Bps, rto, restart
        self.initial = float(INIT_CWND * tcp.mss_bytes(path.mtu))
        self.cap = max(cap_bytes, self.initial)
        self.start = self.initial if cwnd_bytes is None else min(cwnd_bytes, self.cap)
        self.fresh(path.connections)
        self.restarts = 0  # replies that found their connection restarted

    def fresh(self, connections: int) -> None:
        """Every connection as new: at its starting window, never sent, the line free."""
        self.cwnd = [self.start] * connections
        self.last = [-math.inf] * connections  # each one's last send (lsndtime)
        self.next, self.free = 0, 0.0  # the next RPC's connection; the line's free time

    def _restarted(self, c: int, now: float) -> float:
        """Connection c's window when it sends at `now`: tcp_cwnd_restart's halving once
        per RTO it sat idle, down to min(initial, window), when the sysctl is on."""
        window, idle = self.cwnd[c], now - self.last[c]
        if not self.restart or idle <= self.rto:
            return window
        floor = min(self.initial, window)
        while (idle := idle - self.rto) > 0 and window > floor:
            window /= 2
        self.restarts += window < self.cwnd[c]
        return max(window, floor)

    def reply(self, sent: float, nbytes: int) -> float:
        """When the last byte of a reply of nbytes to a request sent at `sent` arrives:
        rounds of the connection's window one RTT apart, each growing it by what it
        sent (up to the receiver's window), each through the FIFO at the rate."""
        c, self.next = self.next, (self.next + 1) % len(self.cwnd)
        t = sent + self.rtt / 2
        window = self._restarted(c, t)
        end, left = t, float(nbytes)
        while left > 0:
            burst = min(window, left)
            start = max(t, self.free)
            self.free = end = start + burst / self.rate
            left -= burst
            window = min(window + burst, self.cap)
            t = start + self.rtt
        self.cwnd[c], self.last[c] = window, end
        return end + self.rtt / 2

    def replies(self, sent: float, pages: int, chunk: int) -> list[float]:
        """reply() for each of `pages` pages requested at once in READs of `chunk` pages,
        each READ on the next connection; the arrival of each page (when its READ's
        reply is whole: the client unlocks a READ's pages at its reply)."""
        out: list[float] = []
        while pages > 0:
            n = min(chunk, pages)
            out += [self.reply(sent, n * PAGE)] * n
            pages -= n
        return out


@dataclass(frozen=True)
class ReadBound(WriteBound):
    """The model's time for one rank to read its files back cold: seconds in all, the
    seconds of each term of READ_LABELS, the binding label, the bytes, and how many
    replies found their connection restarted after idling past its RTO."""

    restarts: int = 0


def _read(path: WritePath, files: Sequence[int], conns: Connections, rate: float,
          start: float, rsize: int, ra_bytes: int, vers: str) -> float:
    """Read the files one after the other from `start` (an OPEN on the next connection,
    then the simulated reader); the time the last page arrived."""
    t = start
    for nbytes in files:
        conns.reply(t, 0)  # the OPEN's reply: no data, but a send on its connection
        reading = Reading(1, max(1, nbytes), READ_BYTES, rsize, ra_bytes, open_rtts(vers))
        t = Simulation(Setting(path.rtt_s, rate, reading), link=conns).read_one(t)
    return t


def _timed(path: WritePath, files: Sequence[int], conns: Connections, rate: float,
           idle_s: float, checkpoints: int, read: dict[str, object]) -> float:
    """Mean seconds of `checkpoints` reads idle_s apart after one warm-up read (with
    idle_s = inf each from fresh connections); read: _read's rsize, ra_bytes, vers."""
    t = _read(path, files, conns, rate, 0.0, **read)  # type: ignore[arg-type]
    total, conns.restarts = 0.0, 0
    for _ in range(checkpoints):
        start = t + idle_s
        if not math.isfinite(start):  # every read from fresh connections
            conns.fresh(path.connections)
            start = 0.0
        t = _read(path, files, conns, rate, start, **read)  # type: ignore[arg-type]
        total += t - start
    return total / checkpoints


def read_back_bound(path: WritePath, file_bytes: Sequence[int], idle_s: float = math.inf,
                    *, rsize: int = 1 << 20, ra_bytes: int = kernel.READ_AHEAD_KB << 10,
                    vers: str = "4.2", checkpoints: int = 1,
                    rto: float | None = None) -> ReadBound:
    """The model's time for one rank to read files of `file_bytes` bytes back cold over
    `path` (its mount's rsize and read-ahead as given), `checkpoints` times idle_s
    apart after one read from fresh connections (the warm-up the measurement leaves
    out; with idle_s = inf every read starts from fresh windows): the mean of those.
    rto: each connection's RTO (None: write.rto_s, RTT + TCP_RTO_MIN).

    Returns a ReadBound: seconds, terms keyed as READ_LABELS (module docstring),
    limited_by the largest. Raises SpecError (a ValueError) for a negative or
    non-integer size, or checkpoints < 1."""
    nbytes = _sizes(file_bytes, 0)
    if isinstance(checkpoints, bool) or not isinstance(checkpoints, int) or checkpoints < 1:
        raise SpecError(f"checkpoints = {checkpoints!r}; must be an integer >= 1")
    rates = write_rates(path)
    terms = {k: nbytes / r for k, r in rates.items()}
    binding = max(RATE_LABELS, key=lambda k: (terms[k], -RATE_LABELS.index(k)))
    rate = min(r for k, r in rates.items() if k != "window")  # the window: per connection
    cap, rto = path.buffer_bytes * path.window_share, rto_s(path) if rto is None else rto
    read: dict[str, object] = {"rsize": rsize, "ra_bytes": ra_bytes, "vers": vers}
    cold = Connections(path, restart=path.slow_start_after_idle, rto=rto, cap_bytes=cap,
                       rate_Bps=rate)
    seconds = _timed(path, file_bytes, cold, rate, idle_s, checkpoints, read)
    kept = _timed(path, file_bytes, Connections(path, restart=False, rto=rto, cap_bytes=cap,
                                                rate_Bps=rate, cwnd_bytes=cap),
                  rate, idle_s, checkpoints, read)
    terms["round trips"] = max(0.0, kept - terms[binding])
    terms["slow start"] = max(0.0, seconds - kept)
    label = max((binding, "slow start", "round trips"), key=lambda k: terms[k])
    return ReadBound(seconds, terms, label, nbytes, cold.restarts)
