"""Host TCP policy of a running network: what every host's TCP does, set through sysctls
and route metrics in the hosts' namespaces.

    buffers          tcp_rmem/tcp_wmem maxima >= 2 x BDP of the longest fibre (or fixed),
                     and the kernel's tcp_mem raised to hold them all (tcp_memory.py)
    congestion       net.ipv4.tcp_congestion_control of connections opened from now on
    time scale       every route's rto_min stretched to k x 200 ms (locked, so TCP uses it)
    delayed ACKs     on (Linux's default) or route quickack on every host's routes
    loss probes      net.ipv4.tcp_early_retrans: tail loss probes on or off
    idle restart     net.ipv4.tcp_slow_start_after_idle: an idle connection's window
                     restarts (Linux's default) or is kept

Network holds one TcpPolicy as `net.tcp`; it writes nothing until the network is built.
"""

from __future__ import annotations

import socket
from typing import Any

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from testbed.errors import KernelError
from testbed.network.namespace import read_sysctl, write_sysctl
from testbed.network.nodes import Nodes
from testbed.network.tcp_memory import TcpMemory

DEFAULT_CONGESTION = "cubic"
MAIN_TABLE = 254
RTO_MIN_MS = 200  # Linux's TCP_RTO_MIN
TLP_ON, TLP_OFF = "3", "0"  # net.ipv4.tcp_early_retrans: Linux's default; no loss probes
RTAX_RTO_MIN = 13  # its route metric; TCP honours it only when locked (as `ip route ...
LOCK_RTO_MIN = 1 << RTAX_RTO_MIN  # rto_min X` does): RTAX_LOCK carries this bit
RTAX_QUICKACK = 15  # `ip route ... quickack 1`: the receiver ACKs every segment at once


def _route_kwargs(route: Any) -> dict[str, Any]:
    """The arguments of `ip route replace` that restate `route` as it is (main table)."""
    dst = route.get_attr("RTA_DST")
    kwargs: dict[str, Any] = {"dst": f"{dst}/{route['dst_len']}" if dst else "0.0.0.0/0",
                              "oif": route.get_attr("RTA_OIF"), "table": MAIN_TABLE,
                              "scope": route["scope"], "proto": route["proto"]}
    if route.get_attr("RTA_PREFSRC"):
        kwargs["prefsrc"] = route.get_attr("RTA_PREFSRC")
    return kwargs


def _restate_route(ipr: IPRoute, route: Any, rto_min_ms: int | None,
                   quickack: bool = False) -> None:
    """Replace a route with itself, its rto_min metric set and locked (or dropped when
    None; unlocked, the kernel keeps the metric but TCP ignores it: tcp_rto_min()) and
    its quickack metric set when asked (no delayed ACKs on connections over it)."""
    kwargs = _route_kwargs(route)
    metrics: dict[str, int] = {}
    if rto_min_ms is not None:
        metrics |= {"RTAX_LOCK": LOCK_RTO_MIN, "RTAX_RTO_MIN": rto_min_ms}
    if quickack:
        metrics["RTAX_QUICKACK"] = 1
    if metrics:
        kwargs["metrics"] = metrics
    try:
        ipr.route("replace", **kwargs)
    except NetlinkError as exc:
        raise KernelError(f"route {kwargs['dst']}: cannot set its TCP timers: {exc}") from None


def _route_metrics(ipr: IPRoute) -> list[Any]:
    """The RTA_METRICS of every main-table IPv4 route (None where a route has none)."""
    return [route.get_attr("RTA_METRICS")
            for route in ipr.get_routes(family=socket.AF_INET, table=MAIN_TABLE)]


def route_rto_min_ms(ipr: IPRoute) -> list[int | None]:
    """rto_min of every main-table IPv4 route as TCP will use it, read back (None: the
    kernel default, also when the metric is set but not locked)."""
    out = []
    for metrics in _route_metrics(ipr):
        locked = metrics is not None and (metrics.get_attr("RTAX_LOCK") or 0) & LOCK_RTO_MIN
        out.append(metrics.get_attr("RTAX_RTO_MIN") if locked else None)
    return out


def route_quickack(ipr: IPRoute) -> list[bool]:
    """Whether each main-table IPv4 route carries quickack (no delayed ACKs), read back."""
    return [bool(m is not None and m.get_attr("RTAX_QUICKACK")) for m in _route_metrics(ipr)]


