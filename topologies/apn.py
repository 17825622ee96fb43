"""apn: a storage site and a GPU site joined by one span of APN fibre; and metro, the same
over a 60 km metro span (~0.59 ms RTT), the distance hyperscalers keep between their sites.

    srv (NFS server) --[fibre "wan": distance_km, rate, loss_pct, jitter_ms]-- s1 -- w1 .. wN

Also a Mininet custom file, for an `mn` whose Python imports testbed (the venv's, or
Debian's with the checkout on its path), from the repository root:
    sudo env PYTHONPATH=$PWD mn --custom topologies/apn.py --topo apn,workers=4 \
       --link fibre --switch lxbr --controller none --test pingall
"""

import os
import sys

from testbed import schema
from testbed.spec import FibreSpec, parse_rate
from testbed.topology import SiteTopo

METRO_KM = 60.0  # the metro topology's span: the distance hyperscalers keep between sites


class ApnTopo(SiteTopo):
    """Storage site -- APN fibre -- GPU-site switch -- N workers. The fibre's defaults are
    the knobs' (testbed knobs: 0 km, 1 Gbit/s, no loss); ask for a distance, e.g.
    `--topo apn,distance_km=3000` in mn or `-p distance_km=3000` in testbed."""

    def build(self, workers: int = 2, distance_km: float = schema.default("distance_km"),
              rate: str = schema.number(schema.default("rate")),
              loss_pct: float = schema.default("loss_pct"),
              jitter_ms: float = schema.default("jitter_ms"),
              mtu: int = schema.default("mtu")) -> None:
        fibre = FibreSpec(distance_km=distance_km, rate_mbit=parse_rate(rate),
                          loss_pct=loss_pct, jitter_ms=jitter_ms, mtu=mtu)
        srv = self.storage("srv")
        gpu = self.switch("s1")
        self.fibre(srv, gpu, fibre, name="wan")
        for i in range(1, workers + 1):
            self.lan(self.worker(f"w{i}"), gpu)


class MetroTopo(ApnTopo):
    """Storage site -- 60 km metro fibre -- GPU-site switch -- N workers."""

    def build(self, workers: int = 2, distance_km: float = METRO_KM,
              rate: str = schema.number(schema.default("rate")),
              loss_pct: float = schema.default("loss_pct"),
              jitter_ms: float = schema.default("jitter_ms"),
              mtu: int = schema.default("mtu")) -> None:
        super().build(workers=workers, distance_km=distance_km, rate=rate,
                      loss_pct=loss_pct, jitter_ms=jitter_ms, mtu=mtu)


topos = {"apn": ApnTopo, "metro": MetroTopo}


def _fibre_link(*args, **kwargs):  # resolved lazily: only `mn` needs mininet.link
    from testbed.network.mininet_link import FibreLink
    return FibreLink(*args, **kwargs)


links = {"fibre": _fibre_link}

# Mininet 2.3's `mn` ignores a custom file's `links` (a missing comma in its setCustom) but
# does take other globals: extend its LINKS table so that `--link fibre` resolves.
if os.path.basename(sys.argv[0]) == "mn":
    from mininet.link import Link, OVSLink, TCLink, TCULink

    LINKS = {"default": Link, "tc": TCLink, "tcu": TCULink, "ovs": OVSLink, **links}
