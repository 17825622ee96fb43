"""local: the co-located baseline. The same hosts as `apn`, all on one switch, no fibre.

    srv (NFS server) -- s1 -- w1 .. wN
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402,F401

from testbed.errors import SpecError  # noqa: E402
from testbed.topology import SiteTopo  # noqa: E402


class LocalTopo(SiteTopo):
    """Storage and GPU workers in one site (no fibre): the baseline."""

    def build(self, workers: int = 2) -> None:
        if workers < 1:
            raise SpecError(f"workers: must be >= 1, got {workers}")
        srv = self.storage("srv")
        gpu = self.switch("s1")
        self.lan(srv, gpu)
        for i in range(1, workers + 1):
            self.lan(self.worker(f"w{i}"), gpu)


topos = {"local": LocalTopo}
