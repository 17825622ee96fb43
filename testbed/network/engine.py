"""The network engine: realise a topology as namespaces, veths, bridges and tc, via pyroute2.

Network(topo) is a context manager. On entry it creates, in this order, each recorded in the
run registry (testbed.network.state) and pushed on an ExitStack:

    one namespace per node   "<prefix>-<node>" (hosts AND switches; loopback up)
    one bridge per switch    named after the switch, inside the switch's namespace
    one veth pair per link   "<node>-eth<port>" at each end, created directly in the end
                             namespaces (nothing of ours ever sits in the host namespace)
    addresses                one per host, in 10.0.0.0/16 (a single layer-2 domain)
    tc on fibre ends         htb rate + netem delay/jitter/loss/limit (testbed.network.tc)
    per-host TCP policy      TCP buffers >= 2 x BDP of the longest fibre, congestion control,
                             no cached TCP metrics between connections (net.tcp, a
                             testbed.network.tcp_policy.TcpPolicy)

Processes in the namespaces are started and stopped through net.procs
(testbed.network.procs.Processes), which records them and stops them at teardown.

On exit (also after an exception or Ctrl-C) the stack unwinds in reverse: callbacks pushed
later by services run first, then the namespaces are deleted, which destroys every link,
bridge and qdisc inside them.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable

from mininet.topo import Topo
from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from testbed.errors import KernelError, SpecError
from testbed.network import offload
from testbed.network.held import interrupts_held
from testbed.network import state as state_mod
from testbed.network import tc
from testbed.network.namespace import (NETNS_DIR, create_namespace, namespace_name,
                                       ns_iproute, remove_namespace)
from testbed.network.procs import Processes
from testbed.network.tcp_policy import DEFAULT_CONGESTION, TcpPolicy
from testbed.spec import FibreSpec
from testbed.topology import interface_name

__all__ = ["Network"]

log = logging.getLogger(__name__)


class Network:
    """A running topology. Use as `with Network(topo) as net: ...`.

    It builds and holds the namespaces, bridges, veths, addresses and fibres, their
    teardown (an ExitStack) and the run's folders; `net.tcp` sets the hosts' TCP policy
    and `net.procs` runs processes in the namespaces."""

    def __init__(self, topo: Topo, *, prefix: str | None = None,
                 congestion: str = DEFAULT_CONGESTION) -> None:
        self.topo = topo
        self.prefix = prefix or state_mod.new_prefix()
        if not state_mod.PREFIX_RE.match(self.prefix):
            raise SpecError(f"run prefix {self.prefix!r}: expected 'tb' and 4 hex digits")
        self.state = state_mod.RunState(self.prefix)
        self._stack = ExitStack()
        self._iprs: dict[str, IPRoute] = {}
        self._fibres: dict[tuple[str, str], FibreSpec] = {}
        self._ends: dict[tuple[str, str], tuple[str, str]] = {}
        self._names: dict[str, tuple[str, str]] = {}
        self.tcp = TcpPolicy(self, congestion)
        self.tcp.memory.record = self.state.set_tcp_mem
        self.procs = Processes(self, self.state, self._stack.callback)
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

    def ipr(self, node: str) -> IPRoute:
        """The netlink socket of node's namespace (open for the network's lifetime)."""
        if node not in self._iprs:
            raise SpecError(f"unknown node {node!r}")
        return self._iprs[node]

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
        # Put back before the registry goes: a kill during teardown leaves its record.
        self._stack.callback(self.tcp.memory.restore)
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
        with interrupts_held(f"teardown of {self.prefix}"):
            if self.started:
                self.state.set_phase("teardown")
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
        self.tcp.size_buffers()
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
        self.tcp.configure_host(host)

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
        self.tcp.size_buffers()
        return spec

    def fibre_ends(self, name: str) -> list[tuple[str, str, bool]]:
        """The named fibre's two sending ends: (namespace, interface, forward) for a->b
        (forward) and b->a, each the device whose egress carries that direction."""
        if name not in self._names:
            raise SpecError(f"no fibre named {name!r}; known: {', '.join(self._names)}")
        a, b = self._names[name]
        ia, ib = self._ends[(a, b)]
        return [(self.namespace(a), ia, True), (self.namespace(b), ib, False)]

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
        self.tcp.size_buffers()
        offload.follow(self)
        return new

    def read_fibre(self, a: str, b: str) -> tuple[tc.Readback, tc.Readback]:
        """Kernel readback of (a->b, b->a) for the fibre between a and b."""
        key, forward = self._key(a, b)
        ia, ib = self._ends[key]
        ra = tc.read(self._iprs[key[0]], self._iprs[key[0]].link_lookup(ifname=ia)[0], ia)
        rb = tc.read(self._iprs[key[1]], self._iprs[key[1]].link_lookup(ifname=ib)[0], ib)
        return (ra, rb) if forward else (rb, ra)
