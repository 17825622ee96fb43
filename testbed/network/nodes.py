"""What the parts of a running network need of it: the Nodes protocol.

The network's parts (host TCP policy, processes, offloads) address nodes by name and
reach them through the network that built them. They are written against this protocol,
not against Network itself, so that engine.py (which builds and holds them) is the only
module that imports them and none of them imports engine.py back.
"""

from __future__ import annotations

from typing import Protocol

from mininet.topo import Topo
from pyroute2 import IPRoute

from testbed.spec import FibreSpec


class Nodes(Protocol):
    """A running topology's nodes: their namespaces, netlink sockets and fibres."""

    topo: Topo
    prefix: str

    @property
    def hosts(self) -> list[str]:
        """The topology's hosts (storage and workers), sorted."""
        ...

    def namespace(self, node: str) -> str:
        """The namespace name of `node` in this run."""
        ...

    def netns_path(self, node: str) -> str:
        """The /run/netns path of node's namespace."""
        ...

    def ipr(self, node: str) -> IPRoute:
        """The netlink socket of node's namespace."""
        ...

    def fibre_links(self) -> dict[tuple[str, str], FibreSpec]:
        """(a, b) -> the FibreSpec currently applied."""
        ...
