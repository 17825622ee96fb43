"""FibreLink: a Mininet link class that applies the testbed's fibre model.

For `mn --custom topologies/apn.py --topo apn --link fibre`: Mininet builds the hosts and
veths as usual; on links that carry a FibreSpec (the topology's `fibre=` option) this class
installs the same htb + netem tree as the testbed's own engine (testbed.network.tc), through
pyroute2 in each node's namespace. Unlike TCLink it has no 1 Gbit/s cap, sizes netem's limit
from the bandwidth-delay product and can be reset to zero delay/loss.
"""

from __future__ import annotations

from typing import Any

from mininet.link import Link
from pyroute2 import IPRoute

from testbed.network import tc
from testbed.spec import FibreSpec


class FibreLink(Link):
    """A Mininet Link whose ends carry the testbed's fibre model (see the module doc)."""

    def __init__(self, node1: Any, node2: Any, fibre: FibreSpec | None = None,
                 **params: Any) -> None:
        for key in ("role", "fibre_name"):
            params.pop(key, None)
        super().__init__(node1, node2, **params)
        self.fibre = fibre
        if fibre is not None:
            self.apply(fibre)

    def apply(self, fibre: FibreSpec) -> None:
        """Install the fibre's htb + netem tree on both ends (each its own direction)."""
        for intf, forward in ((self.intf1, True), (self.intf2, False)):
            with IPRoute(netns=f"/proc/{intf.node.pid}/ns/net") as ipr:
                idx = ipr.link_lookup(ifname=intf.name)[0]
                tc.apply(ipr, idx, intf.name, fibre.direction(forward))
        self.fibre = fibre
