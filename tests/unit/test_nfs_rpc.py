"""The NFS/RPC dissection, on captures built with scapy (no kernel needed)."""

import struct

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether
from scapy.utils import PcapWriter

from testbed.errors import SpecError
from testbed.packets import nfs_rpc

CLIENT, SERVER = "10.0.0.2", "10.0.0.1"


def xdr_opaque(b: bytes) -> bytes:
    return struct.pack("!I", len(b)) + b + b"\0" * (-len(b) % 4)


def v4_read_call(xid: int, offset: int, count: int) -> bytes:
    body = struct.pack("!IIIIII", xid, 0, 2, 100003, 4, 1)
    body += struct.pack("!I", 1) + xdr_opaque(b"\0" * 20)  # AUTH_SYS-ish credential
    body += struct.pack("!I", 0) + xdr_opaque(b"")  # null verifier
    body += xdr_opaque(b"") + struct.pack("!II", 1, 3)  # tag, minor version 1, 3 ops
    body += struct.pack("!I", 53) + b"\0" * 32  # SEQUENCE
    body += struct.pack("!I", 22) + xdr_opaque(b"\x01" * 28)  # PUTFH
    body += struct.pack("!I", 25) + b"\0" * 16 + struct.pack("!QI", offset, count)  # READ
    return struct.pack("!I", 0x80000000 | len(body)) + body


def v3_read_call(xid: int, offset: int, count: int) -> bytes:
    body = struct.pack("!IIIIII", xid, 0, 2, 100003, 3, 6)
    body += struct.pack("!I", 0) + xdr_opaque(b"") + struct.pack("!I", 0) + xdr_opaque(b"")
    body += xdr_opaque(b"\x02" * 32) + struct.pack("!QI", offset, count)
    return struct.pack("!I", 0x80000000 | len(body)) + body


def reply(xid: int, data_bytes: int) -> bytes:
    body = struct.pack("!IIIII", xid, 1, 0, 0, 0) + b"\0" * (8 + data_bytes)
    return struct.pack("!I", 0x80000000 | len(body)) + body


class Wire:
    """Frames of one client port, as the client's interface sees them."""

    def __init__(self, path, sport=900):
        self.w = PcapWriter(str(path), linktype=1, nano=True)
        self.sport, self.cseq, self.sseq = sport, 1000, 5000

    def frame(self, t, payload, to_server, seq=None, flags="PA"):
        src, dst = (CLIENT, SERVER) if to_server else (SERVER, CLIENT)
        sp, dp = (self.sport, 2049) if to_server else (2049, self.sport)
        s = seq if seq is not None else (self.cseq if to_server else self.sseq)
        pkt = Ether() / IP(src=src, dst=dst) / TCP(sport=sp, dport=dp, seq=s, flags=flags)
        pkt = pkt / payload if payload else pkt
        pkt.time = t
        self.w.write(pkt)
        if seq is None:
            if to_server:
                self.cseq += len(payload)
            else:
                self.sseq += len(payload)

    def handshake(self, t):
        self.frame(t, b"", True, seq=self.cseq - 1, flags="S")
        self.frame(t + 0.01, b"", False, seq=self.sseq - 1, flags="SA")

    def stream(self, t, data, to_server, mss=1448):
        for i in range(0, len(data), mss):
            self.frame(t, data[i:i + mss], to_server)

    def close(self):
        self.w.close()


def test_reads_sizes_in_flight_and_latency(tmp_path):
    path = tmp_path / "c.pcap"
    w = Wire(path)
    w.handshake(1.0)
    # four 64 KiB READs sent together (one segment), answered 10 ms later, one by one
    w.stream(1.1, b"".join(v4_read_call(10 + i, i * 65536, 65536) for i in range(4)), True)
    for i in range(4):
        w.stream(1.11 + i * 0.001, reply(10 + i, 65536), False)
    w.close()
    a = nfs_rpc.analyse(path, rate_bps=1e9, rtt_s=0.01)
    reads = a.rpcs[a.rpcs.op == "READ"]
    assert list(reads["offset"]) == [0, 65536, 131072, 196608]
    assert set(reads["count"]) == {65536}
    assert reads["latency_ms"].between(10.0, 14.0).all(), reads["latency_ms"]
    s = a.summary
    assert s["reads"] == 4 and s["read_size_median"] == 65536 and s["read_bytes"] == 4 * 65536
    assert s["reads_in_flight_max"] == 4 and s["read_bytes_in_flight_max"] == 4 * 65536
    assert s["bdp_bytes"] == pytest.approx(1.25e6)
    assert s["retransmitted_to_client"] == 0 and s["streams_skipped"] == 0
    assert a.timeline["reads_in_flight"].iloc[-1] == 0


def test_retransmission_and_hole_delay_the_reply(tmp_path):
    path = tmp_path / "c.pcap"
    w = Wire(path)
    w.handshake(0.0)
    w.stream(0.1, v3_read_call(7, 0, 4096), True)
    data = reply(7, 4096)
    first, rest = data[:1448], data[1448:]
    start = w.sseq
    w.frame(0.2, rest, False, seq=start + 1448)  # arrives first: its predecessor was lost
    w.frame(0.5, first, False, seq=start)  # the retransmission fills the hole
    w.frame(0.6, first, False, seq=start)  # and a spurious duplicate
    w.close()
    a = nfs_rpc.analyse(path)
    (read,) = a.rpcs[a.rpcs.op == "READ"].itertuples()
    assert read.vers == 3 and read.count == 4096
    assert read.reply_last_s == pytest.approx(0.5)  # delivered when the hole filled
    assert a.summary["retransmitted_to_client"] == 2


def test_capture_joined_mid_record_is_skipped_not_misread(tmp_path):
    path = tmp_path / "c.pcap"
    w = Wire(path)  # no handshake: the capture starts inside a record
    w.stream(0.0, v4_read_call(1, 0, 4096)[40:] + b"\xff" * 64, True)
    w.close()
    a = nfs_rpc.analyse(path)
    assert a.summary["reads"] == 0 and a.summary["streams_skipped"] == 1


def test_plot_and_missing_file(tmp_path):
    path = tmp_path / "c.pcap"
    w = Wire(path)
    w.handshake(0.0)
    w.stream(0.1, v4_read_call(1, 0, 4096), True)
    w.stream(0.2, reply(1, 4096), False)
    w.close()
    png = nfs_rpc.plot(nfs_rpc.analyse(path, 1e9, 0.03), tmp_path / "x.png")
    assert png.stat().st_size > 1000
    with pytest.raises(SpecError):
        nfs_rpc.analyse(tmp_path / "none.pcap")
