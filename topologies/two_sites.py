"""two-sites: one storage site feeding two GPU sites at different distances.

    srv -- s0 --[fibre "site_a": distance_a_km]-- s1 -- a1 .. aN
                \\-[fibre "site_b": distance_b_km]-- s2 -- b1 .. bN
"""

from testbed.spec import FibreSpec, parse_rate
from testbed.topology import SiteTopo


class TwoSitesTopo(SiteTopo):
    """One storage site, two GPU sites at distance_a_km and distance_b_km."""

    def build(self, workers: int = 1, distance_a_km: float = 60.0,
              distance_b_km: float = 3000.0, rate: str = "1gbit",
              loss_pct: float = 0.0) -> None:
        srv = self.storage("srv")
        core = self.switch("s0")
        self.lan(srv, core)
        for site, dist, sw in (("a", distance_a_km, "s1"), ("b", distance_b_km, "s2")):
            edge = self.switch(sw)
            self.fibre(core, edge, FibreSpec(distance_km=dist, rate_mbit=parse_rate(rate),
                                             loss_pct=loss_pct), name=f"site_{site}")
            for i in range(1, workers + 1):
                self.lan(self.worker(f"{site}{i}"), edge)


topos = {"two-sites": TwoSitesTopo}
