"""FibreLink: a Mininet link class that applies the testbed's fibre model.

For `mn --custom topologies/apn.py --topo apn --link fibre`: Mininet builds the hosts and
veths as usual; on links that carry a FibreSpec (the topology's `fibre=` option) this class
installs the same htb + netem tree as the testbed's own engine (testbed.network.tc), through
pyroute2 in each node's namespace. Unlike TCLink it has no 1 Gbit/s cap, sizes netem's limit
from the bandwidth-delay product and can be reset to zero delay/loss. Its ends are
FibreIntf, which Mininet re-applies after Open vSwitch has attached a port (and removed
its qdiscs), so the fibre holds with mn's default OVS switch as with Linux bridges.
"""

from __future__ import annotations

from typing import Any

from mininet.link import Intf, Link, TCIntf
from pyroute2 import IPRoute, netns

from testbed.network import tc
from testbed.spec import Direction, FibreSpec


class FibreIntf(TCIntf):
    """One end of a fibre: its direction's htb + netem, (re)applied by config().

    A TCIntf only so that Mininet re-applies it: Open vSwitch deletes the root qdisc of every
    port it attaches, and Mininet's OVSSwitch calls config() again on TCIntf ports afterwards
    (TCReapply). Measured in the Vagrant VM (Debian 12, OVS 3.1, mininet 2.3.0): with a plain
    Intf the switch end lost its netem and a 3,000 km apn link pinged 16 ms instead of 29.4."""

    direction: Direction | None = None

    def config(self, **params: Any) -> Any:
        """Configure the interface as Mininet does, then (re)apply this end's fibre."""
        result = Intf.config(self, **params)  # addresses and link state; none of TCIntf's tc
        if self.direction is not None:
            # Enter the node's namespace around a plain IPRoute (rather than
            # IPRoute(netns=...), pyroute2 >= 0.7.3): Debian 12's own `mn` runs with
            # Debian's pyroute2 0.7.2.
            netns.pushns(f"/proc/{self.node.pid}/ns/net")
            try:
                with IPRoute() as ipr:
                    idx = ipr.link_lookup(ifname=self.name)[0]
                    tc.apply(ipr, idx, self.name, self.direction)
            finally:
                netns.popns()
        return result


class FibreLink(Link):
    """A Mininet Link whose ends carry the testbed's fibre model (see the module doc)."""

    def __init__(self, node1: Any, node2: Any, fibre: FibreSpec | None = None,
                 **params: Any) -> None:
        for key in ("role", "fibre_name"):
            params.pop(key, None)
        params.setdefault("cls1", FibreIntf)
        params.setdefault("cls2", FibreIntf)
        super().__init__(node1, node2, **params)
        self.fibre = fibre
        if fibre is not None:
            self.apply(fibre)

    def apply(self, fibre: FibreSpec) -> None:
        """Install the fibre's htb + netem tree on both ends (each its own direction)."""
        for intf, forward in ((self.intf1, True), (self.intf2, False)):
            if isinstance(intf, FibreIntf):
                intf.direction = fibre.direction(forward)
                intf.config(**intf.params)
        self.fibre = fibre
