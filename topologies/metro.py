"""metro: the `apn` topology over a 60 km metro span (~0.59 ms RTT), the distance
hyperscalers keep between their sites."""

import os
import sys

# `mn --custom` exec()s this file without __file__: find it from the code object instead,
# and put this folder and the repository root (for `testbed`) on the path.
_HERE = os.path.dirname(os.path.abspath(globals().get("__file__")
                                        or sys._getframe().f_code.co_filename))
sys.path[:0] = [p for p in (_HERE, os.path.dirname(_HERE)) if p not in sys.path]

from apn import ApnTopo  # noqa: E402


class MetroTopo(ApnTopo):
    """Storage site -- 60 km metro fibre -- GPU-site switch -- N workers."""

    def build(self, workers: int = 2, distance_km: float = 60.0, rate: str = "1gbit",
              loss_pct: float = 0.0, jitter_ms: float = 0.0, mtu: int = 1500) -> None:
        super().build(workers=workers, distance_km=distance_km, rate=rate,
                      loss_pct=loss_pct, jitter_ms=jitter_ms, mtu=mtu)


topos = {"metro": MetroTopo}
