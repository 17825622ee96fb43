"""local: the co-located baseline. The same hosts as `apn`, all on one switch, no fibre.

    srv (NFS server) -- s1 -- w1 .. wN
"""

from testbed.topology import SiteTopo


class LocalTopo(SiteTopo):
    """Storage and GPU workers in one site (no fibre): the baseline."""

    def build(self, workers: int = 2) -> None:
        srv = self.storage("srv")
        gpu = self.switch("s1")
        self.lan(srv, gpu)
        for i in range(1, workers + 1):
            self.lan(self.worker(f"w{i}"), gpu)


topos = {"local": LocalTopo}
