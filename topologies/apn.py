"""apn: a storage site and a GPU site joined by one span of APN fibre.

    srv (NFS server) --[fibre: distance_km, rate, loss_pct, jitter_ms]-- s1 -- w1 .. wN

Also a Mininet custom file:
    mn --custom topologies/apn.py --topo apn,workers=4,distance_km=3000 --link fibre \
       --switch lxbr --controller none --test pingall
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402,F401  (puts the repository root on sys.path for `mn`)

from testbed.spec import FibreSpec, parse_rate  # noqa: E402
from testbed.topology import SiteTopo  # noqa: E402


class ApnTopo(SiteTopo):
    """Storage site -- APN fibre -- GPU-site switch -- N workers."""

    def build(self, workers: int = 2, distance_km: float = 3000.0, rate: str = "1gbit",
              loss_pct: float = 0.0, jitter_ms: float = 0.0, mtu: int = 1500) -> None:
        if workers < 1:
            from testbed.errors import SpecError
            raise SpecError(f"workers: must be >= 1, got {workers}")
        fibre = FibreSpec(distance_km=distance_km, rate_mbit=parse_rate(rate),
                          loss_pct=loss_pct, jitter_ms=jitter_ms, mtu=mtu)
        srv = self.storage("srv")
        gpu = self.switch("s1")
        self.fibre(srv, gpu, fibre)
        for i in range(1, workers + 1):
            self.lan(self.worker(f"w{i}"), gpu)


topos = {"apn": ApnTopo}


def _fibre_link(*args, **kwargs):  # resolved lazily: only `mn` needs mininet.link
    from testbed.mininet_link import FibreLink
    return FibreLink(*args, **kwargs)


links = {"fibre": _fibre_link}
