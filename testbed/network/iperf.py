"""One iperf3 TCP flow between two hosts of a running Network, from its JSON report.

The server runs in the receiver's namespace (started through net.procs.popen, so it is
recorded and stopped by its PID), the client in the sender's namespace sends for `seconds`
after `omit_s` of warm-up that iperf3 leaves out of its sums. iperf3 is a C program: its
per-byte cost in the one-CPU lab kernel is far below a Python sender's.

    flow = iperf.run(net, "srv", "w1", seconds=30, omit_s=3)
    flow.mbit, flow.retransmits, flow.cc, flow.mean_rtt_ms
"""

from __future__ import annotations

import json
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.errors import KernelError
from testbed.network.namespace import in_namespace

if TYPE_CHECKING:
    from testbed.network.engine import Network

DEFAULT_PORT = 5201
LISTEN_STATE = "0A"  # TCP_LISTEN in /proc/net/tcp


@dataclass(frozen=True)
class Flow:
    """What one flow achieved over its measured part (warm-up excluded)."""

    sender: str
    receiver: str
    seconds: float
    mbit: float  # received payload rate
    retransmits: int  # segments the sender retransmitted
    cc: str  # the sender's congestion control, as iperf3 read it from the socket
    mean_rtt_ms: float  # the sender's smoothed RTT (tcp_info), iperf3's mean over the run
    interval_mbit: list[float] = field(default_factory=list)  # per reporting interval

    def interval_ci95(self) -> tuple[float, float]:
        """A 95 % interval of the mean rate from the per-interval rates (normal
        approximation; intervals of a TCP flow are correlated, so read it as a guide)."""
        xs = self.interval_mbit
        if len(xs) < 2:
            return (self.mbit, self.mbit)
        half = 1.96 * statistics.stdev(xs) / len(xs) ** 0.5
        mean = statistics.fmean(xs)
        return (mean - half, mean + half)


def _listening(namespace: str, port: int) -> bool:
    with in_namespace(namespace):
        rows = Path("/proc/thread-self/net/tcp").read_text().splitlines()[1:]
    for row in rows:
        cols = row.split()
        if cols[3] == LISTEN_STATE and int(cols[1].rsplit(":", 1)[1], 16) == port:
            return True
    return False


def parse(report: dict[str, Any], sender: str, receiver: str) -> Flow:
    """A Flow from iperf3's client JSON (-J). Raises KernelError on an iperf3 error."""
    if report.get("error"):
        raise KernelError(f"iperf3 {sender}->{receiver}: {report['error']}")
    end = report["end"]
    streams = end.get("streams") or [{}]
    rtt_us = streams[0].get("sender", {}).get("mean_rtt", 0)
    intervals = [i["sum"]["bits_per_second"] / 1e6 for i in report.get("intervals", [])
                 if not i["sum"].get("omitted")]
    return Flow(sender=sender, receiver=receiver,
                seconds=float(end["sum_received"]["seconds"]),
                mbit=end["sum_received"]["bits_per_second"] / 1e6,
                retransmits=int(end["sum_sent"].get("retransmits", 0)),
                cc=str(end.get("sender_tcp_congestion", "")),
                mean_rtt_ms=rtt_us / 1000.0,
                interval_mbit=intervals)


def run(net: Network, sender: str, receiver: str, seconds: float, omit_s: float = 0.0,
        port: int = DEFAULT_PORT, interval_s: float = 1.0) -> Flow:
    """One TCP flow sender -> receiver for `seconds` after `omit_s` of warm-up.

    Raises KernelError if iperf3 fails or does not finish in time."""
    server = net.procs.popen(receiver, ["iperf3", "-s", "-1", "-B", net.address(receiver),
                                  "-p", str(port)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not _listening(net.namespace(receiver), port):
            if server.poll() is not None or time.monotonic() > deadline:
                raise KernelError(f"iperf3 server in {receiver} did not start listening")
            time.sleep(0.02)
        argv = ["iperf3", "-c", net.address(receiver), "-p", str(port), "-J",
                "-t", f"{seconds:g}", "-O", f"{omit_s:g}", "-i", f"{interval_s:g}"]
        proc = net.procs.run(sender, argv, timeout=seconds + omit_s + 60, check=False)
        try:
            report = json.loads(proc.stdout)
        except json.JSONDecodeError:
            raise KernelError(f"iperf3 {sender}->{receiver} (exit {proc.returncode}): "
                              f"{(proc.stderr or proc.stdout).strip()[-200:]}") from None
        return parse(report, sender, receiver)
    finally:
        try:
            server.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        net.procs.stop(server)
