"""A worker's access link shaped as its end hosts allow (spec.HostSpec.access, model.host):
the emulated GPU host's NIC and NFS connections, and the storage server's share.

Each end of the link (the worker's own interface, for what it writes; the switch port
towards it, for what it reads) gets, when a limit there can bind:

    htb root 1: (default class 1:1)        the worker's share of its host's NIC and of
      class 1:1  rate = ceil               the server (leaf fq when a flow is capped too)
        fq 20:   maxrate                   one NFS connection's most: every TCP
                                           connection (RDMA queue pair) is a flow
or fq 1: alone when only the connections are capped; nothing when neither is.

Why here. The per-connection limit of a real client or server shows as a queue of the
connection's bytes where they wait to be sent or read. For writes the worker is the
sender: fq on its own interface paces each socket with the kernel's TCP small queues
holding the rest in the socket, as a real sender would. For reads the sender is the
storage host, whose interface is a fibre end already shaped by htb + netem (tc.py), and
fq put after netem would hold the same queue as here: so the switch port towards the
worker caps each read connection (forwarded packets are told apart by a hash of their
addresses and ports: ORPHAN_MASK makes two connections' sharing one flow a one in a
million chance). Nothing here may drop: fq's room is sized to every byte the TCP
buffers let be in flight (Access.flow_limit_pkts), so a capped connection is slowed by
its window, never by loss. fq's maxrate is a u32 of bytes/s (~34.4 Gbit/s, real time:
far above what a lab kernel moves).

apply() installs the tree from scratch (or removes ours); read() returns it as the
kernel reports it, with its counters, for tests and rows to compare.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pyroute2 import IPRoute

from testbed.errors import KernelError
from testbed.network import fq
from testbed.network import tc
from testbed.network.nodes import Nodes
from testbed.spec import Access, HostSpec
from testbed.topology import access_link, host_sizes

fq.install()
LEAF = "20:"
ORPHAN_MASK = 2**24 - 1  # flow hash bits of forwarded packets (fq's default: 1023)
U32_MAX = 2**32 - 1
QUEUED_FLOWS = 17  # fq's room in all: nconnect's 16 connections' and one more flow's


@dataclass(frozen=True)
class Shape:
    """One end's limits: htb's rate and fq's per-flow maxrate (Mbit/s on the wire, real
    time; inf: none), fq's room per flow (packets) and the link's MTU."""

    rate_mbit: float
    flow_mbit: float
    flow_limit_pkts: int
    mtu: int

    @property
    def empty(self) -> bool:
        """Whether nothing is capped (the device keeps its default qdisc)."""
        return math.isinf(self.rate_mbit) and math.isinf(self.flow_mbit)


def _fq_args(s: Shape) -> dict[str, Any]:
    """fq's options for a shape: maxrate in bytes/s (fq.NO_MAX_RATE: no cap), room for
    the flows' windows (QUEUED flows' worth in all), a wide flow hash."""
    rate = fq.NO_MAX_RATE if math.isinf(s.flow_mbit) else \
        min(fq.MAX_RATE_BYTES, max(1, round(s.flow_mbit * 1e6 / 8)))
    flow_limit = min(U32_MAX, max(100, s.flow_limit_pkts))
    return {"maxrate": rate, "flow_limit": flow_limit,
            "limit": min(U32_MAX, QUEUED_FLOWS * flow_limit), "orphan_mask": ORPHAN_MASK}



def apply(ipr: IPRoute, index: int, ifname: str, s: Shape) -> None:
    """Install the shape on device `index` (module docstring), replacing any of ours."""
    tc.clear(ipr, index, ifname)
    if s.empty:
        return
    if math.isinf(s.rate_mbit):
        tc.call("add fq", ifname, ipr.tc, "add", "fq", index=index, handle=tc.ROOT,
                root=True, **_fq_args(s))
        return
    tc.call("add htb", ifname, ipr.tc, "add", "htb", index=index, handle=tc.ROOT,
            default=1)
    tc.call("add htb class", ifname, ipr.tc, "add-class", "htb", index=index,
            handle=tc.CLASS, parent=tc.ROOT, **tc.htb_class_args(s.rate_mbit, s.mtu))
    tc.call("add fq", ifname, ipr.tc, "add", "fq", index=index, handle=LEAF,
            parent=tc.CLASS, **_fq_args(s))


@dataclass(frozen=True)
class Readback:
    """One end as the kernel reports it: htb's rate and fq's maxrate (Mbit/s, inf: none),
    fq's room per flow and in all (packets), and the drops and bytes sent of the tree."""

    rate_mbit: float
    flow_mbit: float
    flow_limit_pkts: int
    limit_pkts: int
    drops: int
    sent_bytes: int


