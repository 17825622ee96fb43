"""local: the co-located baseline. The same hosts as `apn`, all on one switch, no fibre.

    srv (NFS server) -- s1 -- w1 .. wN
"""

import os
import sys

# `mn --custom` exec()s this file without __file__: find it from the code object instead,
# and put this folder and the repository root (for `testbed`) on the path.
_HERE = os.path.dirname(os.path.abspath(globals().get("__file__")
                                        or sys._getframe().f_code.co_filename))
sys.path[:0] = [p for p in (_HERE, os.path.dirname(_HERE)) if p not in sys.path]

from testbed.topology import SiteTopo  # noqa: E402


class LocalTopo(SiteTopo):
    """Storage and GPU workers in one site (no fibre): the baseline."""

    def build(self, workers: int = 2) -> None:
        srv = self.storage("srv")
        gpu = self.switch("s1")
        self.lan(srv, gpu)
        for i in range(1, workers + 1):
            self.lan(self.worker(f"w{i}"), gpu)


topos = {"local": LocalTopo}
