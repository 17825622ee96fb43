"""The network engine: realise a topology as namespaces, veths, bridges and tc, via pyroute2.

Network(topo) is a context manager. On entry it creates, in this order, each recorded in the
run registry (testbed.network.state) and pushed on an ExitStack:

    one namespace per node   "<prefix>-<node>" (hosts AND switches; loopback up)
    one bridge per switch    named after the switch, inside the switch's namespace
    one veth pair per link   "<node>-eth<port>" at each end, created directly in the end
                             namespaces (nothing of ours ever sits in the host namespace)
    addresses                one per host, in 10.0.0.0/16 (a single layer-2 domain)
    tc on fibre ends         htb rate + netem delay/jitter/loss/limit (testbed.network.tc)
    per-host sysctls         TCP buffers >= 2 x BDP of the longest fibre, congestion control,
                             no cached TCP metrics between connections

On exit (also after an exception or Ctrl-C) the stack unwinds in reverse: callbacks pushed
later by services run first, then the namespaces are deleted, which destroys every link,
bridge and qdisc inside them.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable, Sequence

from mininet.topo import Topo
from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from testbed import launch
from testbed.errors import KernelError, ServiceError, SpecError
from testbed.network import offload
from testbed.network import state as state_mod
from testbed.network import tc
from testbed.network.namespace import (NETNS_DIR, create_namespace, in_namespace,
                                       namespace_name, ns_iproute, remove_namespace)
from testbed.spec import FibreSpec
from testbed.topology import interface_name

__all__ = ["Network", "NETNS_DIR", "namespace_name", "create_namespace", "ns_iproute"]

log = logging.getLogger(__name__)

DEFAULT_CONGESTION = "cubic"
MAIN_TABLE = 254
RTO_MIN_MS = 200  # Linux's TCP_RTO_MIN
TLP_ON, TLP_OFF = "3", "0"  # net.ipv4.tcp_early_retrans: Linux's default; no loss probes
RTAX_RTO_MIN = 13  # its route metric; TCP honours it only when locked (as `ip route ...
LOCK_RTO_MIN = 1 << RTAX_RTO_MIN  # rto_min X` does): RTAX_LOCK carries this bit
RTAX_QUICKACK = 15  # `ip route ... quickack 1`: the receiver ACKs every segment at once


def _restate_route(ipr: IPRoute, route: Any, rto_min_ms: int | None,
                   quickack: bool = False) -> None:
    """Replace a route with itself, its rto_min metric set and locked (or dropped when
    None; unlocked, the kernel keeps the metric but TCP ignores it: tcp_rto_min()) and
    its quickack metric set when asked (no delayed ACKs on connections over it)."""
    dst = route.get_attr("RTA_DST")
    kwargs: dict[str, Any] = {"dst": f"{dst}/{route['dst_len']}" if dst else "0.0.0.0/0",
                              "oif": route.get_attr("RTA_OIF"), "table": MAIN_TABLE,
                              "scope": route["scope"], "proto": route["proto"]}
    if route.get_attr("RTA_PREFSRC"):
        kwargs["prefsrc"] = route.get_attr("RTA_PREFSRC")
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


class Network:
    """A running topology. Use as `with Network(topo) as net: ...`."""

    def __init__(self, topo: Topo, *, prefix: str | None = None,
                 congestion: str = DEFAULT_CONGESTION) -> None:
        self.topo = topo
        self.prefix = prefix or state_mod.new_prefix()
        if not state_mod.PREFIX_RE.match(self.prefix):
            raise SpecError(f"run prefix {self.prefix!r}: expected 'tb' and 4 hex digits")
        self.congestion = congestion
        self.state = state_mod.RunState(self.prefix)
        self._stack = ExitStack()
        self._iprs: dict[str, IPRoute] = {}
        self._fibres: dict[tuple[str, str], FibreSpec] = {}
        self._ends: dict[tuple[str, str], tuple[str, str]] = {}
        self._names: dict[str, tuple[str, str]] = {}
        self.buffer_bytes = 0  # the TCP buffer maximum written to every host
        self.buffer_override: int | None = None  # a fixed maximum instead of 2 x BDP
        self.time_scale = 1.0  # the dilation the hosts' route timers are set for
        self.delayed_ack = True  # False: every host's routes carry quickack
        self.loss_probe = True  # False: no host sends tail loss probes
        self.started = False
        self._owner_pid = os.getpid()

    # --- naming ---------------------------------------------------------------------------
    def namespace(self, node: str) -> str:
        """The namespace name of `node` in this run."""
        if node not in self.topo.g.node:
            raise SpecError(f"unknown node {node!r}")
        return namespace_name(self.prefix, node)

    def netns_path(self, node: str) -> str:
        """The /run/netns path of node's namespace (for nsenter --net)."""
        return str(NETNS_DIR / self.namespace(node))

    def address(self, node: str) -> str:
        """node's IPv4 address (without prefix length); SpecError for a switch."""
        ip = self.topo.nodeInfo(node).get("ip")
        if not ip:
            raise SpecError(f"node {node!r} has no address (is it a switch?)")
        return str(ip).split("/")[0]

    @property
    def hosts(self) -> list[str]:
        """The topology's hosts (storage and workers), sorted."""
        return list(self.topo.hosts(sort=True))

    # --- lifecycle --------------------------------------------------------------------------
    def __enter__(self) -> Network:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Build everything; on any failure undo what was built and re-raise."""
        if self.started:
            return
        self._check_names()
        t0 = time.monotonic()
        self.state.save()
        self._stack.callback(self.state.discard)
        self._stack.callback(self._remove_run_dir)
        try:
            self._build()
        except BaseException:
            self.stop()
            raise
        self.started = True
        log.info("network %s up in %.2f s", self.prefix, time.monotonic() - t0)

    def stop(self) -> None:
        """Tear down in reverse order of creation. Safe to call twice. A forked child (which
        inherits this object) never tears down its parent's network."""
        if os.getpid() != self._owner_pid:
            return
        self._stack.close()
        self.started = False

    @property
    def run_dir(self) -> Path:
        """A folder for this run's files (services' configs, mount points); created on
        demand, removed at teardown once empty (never recursively: it holds mount points)."""
        path = state_mod.STATE_DIR / self.prefix
        path.mkdir(parents=True, exist_ok=True)
        return path

    def scratch(self, name: str) -> Path:
        """A fresh folder of this run (run_dir/name) for a service's or a point's files:
        recorded in the run registry (so `testbed clean` removes it after a crash) and
        removed at teardown, or earlier with remove_scratch()."""
        path = self.run_dir / name
        if path.exists():
            raise KernelError(f"scratch folder {path} exists already")
        self.state.add_dir(str(path))
        path.mkdir()
        self._stack.callback(self.remove_scratch, path)
        return path

    def remove_scratch(self, path: Path) -> None:
        """Remove a scratch folder (or file) now; idempotent."""
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        if str(path) in self.state.dirs:
            self.state.drop_dir(str(path))

    def _remove_run_dir(self) -> None:
        path = state_mod.STATE_DIR / self.prefix
        if path.is_dir():
            try:
                path.rmdir()
            except OSError as exc:
                log.warning("run folder %s not removed: %s", path, exc.strerror)

    def callback(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """Run `fn` at teardown, before anything created earlier is removed."""
        self._stack.callback(fn, *args, **kwargs)

    def enter(self, cm: Any) -> Any:
        """Enter a context manager whose exit runs at teardown (services use this)."""
        return self._stack.enter_context(cm)

    # --- building ---------------------------------------------------------------------------
    def _check_names(self) -> None:
        for a, b, info in self.topo.links(withInfo=True):
            for node, port in ((info["node1"], info["port1"]), (info["node2"], info["port2"])):
                name = interface_name(node, port)
                if len(name) > 15:
                    raise SpecError(f"interface {name!r} exceeds 15 characters; "
                                    f"shorten node {node!r}")

    def _build(self) -> None:
        nodes = list(self.topo.hosts(sort=True)) + list(self.topo.switches(sort=True))
        for node in nodes:
            self._create_namespace(node)
        for sw in self.topo.switches(sort=True):
            self._create_bridge(sw)
        for _, _, info in self.topo.links(sort=True, withInfo=True):
            self._create_link(info)
            if info.get("fibre") is not None:
                self._names[info.get("fibre_name") or f"{info['node1']}_{info['node2']}"] = \
                    (info["node1"], info["node2"])
        for host in self.topo.hosts(sort=True):
            self._configure_host(host)
        self._size_buffers()
        offload.follow(self, ports=True)  # MTU-sized frames at netem if lossy/jittery

    def _create_namespace(self, node: str) -> None:
        name = self.namespace(node)
        if (NETNS_DIR / name).exists():
            raise KernelError(f"namespace {name} already exists (a leftover? try `testbed clean`)")
        create_namespace(name)
        self.state.add_namespace(name)
        self._stack.callback(self._remove_namespace, name)
        ipr = ns_iproute(name)
        self._iprs[node] = ipr
        self._stack.callback(ipr.close)
        lo = ipr.link_lookup(ifname="lo")
        ipr.link("set", index=lo[0], state="up")

    def _remove_namespace(self, name: str) -> None:
        try:
            remove_namespace(name)
        except KernelError as exc:
            log.warning("%s", exc)

    def _create_bridge(self, sw: str) -> None:
        ipr = self._iprs[sw]
        try:
            ipr.link("add", ifname=sw, kind="bridge", br_stp_state=0, br_forward_delay=0)
        except NetlinkError as exc:
            raise KernelError(f"cannot create bridge {sw} in {self.namespace(sw)}: {exc}") from None
        ipr.link("set", index=ipr.link_lookup(ifname=sw)[0], state="up")

    def _create_link(self, info: dict[str, Any]) -> None:
        a, b = info["node1"], info["node2"]
        ia, ib = interface_name(a, info["port1"]), interface_name(b, info["port2"])
        fibre: FibreSpec | None = info.get("fibre")
        mtu = fibre.mtu if fibre else int(info.get("mtu", 1500))
        ipr_a, ipr_b = self._iprs[a], self._iprs[b]
        try:
            ipr_a.link("add", ifname=ia, kind="veth", mtu=mtu,
                       peer={"ifname": ib, "net_ns_fd": self.namespace(b), "mtu": mtu})
        except NetlinkError as exc:
            raise KernelError(f"cannot create veth {ia}<->{ib}: {exc}") from None
        for node, ipr, ifname in ((a, ipr_a, ia), (b, ipr_b, ib)):
            idx = ipr.link_lookup(ifname=ifname)[0]
            if self.topo.isSwitch(node):
                bridge = ipr.link_lookup(ifname=node)[0]
                ipr.link("set", index=idx, master=bridge)
            ipr.link("set", index=idx, state="up")
        if fibre is not None:
            self._fibres[(a, b)] = fibre
            self._ends[(a, b)] = (ia, ib)
            self._apply_fibre(a, b, fibre, initial=True)

    def _configure_host(self, host: str) -> None:
        ipr = self._iprs[host]
        ip = self.topo.nodeInfo(host).get("ip")
        intfs = [l for l in ipr.get_links() if l.get_attr("IFLA_IFNAME") != "lo"]
        if ip and intfs:
            addr, _, plen = str(ip).partition("/")
            ipr.addr("add", index=intfs[0]["index"], address=addr, prefixlen=int(plen or 8))
        self.sysctl(host, "net/ipv4/tcp_congestion_control", self.congestion)
        self.sysctl(host, "net/ipv4/tcp_no_metrics_save", "1")

    def _size_buffers(self) -> None:
        """TCP buffer maxima on every host: 2 x the largest BDP of the fibres as they are
        now (FibreSpec.tcp_buffer_bytes) unless fixed by set_tcp_buffers, rewritten
        whenever that moves, so every point has its own buffers (not a left-over)."""
        need = self.buffer_override or \
            max((f.tcp_buffer_bytes() for f in self._fibres.values()), default=0)
        if not need or need == self.buffer_bytes:
            return
        for host in self.topo.hosts(sort=True):
            for key, value in (("net/ipv4/tcp_rmem", f"4096 131072 {need}"),
                               ("net/ipv4/tcp_wmem", f"4096 16384 {need}"),
                               ("net/core/rmem_max", str(need)),
                               ("net/core/wmem_max", str(need))):
                self.sysctl(host, key, value, optional=key.startswith("net/core/"))
        self.buffer_bytes = need

    # --- fibre ------------------------------------------------------------------------------
    def fibre_links(self) -> dict[tuple[str, str], FibreSpec]:
        """(a, b) -> the FibreSpec currently applied; a->b is the forward direction."""
        return dict(self._fibres)

    def fibre_names(self) -> dict[str, tuple[str, str]]:
        """Fibre name (the topology's, e.g. "wan", "site_b") -> its (a, b) ends."""
        return dict(self._names)

    def set_fibre_spec(self, name: str, spec: FibreSpec, restate: bool = False) -> FibreSpec:
        """Put the named fibre into exactly the state `spec` describes (every parameter
        restated); TCP buffers follow the new BDP. restate: even when nothing changed, so
        that a seeded netem starts its draws again from the seed. Returns the spec."""
        if name not in self._names:
            raise SpecError(f"no fibre named {name!r}; known: {', '.join(self._names)}")
        key = self._names[name]
        if spec.mtu != self._fibres[key].mtu:
            raise SpecError(f"fibre {name}: mtu cannot be changed on a running link")
        if restate or spec != self._fibres[key]:
            self._apply_fibre(*key, spec, initial=False)
            self._fibres[key] = spec
            offload.follow(self)
        self._size_buffers()
        return spec

    def _key(self, a: str, b: str) -> tuple[tuple[str, str], bool]:
        if (a, b) in self._fibres:
            return (a, b), True
        if (b, a) in self._fibres:
            return (b, a), False
        raise SpecError(f"no fibre link between {a!r} and {b!r}")

    def _apply_fibre(self, a: str, b: str, fibre: FibreSpec, initial: bool) -> None:
        ia, ib = self._ends[(a, b)]
        for node, ifname, forward in ((a, ia, True), (b, ib, False)):
            ipr = self._iprs[node]
            idx = ipr.link_lookup(ifname=ifname)[0]
            fn = tc.apply if initial else tc.change
            fn(ipr, idx, ifname, fibre.direction(forward))

    def set_fibre(self, a: str, b: str, **changes: Any) -> FibreSpec:
        """Reconfigure a running fibre (delay via distance_km/extra_delay_ms, loss_pct, rate,
        jitter_ms, ...), including back to zero. Returns the new spec."""
        key, _ = self._key(a, b)
        if "mtu" in changes:
            raise SpecError("mtu cannot be changed on a running link")
        new = self._fibres[key].replace(**changes)
        self._apply_fibre(*key, new, initial=False)
        self._fibres[key] = new
        self._size_buffers()
        offload.follow(self)
        return new

    def set_tcp_buffers(self, nbytes: int | None) -> None:
        """Fix every host's TCP buffer maximum at nbytes (e.g. Linux's default 6 MiB), or
        None to size it from the fibres (2 x the largest BDP, at least 6 MiB)."""
        self.buffer_override = nbytes
        self._size_buffers()

    def set_congestion(self, name: str) -> None:
        """Every host's TCP congestion control for connections opened from now on."""
        if name == self.congestion:
            return
        for host in self.hosts:
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
            for host in self.hosts:
                self.sysctl(host, "net/ipv4/tcp_early_retrans",
                            TLP_ON if on else TLP_OFF)
            self.loss_probe = on

    def _restate_routes(self) -> None:
        """Every host's routes with the timers of the current time scale and ACK policy."""
        rto_min = round(RTO_MIN_MS * self.time_scale) if self.time_scale != 1 else None
        for host in self.hosts:
            ipr = self._iprs[host]
            for route in ipr.get_routes(family=socket.AF_INET, table=MAIN_TABLE):
                _restate_route(ipr, route, rto_min, quickack=not self.delayed_ack)

    def read_fibre(self, a: str, b: str) -> tuple[tc.Readback, tc.Readback]:
        """Kernel readback of (a->b, b->a) for the fibre between a and b."""
        key, forward = self._key(a, b)
        ia, ib = self._ends[key]
        ra = tc.read(self._iprs[key[0]], self._iprs[key[0]].link_lookup(ifname=ia)[0], ia)
        rb = tc.read(self._iprs[key[1]], self._iprs[key[1]].link_lookup(ifname=ib)[0], ib)
        return (ra, rb) if forward else (rb, ra)

    # --- namespaces as places to run things -------------------------------------------------
    def ipr(self, node: str) -> IPRoute:
        """The netlink socket of node's namespace (open for the network's lifetime)."""
        if node not in self._iprs:
            raise SpecError(f"unknown node {node!r}")
        return self._iprs[node]

    def sysctl(self, node: str, key: str, value: str, optional: bool = False) -> None:
        """Write /proc/sys/<key> inside node's namespace."""
        path = "/proc/sys/" + key.replace(".", "/")
        try:
            with in_namespace(self.namespace(node)), open(path, "w") as fh:
                fh.write(value)
        except OSError as exc:
            # Global knobs (net.core.rmem_max...) are absent from, or read-only in, child
            # namespaces depending on the kernel; TCP autotuning (tcp_rmem) does not need them.
            if optional and isinstance(exc, (FileNotFoundError, PermissionError)):
                log.debug("sysctl %s not writable per namespace here; skipped", key)
            else:
                raise KernelError(f"sysctl {key}={value} in {self.namespace(node)}: "
                                  f"{exc.strerror}") from None

    def read_sysctl(self, node: str, key: str) -> str:
        """The value of /proc/sys/<key> as node's namespace sees it."""
        with in_namespace(self.namespace(node)):
            return Path("/proc/sys/" + key.replace(".", "/")).read_text().strip()

    def cmd(self, node: str, argv: Sequence[str]) -> list[str]:
        """argv that runs `argv` in node's network namespace (host mount namespace)."""
        return launch.in_netns(self.netns_path(node), argv)

    def run(self, node: str, argv: Sequence[str], timeout: float = 60.0,
            check: bool = True, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        """Run a command to completion in node's namespace; output captured as text.

        Raises ServiceError on a timeout or (check=True) a non-zero exit."""
        return launch.run(self.cmd(node, argv), timeout=timeout, check=check,
                          what=f"{' '.join(argv[:3])} in {node}", **kwargs)

    def popen(self, node: str, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start a long-lived process in node's namespace; it is recorded in the run registry
        and killed (by its PID) at teardown."""
        return self.popen_raw(self.cmd(node, argv), namespace=self.namespace(node), **kwargs)

    def popen_raw(self, argv: Sequence[str], namespace: str | None = None,
                  **kwargs: Any) -> subprocess.Popen[Any]:
        """Start `argv` as is (it enters namespaces itself), recorded and killed at teardown.

        The process leads its own process group, so its children go with it."""
        proc = launch.start(argv, **kwargs)
        self.state.add_proc(proc.pid, list(argv), namespace)
        self._stack.callback(self.stop_proc, proc)
        return proc

    def stop_proc(self, proc: subprocess.Popen[Any], grace_s: float = 3.0) -> None:
        """Stop a process started with popen (its whole group) and forget it."""
        launch.stop(proc, grace_s)
        self.state.drop_proc(proc.pid)
