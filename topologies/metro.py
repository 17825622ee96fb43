"""metro: the `apn` topology over a 60 km metro span (~0.59 ms RTT), the distance
hyperscalers keep between their sites."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402,F401

from apn import ApnTopo  # noqa: E402


class MetroTopo(ApnTopo):
    """Storage site -- 60 km metro fibre -- GPU-site switch -- N workers."""

    def build(self, workers: int = 2, distance_km: float = 60.0, rate: str = "1gbit",
              loss_pct: float = 0.0, jitter_ms: float = 0.0, mtu: int = 1500) -> None:
        super().build(workers=workers, distance_km=distance_km, rate=rate,
                      loss_pct=loss_pct, jitter_ms=jitter_ms, mtu=mtu)


topos = {"metro": MetroTopo}
