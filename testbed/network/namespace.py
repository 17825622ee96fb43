"""Named network namespaces: create one without forking, enter one for a few calls.

create_namespace   like `ip netns add NAME` (a bind mount at /run/netns/NAME), done in
                   this thread with unshare(2), ~20x faster than forking a helper on the
                   one-CPU lab kernel
in_namespace       `with in_namespace(name): ...` runs the block's socket(), open() of
                   /proc/sys and netlink calls in that namespace, then returns; sockets
                   keep the namespace they were created in
ns_iproute         an IPRoute whose netlink socket lives in a namespace
namespace_name     "<run prefix>-<node>", the one naming rule of our namespaces
write_sysctl       write /proc/sys/<key> as a namespace sees it (read_sysctl reads it)
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from pyroute2 import IPRoute, netns

from testbed.errors import KernelError

log = logging.getLogger(__name__)

NETNS_DIR = Path("/run/netns")

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
CLONE_NEWNET = 0x40000000
MS_BIND, MS_REC, MS_SHARED = 4096, 16384, 1 << 20


def namespace_name(prefix: str, node: str) -> str:
    """The namespace of `node` in the run `prefix` (also how a held run is found)."""
    return f"{prefix}-{node}"


@contextmanager
def in_namespace(name: str) -> Iterator[None]:
    """Run the block in network namespace `name` (this thread only), then come back."""
    netns.pushns(name)
    try:
        yield
    finally:
        netns.popns()


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise KernelError(f"{what}: {os.strerror(ctypes.get_errno())}")


def _share_netns_dir() -> None:
    """Make /run/netns a shared mount point, as iproute2 does, so bind mounts propagate."""
    NETNS_DIR.mkdir(parents=True, exist_ok=True)
    d = str(NETNS_DIR).encode()
    if _libc.mount(b"", d, b"none", MS_SHARED | MS_REC, None) != 0:
        _check(_libc.mount(d, d, b"none", MS_BIND | MS_REC, None), f"bind {NETNS_DIR}")
        _check(_libc.mount(b"", d, b"none", MS_SHARED | MS_REC, None), f"share {NETNS_DIR}")


def create_namespace(name: str) -> None:
    """Create a named network namespace (like `ip netns add`) without forking: unshare in
    this thread, bind its namespace to /run/netns/NAME, and return to where we were.

    Raises KernelError if the name exists or the kernel refuses."""
    _share_netns_dir()
    path = NETNS_DIR / name
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0))
    except OSError as exc:
        raise KernelError(f"cannot create namespace {name}: {exc.strerror}") from None
    netns.pushns()
    try:
        _check(_libc.unshare(CLONE_NEWNET), f"unshare for namespace {name}")
        _check(_libc.mount(b"/proc/thread-self/ns/net", str(path).encode(), b"none", MS_BIND,
                           None), f"bind namespace {name}")
    except KernelError:
        path.unlink(missing_ok=True)
        raise
    finally:
        netns.popns()


def remove_namespace(name: str) -> bool:
    """Delete a named namespace (its links, bridges and qdiscs go with it); True if it
    existed. Never raises for one that is already gone."""
    if not (NETNS_DIR / name).exists():
        return False
    try:
        netns.remove(name)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise KernelError(f"cannot remove namespace {name}: {exc.strerror}") from None
    return True


def ns_iproute(name: str) -> IPRoute:
    """An IPRoute whose netlink socket lives in namespace `name` (opened there, no fork)."""
    with in_namespace(name):
        return IPRoute()


def _sysctl_path(key: str) -> str:
    return "/proc/sys/" + key.replace(".", "/")


def write_sysctl(name: str, key: str, value: str, optional: bool = False) -> None:
    """Write /proc/sys/<key> (dots or slashes) inside namespace `name`.

    optional: a global knob (net.core.rmem_max...) that is absent from, or read-only in,
    child namespaces depending on the kernel is skipped instead of raising KernelError
    (TCP autotuning, tcp_rmem, does not need those)."""
    try:
        with in_namespace(name), open(_sysctl_path(key), "w") as fh:
            fh.write(value)
    except OSError as exc:
        if optional and isinstance(exc, (FileNotFoundError, PermissionError)):
            log.debug("sysctl %s not writable per namespace here; skipped", key)
        else:
            raise KernelError(f"sysctl {key}={value} in {name}: {exc.strerror}") from None


def read_sysctl(name: str, key: str) -> str:
    """The value of /proc/sys/<key> as namespace `name` sees it."""
    with in_namespace(name):
        return Path(_sysctl_path(key)).read_text().strip()
