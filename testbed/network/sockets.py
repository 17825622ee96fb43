"""Sockets in a namespace of a running Network, and the socket options the packet and
path measurements share.

A socket is opened inside a namespace by entering it (setns) just for the socket() call:
a socket stays in the namespace it was created in, so one process can measure between
any two hosts with threads.

ns_socket            a socket created in a namespace
big_receive_buffer   a receive buffer past net.core.rmem_max when root
kernel_time_ns       the kernel's receive timestamp of a datagram (SO_TIMESTAMPNS)
"""

from __future__ import annotations

import socket
import struct
import time

from testbed.network.namespace import in_namespace

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)


def ns_socket(name: str, family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM,
              proto: int = 0) -> socket.socket:
    """A socket created in namespace `name` (it stays there; use it from any thread)."""
    with in_namespace(name):
        return socket.socket(family, kind, proto)


def big_receive_buffer(sock: socket.socket, nbytes: int) -> None:
    """A receive buffer of nbytes, past net.core.rmem_max when root (it is read-only in a
    child namespace), else as large as the limit allows."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, nbytes)
    except PermissionError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, nbytes)


def kernel_time_ns(ancillary: list[tuple[int, int, bytes]]) -> int:
    """The kernel's receive time of a datagram read with recvmsg() on a socket with
    SO_TIMESTAMPNS set (CLOCK_REALTIME, ns); now if the kernel gave none."""
    for level, kind, value in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
            sec, nsec = struct.unpack("qq", value[:16])
            return int(sec * 1_000_000_000 + nsec)
    return time.time_ns()
