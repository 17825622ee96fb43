"""TCP's counters in a namespace (/proc/net/netstat's TcpExt and /proc/net/snmp's Tcp, as
the namespace's own kernel keeps them), read by entering the namespace in this thread.

timeouts  TcpExt TCPTimeouts (RTOs that expired) and Tcp RetransSegs, summed over
          namespaces: read before and after a point, the difference is what its fibre
          events cost TCP
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from testbed.network.namespace import in_namespace

COUNTERS = (("/proc/thread-self/net/netstat", "TcpExt:", "TCPTimeouts"),
            ("/proc/thread-self/net/snmp", "Tcp:", "RetransSegs"))


def _table(text: str, prefix: str) -> dict[str, int]:
    """The named-counter table of /proc/net/netstat or snmp starting with `prefix`."""
    lines = text.splitlines()
    for names, values in zip(lines[::2], lines[1::2]):
        if names.startswith(prefix) and values.startswith(prefix):
            return {n: int(v) for n, v in zip(names.split()[1:], values.split()[1:])
                    if v.lstrip("-").isdigit()}
    return {}


def read(namespace: str) -> dict[str, int]:
    """TCPTimeouts and RetransSegs of one namespace (0 where the kernel has none)."""
    out: dict[str, int] = {}
    with in_namespace(namespace):
        texts = {path: Path(path).read_text() for path, _, _ in COUNTERS}
    for path, prefix, name in COUNTERS:
        out[name] = _table(texts[path], prefix).get(name, 0)
    return out


def timeouts(namespaces: Iterable[str]) -> dict[str, int]:
    """TCPTimeouts and RetransSegs summed over namespaces."""
    total = {name: 0 for _, _, name in COUNTERS}
    for ns in namespaces:
        for name, value in read(ns).items():
            total[name] += value
    return total
