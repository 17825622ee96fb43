"""Timestamped probes across a running topology, built and parsed with scapy.

ICMP echo requests carry a 32-bit sequence number and their send time. A raw ICMP socket
in the source namespace sends them and receives the replies (round-trip time); a raw ICMP
socket in the destination namespace sees each request arrive (one-way loss, one-way delay
and reordering of the forward direction) while the destination kernel answers it. Receive
times are the kernels' own (SO_TIMESTAMPNS), and every namespace shares one clock, so the
one-way delay needs no clock sync. No listener process is needed at either end.

Send times are the kernel's too: the time each probe left the source's interface
(SO_TIMESTAMPING, software TX stamps read from the socket's error queue), so neither
Python nor the sendto() system call counts as path delay (in the user-mode-Linux lab
kernel the probe left its interface 70-100 us after Python took its time; measured
2026-12-03). A probe without a kernel stamp falls back to the time taken just before
sendto(), and the report says how many.

The lab's own hiccups are measured, not hidden: the sender sends one probe per interval,
so a gap between two sends longer than the interval by more than STALL_MS shows a time
the kernel running the probe did not run it (a busy guest, or the host not scheduling the
lab kernel). Replies in flight during such a gap are counted, and the RTT is also given
without them.

    report = probe(src_ns, dst_ns, dst_ip, count=1000, interval_s=0.001)
    print(report.render())
"""

from __future__ import annotations

import bisect
import math
import os
import socket
import statistics
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from scapy.layers.inet import ICMP, IP
from scapy.packet import Raw
from scapy.utils import checksum

from testbed.errors import SpecError
from testbed.network.namespace import NETNS_DIR, ns_iproute
from testbed.network.path_metrics import binomial_ci
from testbed.network.sockets import (SO_TIMESTAMPNS, big_receive_buffer, kernel_time_ns,
                                     ns_socket)

PAYLOAD = struct.Struct("!IQ")  # sequence number, send time (ns, CLOCK_REALTIME)
ECHO_REQUEST, ECHO_REPLY = 8, 0
MAX_COUNT = 1_000_000
STALL_MS = 1.0  # a send gap this much past the interval: the probe's kernel did not run


SO_RXQ_OVFL = getattr(socket, "SO_RXQ_OVFL", 40)
SO_TIMESTAMPING = getattr(socket, "SO_TIMESTAMPING", 37)
TX_STAMPS = (1 << 1) | (1 << 4)  # SOF_TIMESTAMPING_TX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE
ETH_HLEN, ETH_P_IP = 14, 0x0800
POLL_S = 0.02  # how often the receiving threads read their sockets (16 MiB buffers)


