"""Packet capture on one interface of a namespace: an AF_PACKET socket opened in that
namespace, read by a thread, written to a pcap file with scapy's writer.

Bounded by packets, seconds and bytes (whichever comes first; 0 = no bound) and stopped
early by stop(). The kernel's receive timestamps are kept (nanoseconds), and the socket's
own drop counter (PACKET_STATISTICS) is reported, so a capture that could not keep up
says so instead of looking like packet loss.

    with Capture(ns, "w1-eth0", path, seconds=30, max_bytes=256 << 20) as cap:
        ... traffic ...
    cap.result.packets, cap.result.dropped, cap.result.stopped_by
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from scapy.data import DLT_EN10MB
from scapy.utils import RawPcapWriter

from testbed.errors import SpecError
from testbed.network.sockets import (SO_TIMESTAMPNS, big_receive_buffer, kernel_time_ns,
                                     ns_socket)

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_STATISTICS = 6
MAX_FRAME = 65536 + 128  # a GSO frame on veth is up to 64 KiB


@dataclass
class CaptureResult:
    """What a capture wrote: its file, packets, bytes, socket drops, duration and what stopped it."""
    path: Path
    packets: int = 0
    bytes: int = 0
    dropped: int = 0  # by our socket (the capture missed them; the link did not lose them)
    seconds: float = 0.0
    stopped_by: str = ""  # "count", "time", "bytes" or "stop"


class Capture:
    """A bounded AF_PACKET capture to pcap on one interface (see the module docstring)."""
    def __init__(self, namespace: str, iface: str, path: Path | str, *, count: int = 0,
                 seconds: float = 0.0, max_bytes: int = 0, snaplen: int = MAX_FRAME,
                 buffer_bytes: int = 64 << 20) -> None:
        if count < 0 or seconds < 0 or max_bytes < 0:
            raise SpecError("capture: count, seconds and max_bytes must be >= 0")
        if not 64 <= snaplen <= MAX_FRAME:
            raise SpecError(f"capture: snaplen must be 64..{MAX_FRAME}, got {snaplen}")
        self.namespace, self.iface = namespace, iface
        self.count, self.seconds, self.max_bytes, self.snaplen = count, seconds, max_bytes, snaplen
        self.buffer_bytes = buffer_bytes
        self.result = CaptureResult(Path(path))
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None

    def __enter__(self) -> Capture:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        """Open the socket in the namespace, bind it to the interface and start the writer thread.

        Raises SpecError when the interface does not exist there."""
        sock = ns_socket(self.namespace, socket.AF_PACKET, socket.SOCK_RAW,
                         socket.htons(ETH_P_ALL))
        try:
            sock.bind((self.iface, ETH_P_ALL))
        except OSError as exc:
            sock.close()
            raise SpecError(f"capture: no interface {self.iface} in {self.namespace} "
                            f"({exc.strerror})") from None
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        big_receive_buffer(sock, self.buffer_bytes)
        sock.settimeout(0.1)
        self._sock = sock
        self.result.path.parent.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._loop, name="capture", daemon=True)
        self._thread.start()
        self._ready.wait(5)

    def _loop(self) -> None:
        assert self._sock is not None
        sock, res = self._sock, self.result
        writer = RawPcapWriter(str(res.path), linktype=DLT_EN10MB, nano=True,
                               snaplen=self.snaplen, sync=False)
        writer.write_header(None)
        t0 = time.monotonic()
        self._ready.set()
        try:
            while True:
                if self.seconds and time.monotonic() - t0 >= self.seconds:
                    res.stopped_by = "time"
                    break
                try:
                    data, anc, _flags, _addr = sock.recvmsg(MAX_FRAME, 64)
                except TimeoutError:
                    if self._stop.is_set():  # stopped, and what was queued is written
                        res.stopped_by = "stop"
                        break
                    continue
                ts = kernel_time_ns(anc)
                frame = data[:self.snaplen]
                writer.write_packet(frame, sec=ts // 1_000_000_000, usec=ts % 1_000_000_000,
                                    caplen=len(frame), wirelen=len(data))
                res.packets += 1
                res.bytes += len(data)
                if self.count and res.packets >= self.count:
                    res.stopped_by = "count"
                    break
                if self.max_bytes and res.bytes >= self.max_bytes:
                    res.stopped_by = "bytes"
                    break
        finally:
            res.seconds = time.monotonic() - t0
            stats = sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)
            res.dropped = struct.unpack("II", stats)[1]
            writer.close()
            sock.close()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the capture to reach its bound; True when it has stopped."""
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def stop(self) -> CaptureResult:
        """Stop once the frames already queued on the socket are written."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        return self.result

    def remove(self) -> None:
        """Delete the pcap file (after stop)."""
        self.stop()
        self.result.path.unlink(missing_ok=True)