def _qdiscs(ipr: IPRoute, index: int) -> dict[str, Any]:
    """Our qdiscs on a device by kind ("htb" at the root, "fq" anywhere)."""
    out: dict[str, Any] = {}
    for q in ipr.get_qdiscs(index=index):
        kind = q.get_attr("TCA_KIND")
        if kind == "fq" or (kind == "htb" and q["parent"] == 0xFFFFFFFF):
            out[kind] = q
    return out


def read(ipr: IPRoute, index: int, ifname: str) -> Readback:
    """The shape installed on device `index`, read back; KernelError without an fq
    (every shape that caps anything has one)."""
    found = _qdiscs(ipr, index)
    if "fq" not in found:
        raise KernelError(f"{ifname}: no fq installed (the access link is not shaped)")
    opts = found["fq"].get_attr("TCA_OPTIONS")
    maxrate = opts.get_attr("TCA_FQ_FLOW_MAX_RATE")
    rate = tc.htb_class(ipr, index, ifname)[0] * 8 / 1e6 if "htb" in found else math.inf
    drops, _, _, sent, _ = tc.stats(found.get("htb", found["fq"]))  # htb counts its leaf's
    return Readback(rate_mbit=rate,
                    flow_mbit=math.inf if maxrate in (None, fq.NO_MAX_RATE)
                    else maxrate * 8 / 1e6,
                    flow_limit_pkts=int(opts.get_attr("TCA_FQ_FLOW_PLIMIT")),
                    limit_pkts=int(opts.get_attr("TCA_FQ_PLIMIT")), drops=drops,
                    sent_bytes=sent)


def shaped(ipr: IPRoute, index: int) -> bool:
    """Whether a device carries one of our shapes (an fq)."""
    return "fq" in _qdiscs(ipr, index)


def _ends(nodes: Nodes, worker: str) -> dict[str, tuple[IPRoute, int, str]]:
    """The worker's access link ends by the direction they shape: "read" (the switch
    port towards it), "write" (its own interface): (netlink socket, index, name)."""
    mine, peer, theirs = access_link(nodes.topo, worker)
    out = {}
    for way, node, ifname in (("read", peer, theirs), ("write", worker, mine)):
        ipr = nodes.ipr(node)
        out[way] = (ipr, ipr.link_lookup(ifname=ifname)[0], ifname)
    return out


def shape_worker(nodes: Nodes, worker: str, a: Access, mtu: int) -> None:
    """Shape a worker's access link as `a` says, both ends (nothing where nothing can
    bind; what an earlier point installed is replaced)."""
    ends = _ends(nodes, worker)
    for way, rate, flow in (("read", a.read_rate_mbit, a.read_flow_mbit),
                            ("write", a.write_rate_mbit, a.write_flow_mbit)):
        apply(*ends[way], Shape(rate, flow, a.flow_limit_pkts, mtu))


def read_worker(nodes: Nodes, worker: str) -> dict[str, Readback | None]:
    """A worker's access link ends as the kernel reports them ("read", "write"; None:
    not shaped)."""
    return {way: read(*end) if shaped(*end[:2]) else None
            for way, end in _ends(nodes, worker).items()}


def shape_hosts(nodes: Nodes, host: HostSpec, transport: str, payload: float,
                lines: dict[str, float], buffer_bytes: int, mtu: int) -> None:
    """Shape every worker of `lines` (worker -> its line rate as emulated, Mbit/s) as the
    host profile allows (HostSpec.access): its host's GPUs per the profile, every worker
    of `lines` on the one server."""
    sizes = host_sizes(nodes.topo, host.gpus)
    for worker, line in lines.items():
        a = host.access(transport, sizes[worker], len(lines), payload, line, buffer_bytes,
                        mtu)
        shape_worker(nodes, worker, a, mtu)
