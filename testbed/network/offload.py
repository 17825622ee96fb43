"""Segmentation offloads on the emulated path: a lossy or jittery fibre drops and delays
MTU-sized frames, not 64 KiB super-packets.

Why. Linux hands its qdiscs whole GSO/TSO packets of up to 64 KiB, and netem drops or
delays such a packet whole (it segments only a packet it corrupts). With offloads on, a
configured 0.1 % loss hits one packet in a thousand super-packets of ~35 frames each, so
TCP sees ~35 times fewer loss events than the fibre's figure says, and a jittered delay
moves 35 frames at once.

Where segmentation happens decides what the netem of a fibre end sees:
  * TCP always builds GSO packets (the socket forces NETIF_F_GSO), so switching TSO/GSO
    off on a device only moves segmentation to that device's transmit, AFTER its qdisc:
    it helps a netem further along the path, never one on the sender's own device
    (in `apn`, the storage host's interface IS a fibre end).
  * A device's gso_max_segs caps the segments TCP puts in one packet, wherever the netem
    is. The socket caches it when it picks its route, so existing connections (an NFS
    mount made before the loss was set) see a change only after a route-cache flush.
  * GRO on a receiving veth (a bridge port) would merge frames again before the next
    fibre end (veth GRO is off by default on 7.2; we keep it off and read it back).

Measured (UML 7.2.7, one CPU, 2026-12-03, benchmarks/offload_cost.py; one iperf3 flow
for 8 s at 1,000 km, 1 Gbit/s, 0.1 % loss; frames per packet at the sender-side netem =
htb class packets / lends; Mathis for this point 45.8 Mbit/s):

    flow                  kernel defaults      TSO+GSO off, sender   gso_max_segs 1 (this)
    apn srv->w1           35.9  (540 Mbit/s)   33.0  (518)           1.00  (38)
    apn w1->srv           41.1  (727)           1.00  (70)           1.00  (53)
    two-sites srv->a1     11.1  (123)           1.00  (74)           1.00  (56)
    two-sites a1->srv     39.5  (728)           1.00  (50)           1.00  (42)

Also measured by hand (apn, same point): TSO+GSO off on both fibre ends 32.4 / 12.4
frames per packet (srv->w1 / w1->srv); gso_max_segs 1 on both fibre ends 1.00 / 28.5;
sender TSO+GSO off with GRO on at every veth 35.0 / 33.5. So: gso_max_segs 1 on every
host interface (the TCP senders), GRO off on every switch port.

Cost (same benchmark, 0 km, one flow each way, two repetitions): rate 10 Gbit/s,
4.6-7.7 Gbit/s with full-size packets vs 1.9-2.6 with single frames (guest CPU 100 % in
both); rate 1 Gbit/s, 932-947 Mbit/s at 35-41 % guest CPU vs 618-772 Mbit/s at 100 %.
Single frames cost 2.5-3x the CPU per byte, and the lab kernel cannot carry 1 Gbit/s of
them, so they are used only while some fibre of the network has loss or jitter: follow()
runs after the network is built and after every live change of a fibre, switches both
ways and flushes the hosts' route caches (without the flush a flow started on a lossless
fibre kept 20 frames per packet after loss was set; with it, 1.08).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from pyroute2 import IPRoute
from pyroute2.ethtool.ioctl import IoctlEthtool
from pyroute2.netlink.exceptions import NetlinkError

from testbed.errors import KernelError
from testbed.network.namespace import in_namespace, write_sysctl
from testbed.network.nodes import Nodes
from testbed.spec import FibreSpec
from testbed.topology import interface_name

log = logging.getLogger(__name__)

FRAME_SEGS = 1  # gso_max_segs on host interfaces while frames must be MTU-sized
GRO_FEATURES = ("rx-gro", "rx-gro-list", "rx-udp-gro-forwarding")  # all merge frames


@dataclass(frozen=True)
class Offloads:
    """One interface's segmentation state as the kernel reports it."""

    gso_max_segs: int  # segments TCP may put in one packet through this interface
    tso_max_segs: int  # the device's own limit (what gso_max_segs returns to)
    gro: bool  # any of GRO_FEATURES active

    @property
    def frames(self) -> bool:
        """True when TCP packets leaving through this interface are single frames."""
        return self.gso_max_segs <= FRAME_SEGS


def wants_frames(fibres: Iterable[FibreSpec]) -> bool:
    """True when some fibre drops or jitters packets in either direction."""
    return any(f.loss_pct > 0 or (f.loss_reverse_pct or 0) > 0 or f.jitter_ms > 0
               for f in fibres)


