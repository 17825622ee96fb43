"""What a path between two namespaces of a running Network delivers, measured with plain
sockets (no tools; testbed.network.sockets opens them in the namespaces).

tcp_rtt       TCP connect() times (SYN -> SYN/ACK = one RTT), in ms
udp_loss      datagrams sent A->B vs received: the one-way loss of the path
tcp_goodput   one TCP flow A->B for a fixed time: Mbit/s received
binomial_ci   Wilson interval for a loss fraction (used to judge loss figures)
"""

from __future__ import annotations

import math
import socket
import statistics
import threading
import time
from dataclasses import dataclass

from testbed.network.sockets import ns_socket


@dataclass(frozen=True)
class RttStats:
    """Round-trip samples (ms) and their summary figures."""
    samples_ms: list[float]

    @property
    def min_ms(self) -> float:
        """The smallest sample."""
        return min(self.samples_ms)

    @property
    def median_ms(self) -> float:
        """The median sample."""
        return statistics.median(self.samples_ms)

    @property
    def p99_ms(self) -> float:
        """The 99th percentile (nearest rank)."""
        s = sorted(self.samples_ms)
        return s[min(len(s) - 1, int(math.ceil(0.99 * len(s))) - 1)]


def tcp_rtt(src_ns: str, dst_ns: str, dst_ip: str, count: int = 20, port: int = 5201) -> RttStats:
    """Time `count` TCP handshakes from src to a listener in dst."""
    server = ns_socket(dst_ns)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((dst_ip, port))
    server.listen(count + 8)
    samples: list[float] = []
    try:
        for _ in range(count):
            c = ns_socket(src_ns)
            c.settimeout(10)
            t0 = time.perf_counter()
            c.connect((dst_ip, port))
            samples.append((time.perf_counter() - t0) * 1000.0)
            c.close()
            conn, _ = server.accept()
            conn.close()
    finally:
        server.close()
    return RttStats(samples)


def udp_loss(src_ns: str, dst_ns: str, dst_ip: str, count: int = 2000, port: int = 5202,
             interval_s: float = 0.0005, settle_s: float = 1.0) -> tuple[int, int]:
    """Send `count` numbered datagrams src->dst; return (sent, received distinct)."""
    return count, len(udp_received(src_ns, dst_ns, dst_ip, count, port, interval_s,
                                   settle_s))


def udp_received(src_ns: str, dst_ns: str, dst_ip: str, count: int = 2000,
                 port: int = 5202, interval_s: float = 0.0005,
                 settle_s: float = 1.0) -> set[int]:
    """Send datagrams numbered 0..count-1 src->dst; return the numbers that arrived."""
    rx = ns_socket(dst_ns, kind=socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
    rx.bind((dst_ip, port))
    rx.settimeout(0.2)
    got: set[int] = set()
    done = threading.Event()

    def receive() -> None:
        while not done.is_set():
            try:
                data = rx.recv(64)
            except socket.timeout:
                continue
            got.add(int.from_bytes(data[:4], "big"))

    t = threading.Thread(target=receive, daemon=True)
    t.start()
    tx = ns_socket(src_ns, kind=socket.SOCK_DGRAM)
    try:
        for i in range(count):
            tx.sendto(i.to_bytes(4, "big") + b"\0" * 28, (dst_ip, port))
            if interval_s:
                time.sleep(interval_s)
        time.sleep(settle_s)
    finally:
        done.set()
        t.join()
        tx.close()
        rx.close()
    return got


def binomial_ci(losses: int, n: int, z: float = 3.29) -> tuple[float, float]:
    """Wilson score interval for a proportion (z=3.29: 99.9 %)."""
    if n <= 0:
        raise ValueError("n must be > 0")
    p = losses / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def _receive_mbit(server: socket.socket, warmup_s: float) -> float:
    """Accept one connection on `server` and read it to its end; the Mbit/s received
    after the first warmup_s (the whole connection if it ended sooner)."""
    conn, _ = server.accept()
    view = memoryview(bytearray(1 << 20))
    total = 0
    start = time.perf_counter()
    mark_t, mark_b = None, 0
    while True:
        n = conn.recv_into(view)
        if not n:
            break
        total += n
        now = time.perf_counter()
        if mark_t is None and now - start >= warmup_s:
            mark_t, mark_b = now, total
    end = time.perf_counter()
    conn.close()
    if mark_t is None:
        mark_t, mark_b = start, 0
    return (total - mark_b) * 8 / 1e6 / max(end - mark_t, 1e-9)


def _send_for(sock: socket.socket, dst: tuple[str, int], seconds: float) -> None:
    """Connect `sock` to dst and send zeros in 1 MiB writes for `seconds`."""
    sock.connect(dst)
    chunk = b"\0" * (1 << 20)
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        sock.sendall(chunk)


def tcp_goodput(src_ns: str, dst_ns: str, dst_ip: str, seconds: float = 5.0,
                port: int = 5203, warmup_s: float = 1.0) -> float:
    """One TCP flow src->dst for `seconds` after `warmup_s`; returns Mbit/s received."""
    server = ns_socket(dst_ns)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((dst_ip, port))
    server.listen(1)
    result: dict[str, float] = {}

    def sink() -> None:
        result["mbit"] = _receive_mbit(server, warmup_s)

    t = threading.Thread(target=sink, daemon=True)
    t.start()
    c = ns_socket(src_ns)
    try:
        _send_for(c, (dst_ip, port), warmup_s + seconds)
    finally:
        c.close()
        t.join(timeout=60)
        server.close()
    return result.get("mbit", 0.0)
