"""cluster: N GPU servers of G GPUs each behind M parallel fibre spans from one storage site.

    srv -- s0 --[fibre "f1"]-- s1 -- servers 1, 1+M, 1+2M, ... (G workers each)
               --[fibre "f2"]-- s2 -- servers 2, 2+M, ...
               ...
               --[fibre "fM"]-- sM -- servers M, 2M, ...

Server i (1-based) sits on fibre ((i - 1) mod M) + 1, round-robin; each span is its own
htb + netem fibre (distance_km, rate, loss_pct, jitter_ms: every span the same, unless an
experiment sets `fibre.fJ.KNOB`). A server is G workers `n<i>g<j>` (zero-padded so that
a site's names sort server by server): topology.host_sizes groups a site's workers, in
that order, into GPU hosts of the host profile's `host_gpus`, which experiments pass as
`gpus` (testbed.topology.PARAM_KNOBS), so each server is one GPU host with its own NIC
(docs/hosts.md). The storage host reaches the spans through its site's switch s0, on a
plain (unshaped) link.

Also a Mininet custom file, as apn.py is, from the repository root:
    env PYTHONPATH=$PWD mn --custom topologies/cluster.py \
       --topo cluster,servers=2,gpus=2,fibres=2 --link fibre --switch lxbr \
       --controller none --test pingall
"""

import os
import sys

from testbed import schema
from testbed.errors import SpecError
from testbed.spec import FibreSpec, parse_rate
from testbed.topology import SiteTopo


def worker_name(server: int, gpu: int, servers: int, gpus: int) -> str:
    """GPU `gpu` of server `server` (both 1-based): n<server>g<gpu>, each index padded to
    the width of its largest, so that names sort server by server (n02g1 before n10g1)."""
    return f"n{server:0{len(str(servers))}d}g{gpu:0{len(str(gpus))}d}"


class ClusterTopo(SiteTopo):
    """Storage site -- M parallel fibres -- N GPU servers of G workers, round-robin.
    The fibres' defaults are the knobs' (testbed knobs); in testbed `-p servers=2
    -p gpus=8 -p fibres=2 -p distance_km=3000`."""

    def build(self, servers: int = schema.default("servers"), gpus: int = 8,
              fibres: int = schema.default("fibres"),
              distance_km: float = schema.default("distance_km"),
              rate: str = schema.number(schema.default("rate")),
              loss_pct: float = schema.default("loss_pct"),
              jitter_ms: float = schema.default("jitter_ms"),
              mtu: int = schema.default("mtu")) -> None:
        gpus = schema.check("host_gpus", gpus, "gpus")
        most = schema.row("workers").hi
        if servers * gpus > most:
            raise SpecError(f"servers x gpus = {servers} x {gpus} = {servers * gpus} "
                            f"workers: at most {most:g}")
        spec = FibreSpec(distance_km=distance_km, rate_mbit=parse_rate(rate),
                         loss_pct=loss_pct, jitter_ms=jitter_ms, mtu=mtu)
        srv, core = self.storage("srv"), self.switch("s0")
        self.lan(srv, core)
        edges = []
        for j in range(1, fibres + 1):
            edges.append(self.switch(f"s{j}"))
            self.fibre(core, edges[-1], spec, name=f"f{j}")
        for i in range(1, servers + 1):
            for g in range(1, gpus + 1):
                self.lan(self.worker(worker_name(i, g, servers, gpus)),
                         edges[(i - 1) % fibres])


topos = {"cluster": ClusterTopo}


def _fibre_link(*args, **kwargs):  # resolved lazily: only `mn` needs mininet.link
    from testbed.network.mininet_link import FibreLink
    return FibreLink(*args, **kwargs)


links = {"fibre": _fibre_link}

# Mininet 2.3's `mn` ignores a custom file's `links` (see apn.py): extend its LINKS table.
if os.path.basename(sys.argv[0]) == "mn":
    from mininet.link import Link, OVSLink, TCLink, TCULink

    LINKS = {"default": Link, "tc": TCLink, "tcu": TCULink, "ovs": OVSLink, **links}