class TcpPolicy:
    """Every host's TCP settings in one running network (see the module docstring); each
    setter writes only when the setting changes."""

    def __init__(self, nodes: Nodes, congestion: str = DEFAULT_CONGESTION) -> None:
        self.nodes = nodes
        self.congestion = congestion
        self.buffer_bytes = 0  # the TCP buffer maximum written to every host
        self.buffer_override: int | None = None  # a fixed maximum instead of 2 x BDP
        self.time_scale = 1.0  # the dilation the hosts' route timers are set for
        self.delayed_ack = True  # False: every host's routes carry quickack
        self.memory = TcpMemory()  # the kernel's tcp_mem, raised to fit the buffers
        self.loss_probe = True  # False: no host sends tail loss probes
        self.slow_start_after_idle = True  # False: idle connections keep their window

    def sysctl(self, node: str, key: str, value: str, optional: bool = False) -> None:
        """Write /proc/sys/<key> inside node's namespace (optional: skip a global knob
        that the namespace does not have or may not write)."""
        write_sysctl(self.nodes.namespace(node), key, value, optional)

    def read_sysctl(self, node: str, key: str) -> str:
        """The value of /proc/sys/<key> as node's namespace sees it."""
        return read_sysctl(self.nodes.namespace(node), key)

    def configure_host(self, host: str) -> None:
        """A new host's congestion control, and no TCP metrics cached between connections."""
        self.sysctl(host, "net/ipv4/tcp_congestion_control", self.congestion)
        self.sysctl(host, "net/ipv4/tcp_no_metrics_save", "1")

    def size_buffers(self) -> None:
        """TCP buffer maxima on every host: 2 x the largest BDP of the fibres as they are
        now (FibreSpec.tcp_buffer_bytes) unless fixed by set_buffers, rewritten
        whenever that moves, so every point has its own buffers (not a left-over)."""
        need = self.buffer_override or \
            max((f.tcp_buffer_bytes() for f in self.nodes.fibre_links().values()), default=0)
        if not need or need == self.buffer_bytes:
            return
        for host in self.nodes.hosts:
            for key, value in (("net/ipv4/tcp_rmem", f"4096 131072 {need}"),
                               ("net/ipv4/tcp_wmem", f"4096 16384 {need}"),
                               ("net/core/rmem_max", str(need)),
                               ("net/core/wmem_max", str(need))):
                self.sysctl(host, key, value, optional=key.startswith("net/core/"))
        self.memory.ensure(2 * len(self.nodes.hosts) * need)  # rmem + wmem, every host
        self.buffer_bytes = need

    def set_buffers(self, nbytes: int | None) -> None:
        """Fix every host's TCP buffer maximum at nbytes (e.g. Linux's default 6 MiB), or
        None to size it from the fibres (2 x the largest BDP, at least 6 MiB)."""
        self.buffer_override = nbytes
        self.size_buffers()

    def set_congestion(self, name: str) -> None:
        """Every host's TCP congestion control for connections opened from now on."""
        if name == self.congestion:
            return
        for host in self.nodes.hosts:
            self.sysctl(host, "net/ipv4/tcp_congestion_control", name)
        self.congestion = name

    def set_time_scale(self, k: float) -> None:
        """Stretch the kernel timers TCP lets a route scale: rto_min (200 ms) becomes
        k x 200 ms on every host's routes, so that retransmission timeouts, and the
        restart of slow start after an idle period longer than one, keep their ratio to
        the dilated round trip. At k = 1 the metric is removed (kernel default)."""
        if k != self.time_scale:
            self.time_scale = k
            self._restate_routes()

    def set_delayed_ack(self, on: bool) -> None:
        """Whether receivers delay ACKs (Linux's default; its timer has a 40 ms floor that
        no route or sysctl scales) or ACK every segment at once (route quickack on every
        host: what `ip route change ... quickack 1` does)."""
        if on != self.delayed_ack:
            self.delayed_ack = on
            self._restate_routes()

    def set_loss_probe(self, on: bool) -> None:
        """Whether senders send tail loss probes (Linux's default) or wait for three
        duplicate ACKs, RACK or the retransmission timeout. A probe fires 2 x srtt plus
        two jiffies (20 ms at HZ = 100) after the last send, an allowance no route or
        sysctl scales: under time dilation probes fire relatively sooner, and each one is
        an extra wire packet that shifts netem's seeded loss draw."""
        if on != self.loss_probe:
            for host in self.nodes.hosts:
                self.sysctl(host, "net/ipv4/tcp_early_retrans",
                            TLP_ON if on else TLP_OFF)
            self.loss_probe = on

    def set_slow_start_after_idle(self, on: bool) -> None:
        """Whether a connection idle for longer than its RTO restarts from the initial
        window, halved per RTO idle (Linux's default, RFC 2861) or keeps its window
        (what wide-area data movers set). Per network namespace, so per host; it also
        gates the decay of a window left unused while the sender was short of data."""
        if on != self.slow_start_after_idle:
            for host in self.nodes.hosts:
                self.sysctl(host, "net/ipv4/tcp_slow_start_after_idle", "1" if on else "0")
            self.slow_start_after_idle = on

    def _restate_routes(self) -> None:
        """Every host's routes with the timers of the current time scale and ACK policy."""
        rto_min = round(RTO_MIN_MS * self.time_scale) if self.time_scale != 1 else None
        for host in self.nodes.hosts:
            ipr = self.nodes.ipr(host)
            for route in ipr.get_routes(family=socket.AF_INET, table=MAIN_TABLE):
                _restate_route(ipr, route, rto_min, quickack=not self.delayed_ack)