def _link(ipr: IPRoute, ifname: str) -> Any:
    found = ipr.get_links(ifname=ifname)
    if not found:
        raise KernelError(f"interface {ifname} not found")
    return found[0]


def _ethtool(namespace: str, ifname: str) -> IoctlEthtool:
    """An ethtool ioctl handle whose socket lives in `namespace` (ioctls act there)."""
    with in_namespace(namespace):
        return IoctlEthtool(ifname)


def _gro_active(namespace: str, ifname: str) -> bool:
    eth = _ethtool(namespace, ifname)
    try:
        features = eth.get_features()
        return any(features[name] for name in GRO_FEATURES if name in features)
    finally:
        eth.close()


def read(namespace: str, ipr: IPRoute, ifname: str) -> Offloads:
    """Read `ifname`'s gso_max_segs, its device limit and GRO back from the kernel."""
    link = _link(ipr, ifname)
    return Offloads(gso_max_segs=int(link.get_attr("IFLA_GSO_MAX_SEGS")),
                    tso_max_segs=int(link.get_attr("IFLA_TSO_MAX_SEGS")),
                    gro=_gro_active(namespace, ifname))


def set_features(namespace: str, ifname: str, wanted: Mapping[str, bool]) -> None:
    """Switch ethtool features (by their kernel names, e.g. "rx-gro") of `ifname` in
    `namespace` and check the kernel took them. Raises KernelError otherwise."""
    eth = _ethtool(namespace, ifname)
    try:
        features = eth.get_features()
        changed = False
        for name, on in wanted.items():
            if name in features and bool(features[name]) != on:
                features[name] = on
                changed = True
        if changed:
            eth.set_features(features)
        got = eth.get_features()
    except OSError as exc:
        raise KernelError(f"ethtool features {dict(wanted)} on {ifname} in {namespace}: "
                          f"{exc}") from None
    finally:
        eth.close()
    wrong = [name for name, on in wanted.items() if name in got and bool(got[name]) != on]
    if wrong:
        raise KernelError(f"ethtool: {', '.join(wrong)} not switched on {ifname} in {namespace}")


def set_gro_off(namespace: str, ifname: str) -> None:
    """Switch every GRO flavour off on `ifname` (a switch port)."""
    set_features(namespace, ifname, {name: False for name in GRO_FEATURES})


def set_frames(ipr: IPRoute, ifname: str, frames: bool) -> bool:
    """gso_max_segs 1 (frames) or the device's own limit on a host interface.
    Returns True when the kernel's value changed."""
    link = _link(ipr, ifname)
    want = FRAME_SEGS if frames else int(link.get_attr("IFLA_TSO_MAX_SEGS"))
    if int(link.get_attr("IFLA_GSO_MAX_SEGS")) == want:
        return False
    try:
        ipr.link("set", index=link["index"], gso_max_segs=want)
    except NetlinkError as exc:
        raise KernelError(f"gso_max_segs {want} on {ifname}: {exc}") from None
    got = int(_link(ipr, ifname).get_attr("IFLA_GSO_MAX_SEGS"))
    if got != want:
        raise KernelError(f"gso_max_segs on {ifname}: asked {want}, kernel has {got}")
    return True


def _interfaces(net: Nodes) -> Iterable[tuple[str, str]]:
    """(node, interface) of every link end."""
    for _, _, info in net.topo.links(sort=True, withInfo=True):
        yield info["node1"], interface_name(info["node1"], info["port1"])
        yield info["node2"], interface_name(info["node2"], info["port2"])


def follow(net: Nodes, *, ports: bool = False, frames: bool | None = None) -> bool:
    """Make the running network's packets MTU-sized frames while any of its fibres is lossy
    or jittery, and let TCP build full-size packets again when none is. `ports=True` also
    switches GRO off on every switch port (once, when the network is built); `frames`
    forces one setting (benchmarks compare both).

    Returns whether frames are now MTU-sized. Raises KernelError if the kernel refuses."""
    if frames is None:
        frames = wants_frames(net.fibre_links().values())
    changed_hosts = set()
    for node, ifname in _interfaces(net):
        if net.topo.isSwitch(node):
            if ports:
                set_gro_off(net.namespace(node), ifname)
        elif set_frames(net.ipr(node), ifname, frames):
            changed_hosts.add(node)
    for host in sorted(changed_hosts):
        # Sockets cache gso_max_segs with their route: make them look the route up again.
        write_sysctl(net.namespace(host), "net/ipv4/route/flush", "1")
    if changed_hosts:
        log.info("%s: %s packets on %d host(s)", net.prefix,
                 "MTU-sized" if frames else "full-size GSO", len(changed_hosts))
    return frames
