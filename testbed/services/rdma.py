"""NFS over RDMA through the emulated fibre: soft-RoCE (rdma_rxe) on the hosts' own interfaces.

SoftRoce       an rxe device on a host's interface, created inside the host's network
               namespace (`rdma link add`), so RoCEv2 (UDP 4791) leaves through the same
               veth, bridge, htb and netem as the NFS/TCP traffic: the fibre model applies to
               RDMA unchanged. Removed at teardown (and with the namespace after a crash).
NfsRdma        kernel nfsd of an NfsServer also listening on RDMA (`rdma 20049` in
               /proc/fs/nfsd/portlist, read back). Mounts then use MountSpec(transport="rdma")
               (proto=rdma,port=20049).
rdma_site      both at once: soft-RoCE on the server and the workers, nfsd on RDMA.
check_kernel   the kernel features this needs, each named in the error when missing.

Why the namespaces themselves must be RDMA endpoints, and which kernels allow it (measured
2026-12-03 in the lab VM, QEMU TCG): an rxe device's UDP socket lives in the network
namespace of its interface only since per-namespace rxe sockets (drivers/infiniband/sw/rxe/
rxe_ns.c) reached the kernel. Debian 12's 6.1 and Debian 13's 6.12 keep a single socket in
the initial namespace: `rdma link add` in a namespace succeeds, but rping between two
namespaces fails (RDMA_CM_EVENT_UNREACHABLE, -110; no UDP 4791 socket in either namespace).
Debian testing's 7.2 binds 4791 in each namespace and rping, NFS/RDMA mounts and reads work.
check_kernel tests exactly that socket, so an unsuitable kernel is a clear error, never a
silent fallback to TCP.
"""

from __future__ import annotations

import logging
import platform
import shutil
from pathlib import Path

from testbed.errors import ServiceError
from testbed.network.engine import Network
from testbed.network.namespace import in_namespace
from testbed.services import nfs
from testbed.services.nfs import NfsServer
from testbed.spec import NFS_RDMA_PORT

log = logging.getLogger(__name__)

ROCE_PORT = 4791  # RoCEv2's UDP port
MODULES = ("rdma_rxe", "rpcrdma")


def _modprobe(module: str) -> None:
    proc = nfs._run(["modprobe", module], 60, f"modprobe {module}")
    if proc.returncode != 0:
        raise ServiceError(f"the kernel ({platform.release()}) has no {module}: "
                           f"{nfs._last_line(proc)}")


def udp_port_bound(ns: str, port: int) -> bool:
    """Whether a UDP socket is bound to `port` in namespace `ns` (/proc/net/udp{,6})."""
    with in_namespace(ns):
        text = Path("/proc/net/udp").read_text()
        try:
            text += Path("/proc/net/udp6").read_text()
        except OSError:
            pass
    suffix = f":{port:04X}"
    return any(len(f) > 1 and f[1].endswith(suffix)
               for f in (line.split() for line in text.splitlines()[1:]))


def host_interface(net: Network, node: str) -> str:
    """The interface that carries `node`'s address (the one facing the fibre's side)."""
    ipr = net.ipr(node)
    for addr in ipr.get_addr(family=2):
        if addr.get_attr("IFA_ADDRESS") == net.address(node):
            link = ipr.get_links(addr["index"])[0]
            return str(link.get_attr("IFLA_IFNAME"))
    raise ServiceError(f"{node} has no interface with its address {net.address(node)}")


def _rdma(net: Network, node: str, args: list[str], what: str) -> str:
    proc = nfs._run(net.procs.cmd(node, ["rdma", *args]), 30, what)
    if proc.returncode != 0:
        raise ServiceError(f"{what}: {nfs._last_line(proc)}")
    return proc.stdout


class SoftRoce:
    """An rxe device on `node`'s interface, inside its namespace (see module docstring)."""

    def __init__(self, net: Network, node: str) -> None:
        self.net = net
        self.node = node
        self.name = f"rxe-{net.prefix}-{node}"
        self.ifname = ""
        self.created = False

    def __enter__(self) -> SoftRoce:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Load the modules, add the rxe device on the node's interface, and check that it
        can be an endpoint in this namespace (ServiceError with the reason otherwise)."""
        for module in MODULES:
            _modprobe(module)
        self.ifname = host_interface(self.net, self.node)
        _rdma(self.net, self.node, ["link", "add", self.name, "type", "rxe", "netdev",
                                    self.ifname],
              f"soft-RoCE on {self.node}'s {self.ifname}")
        self.created = True
        self.net.callback(self.stop)
        ns = self.net.namespace(self.node)
        if not udp_port_bound(ns, ROCE_PORT):
            raise ServiceError(
                f"soft-RoCE on kernel {platform.release()} has no UDP {ROCE_PORT} socket in "
                f"{ns}: its rxe devices cannot be RDMA endpoints in a network namespace "
                "(per-namespace rxe sockets came after 6.12; Debian testing's kernel has "
                "them: lab/run --vm --kernel forky)")
        log.info("soft-RoCE %s on %s:%s", self.name, self.node, self.ifname)

    def state(self) -> str:
        """`rdma link show` for this device (ACTIVE once the interface is up)."""
        return _rdma(self.net, self.node, ["link", "show", f"{self.name}/1"],
                     f"rdma link show {self.name}").strip()

    def stop(self) -> None:
        """Delete the rxe device if we made it and its namespace still exists."""
        if not self.created:
            return
        if Path(self.net.netns_path(self.node)).exists():
            argv = self.net.procs.cmd(self.node, ["rdma", "link", "delete", self.name])
            proc = nfs._run(argv, 30, f"delete {self.name}")
            if proc.returncode != 0:
                log.warning("rdma link delete %s: %s", self.name, nfs._last_line(proc))
        self.created = False


class NfsRdma:
    """`server`'s nfsd also listening on RDMA at `port`; the listener goes with nfsd."""

    def __init__(self, server: NfsServer, port: int = NFS_RDMA_PORT) -> None:
        self.server = server
        self.port = port

    def __enter__(self) -> NfsRdma:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        pass  # nfsd's stop (threads to 0) closes every listener

    def start(self) -> None:
        """Add nfsd's RDMA listener and check the portlist lists it."""
        _modprobe("rpcrdma")
        listeners = self.server.listen("rdma", self.port)
        if f"rdma {self.port}" not in listeners:
            raise ServiceError(f"nfsd in {self.server.node} does not list rdma {self.port} "
                               f"in its portlist: {listeners}")
        log.info("nfsd in %s listens on rdma %d", self.server.node, self.port)


def check_kernel() -> None:
    """Raise ServiceError naming what is missing for NFS over RDMA on this kernel."""
    for module in MODULES:
        _modprobe(module)
    if shutil.which("rdma") is None:
        raise ServiceError("the rdma tool (Debian package iproute2) is not installed")


def rdma_site(net: Network, server: NfsServer, workers: list[str]) -> list[SoftRoce]:
    """Soft-RoCE on the server's host and on each worker, nfsd listening on RDMA; all of it
    undone with the network. Returns the devices (server's first)."""
    devices = [net.enter(SoftRoce(net, node)) for node in [server.node, *workers]]
    net.enter(NfsRdma(server))
    return devices