def _icmp_socket(namespace: str) -> socket.socket:
    sock = ns_socket(namespace, socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    sock.setsockopt(socket.SOL_SOCKET, SO_RXQ_OVFL, 1)  # the kernel counts what we drop
    big_receive_buffer(sock, 16 << 20)
    sock.settimeout(0.1)
    return sock


@dataclass
class _Inbox:
    """Raw datagrams and their kernel receive times; parsed after the run so that the
    receiving threads keep up with the sender."""
    packets: list[tuple[bytes, int]] = field(default_factory=list)
    socket_drops: int = 0
    sent: list[tuple[bytes, int]] = field(default_factory=list)  # TX stamps (error queue)


def _drain_tx_stamps(sock: socket.socket, inbox: _Inbox) -> None:
    """Move the kernel's TX timestamps waiting in the socket's error queue to the inbox."""
    while True:
        try:
            data, anc, _flags, _addr = sock.recvmsg(2048, 512,
                                                    socket.MSG_ERRQUEUE | socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            return
        for level, kind, value in anc:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPING and len(value) >= 16:
                sec, nsec = struct.unpack("qq", value[:16])  # [0]: the software stamp
                if sec or nsec:
                    inbox.sent.append((data, sec * 1_000_000_000 + nsec))


def _receive(sock: socket.socket, stop: threading.Event, inbox: _Inbox,
             tx_stamps: bool = False) -> None:
    """Every POLL_S, read all the socket holds (and its error queue, if `tx_stamps`: the
    kernel's send times of our probes), until `stop` is set and the socket is empty.

    The kernel stamped each packet when it arrived, so reading late changes no figure;
    reading in batches, instead of waking per packet, keeps the probe's own CPU use low
    in the one-CPU lab kernel, where every system call and thread wake-up is expensive."""
    sock.setblocking(False)
    while True:
        done = stop.is_set()
        while True:
            try:
                data, anc, _flags, _addr = sock.recvmsg(2048, 128)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                return
            for level, kind, value in anc:
                if level == socket.SOL_SOCKET and kind == SO_RXQ_OVFL:
                    inbox.socket_drops = struct.unpack("I", value[:4])[0]
            inbox.packets.append((data, kernel_time_ns(anc)))
        if tx_stamps:
            _drain_tx_stamps(sock, inbox)
        if done:
            return
        stop.wait(POLL_S)


def _ours(inbox: _Inbox, ident: int, icmp_type: int) -> list[tuple[int, int, int]]:
    """(seq, sent_ns, received_ns) of our probes of icmp_type, in arrival order."""
    out = []
    for data, rx_ns in inbox.packets:
        icmp = IP(data).getlayer(ICMP)
        if icmp is None or icmp.type != icmp_type or icmp.id != ident:
            continue
        load = bytes(icmp.payload)
        if len(load) >= PAYLOAD.size:
            seq, sent_ns = PAYLOAD.unpack_from(load)
            out.append((seq, sent_ns, rx_ns))
    return out


def _tx_times(stamps: list[tuple[bytes, int]], ident: int) -> dict[int, int]:
    """seq -> the earliest kernel TX stamp of our echo request with that sequence number.
    The looped-back frame starts at its Ethernet header; a probe is stamped again by every
    device that transmits it on its way (the fibre end after netem), hence the earliest."""
    out: dict[int, int] = {}
    for data, ns in stamps:
        ip = ETH_HLEN if len(data) > ETH_HLEN and \
            struct.unpack_from("!H", data, 12)[0] == ETH_P_IP else 0
        if len(data) < ip + 20 or data[ip] >> 4 != 4:
            continue
        at = ip + (data[ip] & 0x0F) * 4
        if len(data) < at + 8 + PAYLOAD.size:
            continue
        icmp_type, _code, _sum, icmp_id = struct.unpack_from("!BBHH", data, at)
        if icmp_type != ECHO_REQUEST or icmp_id != ident:
            continue
        seq = PAYLOAD.unpack_from(data, at + 8)[0]
        out[seq] = min(ns, out.get(seq, ns))
    return out


def _stalls(interval_ns: int, actual_ns: list[int],
            threshold_ns: int) -> tuple[list[float], list[tuple[int, int]]]:
    """How late each send came after the one before it (ms past the interval), and the
    windows (ns) in which the sender did not run for more than threshold_ns past it."""
    late_ms, windows = [], []
    for before, actual in zip(actual_ns, actual_ns[1:]):
        late = actual - before - interval_ns
        late_ms.append(max(0, late) / 1e6)
        if late > threshold_ns:
            windows.append((before + interval_ns, actual))
    return late_ms, windows


def _rtt_s(packet: tuple[bytes, int]) -> float:
    """The RTT of one received reply, from its echoed send time (0 if not ours)."""
    data, rx_ns = packet
    at = (data[0] & 0x0F) * 4 + 8  # past the IP and ICMP headers
    if len(data) < at + PAYLOAD.size:
        return 0.0
    return max(0.0, (rx_ns - PAYLOAD.unpack_from(data, at)[1]) / 1e9)


def address_in(namespace: str) -> str:
    """The first IPv4 address of a host namespace (for probing a run held elsewhere)."""
    if not (NETNS_DIR / namespace).exists():
        raise SpecError(f"no namespace {namespace}: is the run up (`testbed up` prints its "
                        "prefix) and is the host name right?")
    with ns_iproute(namespace) as ipr:
        for msg in ipr.get_addr(family=socket.AF_INET):
            if msg.get_attr("IFA_LABEL") != "lo":
                return str(msg.get_attr("IFA_ADDRESS"))
    raise SpecError(f"namespace {namespace} has no IPv4 address")


def _percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


@dataclass
class ProbeReport:
    """What `count` probes from src to dst saw. Loss is the forward (src -> dst) one-way
    loss; `returned` counts replies, so round-trip loss is 1 - returned / sent."""
    src: str
    dst: str
    sent: int
    interval_s: float
    rtt_ms: list[float] = field(default_factory=list)
    one_way_ms: list[float] = field(default_factory=list)
    arrived: int = 0
    returned: int = 0
    reordered: int = 0
    duplicates: int = 0
    socket_drops: int = 0  # probes our own sockets dropped (the figures are then unsound)
    kernel_sent: int = 0  # probes whose send time is the kernel's TX stamp
    pacing_late_ms: list[float] = field(default_factory=list)  # send gaps past the interval
    stalled: int = 0  # replies in flight while the sender was late by > STALL_MS
    reordered_in_stall: int = 0  # reordered arrivals in flight during such a stall
    rtt_clear_ms: list[float] = field(default_factory=list)  # RTTs of the other replies

    @property
    def loss(self) -> float:
        """The forward one-way loss: probes sent that never reached the destination."""
        return 1.0 - self.arrived / self.sent

    def loss_ci(self, z: float = 1.96) -> tuple[float, float]:
        """Wilson interval of the forward loss fraction (z=1.96: 95 %)."""
        return binomial_ci(self.sent - self.arrived, self.sent, z)

    @property
    def round_trip_loss(self) -> float:
        """Probes sent whose reply never came back."""
        return 1.0 - self.returned / self.sent

    @property
    def reorder_fraction(self) -> float:
        """The share of arrivals that came after a later probe."""
        return self.reordered / self.arrived if self.arrived else 0.0

    def rtt(self, q: float) -> float:
        """The q-th quantile of the round-trip times (ms)."""
        return _percentile(self.rtt_ms, q) if self.rtt_ms else math.nan

    @property
    def rtt_min_ms(self) -> float:
        """The smallest round trip (ms)."""
        return min(self.rtt_ms) if self.rtt_ms else math.nan

    @property
    def rtt_median_ms(self) -> float:
        """The median round trip (ms)."""
        return statistics.median(self.rtt_ms) if self.rtt_ms else math.nan

    @property
    def rtt_p99_ms(self) -> float:
        """The 99th percentile round trip (ms)."""
        return self.rtt(0.99)

    @property
    def one_way_median_ms(self) -> float:
        """The median one-way delay (ms; all namespaces share one clock)."""
        return statistics.median(self.one_way_ms) if self.one_way_ms else math.nan

    @property
    def rtt_mean_ms(self) -> float:
        """The mean round trip (ms)."""
        return statistics.fmean(self.rtt_ms) if self.rtt_ms else math.nan

    @property
    def stalls(self) -> int:
        """Send gaps longer than the interval + STALL_MS: times the sender did not run."""
        return sum(x > STALL_MS for x in self.pacing_late_ms)

    def clear(self, q: float) -> float:
        """RTT quantile over the replies not in flight during a stall."""
        return _percentile(self.rtt_clear_ms, q) if self.rtt_clear_ms else math.nan

    def as_dict(self) -> dict[str, float | int | str]:
        """The report as plain data (for --json)."""
        lo, hi = self.loss_ci()
        return {
            "src": self.src, "dst": self.dst, "sent": self.sent, "arrived": self.arrived,
            "returned": self.returned, "rtt_min_ms": self.rtt_min_ms,
            "rtt_median_ms": self.rtt_median_ms, "rtt_p99_ms": self.rtt_p99_ms,
            "one_way_median_ms": self.one_way_median_ms, "loss_pct": 100 * self.loss,
            "loss_ci95_lo_pct": 100 * lo, "loss_ci95_hi_pct": 100 * hi,
            "round_trip_loss_pct": 100 * self.round_trip_loss,
            "reordered_pct": 100 * self.reorder_fraction, "duplicates": self.duplicates,
            "socket_drops": self.socket_drops, "rtt_mean_ms": self.rtt_mean_ms,
            "kernel_send_times": self.kernel_sent, "stalls": self.stalls,
            "stalled_replies": self.stalled, "reordered_in_stall": self.reordered_in_stall,
            "pacing_late_median_ms": (statistics.median(self.pacing_late_ms)
                                      if self.pacing_late_ms else math.nan),
            "pacing_late_max_ms": max(self.pacing_late_ms, default=math.nan),
            "rtt_clear_median_ms": self.clear(0.5), "rtt_clear_p99_ms": self.clear(0.99),
        }

    def _lab_lines(self) -> list[str]:
        lines = [f"  send times    the kernel's (leaving {self.src}) for {self.kernel_sent} of "
                 f"{self.sent} probes" + ("" if self.kernel_sent == self.sent else
                                          "; the others: taken before sendto()")]
        if self.pacing_late_ms:
            late = self.pacing_late_ms
            lines.append(f"  lab timing    sends came late by median "
                         f"{statistics.median(late):.3f} ms, p99 {_percentile(late, 0.99):.3f}, "
                         f"max {max(late):.3f}; {self.stalls} stalls > {STALL_MS:g} ms "
                         f"(the lab kernel did not run: host CPU or a busy guest)")
        if self.stalled:
            lines.append(f"  RTT ms        {self.stalled} replies were in flight during a stall; "
                         f"without them: median {self.clear(0.5):.3f}  p99 "
                         f"{self.clear(0.99):.3f}")
        if self.reordered_in_stall:
            lines.append(f"  reordered     {self.reordered_in_stall} of the {self.reordered} were "
                         "in flight during a stall")
        return lines

    def render(self) -> str:
        """The report as text lines for a person."""
        lo, hi = self.loss_ci()
        return "\n".join([
            f"probe {self.src} -> {self.dst}: {self.sent} ICMP probes every "
            f"{self.interval_s * 1000:g} ms",
            f"  RTT ms        min {self.rtt_min_ms:.3f}  median {self.rtt_median_ms:.3f}  "
            f"mean {self.rtt_mean_ms:.3f}  p99 {self.rtt_p99_ms:.3f}   ({self.returned} replies)",
            f"  one-way ms    median {self.one_way_median_ms:.3f}  ({self.src} -> {self.dst})",
            f"  one-way loss  {100 * self.loss:.3f} %  (95 % CI {100 * lo:.3f} - "
            f"{100 * hi:.3f} %; {self.sent - self.arrived} of {self.sent})",
            f"  reordered     {100 * self.reorder_fraction:.3f} %  ({self.reordered} arrived "
            f"after a later probe; {self.duplicates} duplicates)",
        ] + self._lab_lines() + (
            [f"  WARNING: our sockets dropped {self.socket_drops} probes; loss is overstated"]
            if self.socket_drops else []))


def _check_args(count: int, interval_s: float, payload_bytes: int) -> None:
    if not 1 <= count <= MAX_COUNT:
        raise SpecError(f"count: must be 1..{MAX_COUNT}, got {count}")
    if not 0 <= interval_s <= 10:
        raise SpecError(f"interval: must be 0..10 s, got {interval_s}")
    if not PAYLOAD.size <= payload_bytes <= 1400:
        raise SpecError(f"payload: must be {PAYLOAD.size}..1400 bytes, got {payload_bytes}")


def _resume_after_stall(start: float, seq: int, interval_s: float, now: float) -> float:
    """The schedule's start, moved on when probe seq is due more than one interval ago
    (the sender did not run: a stall of the machine), so that the probes after a stall
    keep their interval instead of leaving in one catch-up burst. A burst of hundreds
    overflows the fibre's queue (sized from its BDP), and those drops would read as
    loss: 28.6 % for a 2 % fibre after a 0.6 s stall under QEMU TCG."""
    late = now - (start + seq * interval_s)
    return start + late if late > interval_s else start


def _send_all(tx: socket.socket, dst_ip: str, ident: int, count: int, interval_s: float,
              payload_bytes: int) -> list[int]:
    """Send the probes on schedule; their user-space send times (ns).

    scapy builds the probe once; each send patches in its sequence number and send time
    and recomputes the checksum, so the timestamp is taken microseconds before sendto()."""
    template = bytes(ICMP(type=ECHO_REQUEST, id=ident, seq=0, chksum=0)
                     / Raw(b"\0" * payload_bytes))
    sent_at: list[int] = []
    start = time.perf_counter()
    for seq in range(count):
        start = _resume_after_stall(start, seq, interval_s, time.perf_counter())
        delay = start + seq * interval_s - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        buf = bytearray(template)
        struct.pack_into("!H", buf, 6, seq & 0xFFFF)
        now_ns = time.time_ns()
        sent_at.append(now_ns)
        PAYLOAD.pack_into(buf, 8, seq, now_ns)
        struct.pack_into("!H", buf, 2, checksum(bytes(buf)))
        tx.sendto(buf, (dst_ip, 0))
    return sent_at


def _linger(replies: _Inbox, arrivals: _Inbox, count: int, linger_s: float) -> None:
    """Wait for the last replies: linger_s, or three RTTs past the last send on a long
    path (at most 10 s)."""
    last_send = time.monotonic()
    deadline = last_send + linger_s
    while time.monotonic() < deadline:
        got = len(replies.packets)
        if got >= count and len(arrivals.packets) >= count:
            break
        if got:
            deadline = max(deadline, last_send + min(3 * _rtt_s(replies.packets[-1]), 10.0))
        time.sleep(0.02)


def probe(src_ns: str, dst_ns: str, dst_ip: str, count: int = 1000,
          interval_s: float = 0.001, payload_bytes: int = 56, linger_s: float = 1.0,
          src: str = "", dst: str = "") -> ProbeReport:
    """Send `count` probes from the namespace src_ns to dst_ip (in dst_ns), one every
    interval_s, then wait linger_s (longer if the RTT is) for the last replies."""
    _check_args(count, interval_s, payload_bytes)
    ident = (os.getpid() ^ threading.get_ident()) & 0xFFFF
    tx = _icmp_socket(src_ns)
    tx.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPING, TX_STAMPS)
    rx = _icmp_socket(dst_ns)
    stop = threading.Event()
    replies, arrivals = _Inbox(), _Inbox()
    threads = [threading.Thread(target=_receive, args=(sock, stop, box, tx_stamps),
                                daemon=True)
               for sock, box, tx_stamps in ((tx, replies, True), (rx, arrivals, False))]
    for t in threads:
        t.start()
    try:
        sent_at = _send_all(tx, dst_ip, ident, count, interval_s, payload_bytes)
        _linger(replies, arrivals, count, linger_s)
    finally:
        stop.set()
        for t in threads:  # each drains its socket first
            t.join(timeout=30)
        _drain_tx_stamps(tx, replies)
        tx.close()
        rx.close()
    late_ms, windows = _stalls(int(interval_s * 1e9), sent_at, int(STALL_MS * 1e6))
    rep = _report(src or src_ns, dst or dst_ns, count, interval_s,
                  _ours(replies, ident, ECHO_REPLY), _ours(arrivals, ident, ECHO_REQUEST),
                  kernel_sent_ns=_tx_times(replies.sent, ident), stalls=windows)
    rep.pacing_late_ms = late_ms
    rep.socket_drops = replies.socket_drops + arrivals.socket_drops
    return rep


def _stall_test(stalls: list[tuple[int, int]]) -> Callable[[int, int], bool]:
    """A test of whether a packet's flight (sent_ns, received_ns) overlaps one of the
    disjoint stall windows (start_ns, end_ns): such a packet's timing and order are the
    lab kernel's pause, not the fibre's."""
    stalls = sorted(stalls)
    ends = [b for _, b in stalls]  # disjoint windows: their ends are sorted too

    def overlaps(sent_ns: int, rx_ns: int) -> bool:
        k = bisect.bisect_right(ends, sent_ns)  # the first stall ending after the send
        return k < len(stalls) and stalls[k][0] < rx_ns
    return overlaps


def _report(src: str, dst: str, sent: int, interval_s: float,
            replies: list[tuple[int, int, int]],
            arrivals: list[tuple[int, int, int]],
            kernel_sent_ns: dict[int, int] | None = None,
            stalls: list[tuple[int, int]] | None = None) -> ProbeReport:
    """Tally replies and arrivals (seq, sent_ns, received_ns); a kernel TX stamp in
    kernel_sent_ns replaces the send time the probe carried; replies whose flight overlaps
    a stall window (start_ns, end_ns) are left out of rtt_clear_ms, and reordered arrivals
    whose flight does are counted in reordered_in_stall too."""
    kernel_sent_ns = kernel_sent_ns or {}
    in_stall = _stall_test(stalls or [])
    rep = ProbeReport(src, dst, sent, interval_s, kernel_sent=len(kernel_sent_ns))
    seen: set[int] = set()
    highest = -1
    for seq, sent_ns, rx_ns in arrivals:  # in arrival order
        if seq in seen:
            rep.duplicates += 1
            continue
        seen.add(seq)
        sent_ns = kernel_sent_ns.get(seq, sent_ns)
        if seq < highest:
            rep.reordered += 1
            rep.reordered_in_stall += in_stall(sent_ns, rx_ns)
        highest = max(highest, seq)
        rep.one_way_ms.append((rx_ns - sent_ns) / 1e6)
    rep.arrived = len(seen)
    back: set[int] = set()
    for seq, sent_ns, rx_ns in replies:
        if seq not in back:
            back.add(seq)
            sent_ns = kernel_sent_ns.get(seq, sent_ns)
            rtt = (rx_ns - sent_ns) / 1e6
            rep.rtt_ms.append(rtt)
            if in_stall(sent_ns, rx_ns):
                rep.stalled += 1
            else:
                rep.rtt_clear_ms.append(rtt)
    rep.returned = len(back)
    return rep
