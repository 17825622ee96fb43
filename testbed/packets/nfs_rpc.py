"""Dissect the NFS traffic of a capture: which READs the client asked for, how many RPCs
and how many requested bytes were in flight over time against the path's bandwidth-delay
product, and how many TCP segments were retransmitted.

scapy dissects each frame down to TCP; the TCP byte streams of every NFS connection
(port 2049) are reassembled in sequence order; ONC RPC records (RFC 5531, record marking)
are read from the client's stream (calls: XID, program, NFSv3 procedure or NFSv4
COMPOUND operations, READ offset and count) and from the server's stream (replies: XID,
size, when the first and last byte reached the client).

"In flight" is the application's view: an RPC is in flight from the capture time of its
call until the last byte of its reply arrived; a READ's requested bytes are in flight as
long as the READ is. To keep a path of rate R and round-trip time T full, the requested
bytes in flight must reach R x T (the BDP); a default mount asks for far less.

    table = analyse(pcap, rate_bps=1e9, rtt_s=0.0294)
    table.rpcs, table.timeline, table.summary ; plot(table, "inflight.png")
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import struct
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pandas as pd
from scapy.config import conf
from scapy.error import Scapy_Exception
from scapy.layers.inet import IP, TCP  # and with them the link types in conf.l2types
from scapy.utils import RawPcapReader

from testbed import atomic, userfiles
from testbed.errors import SpecError

NFS_PORT = 2049
NFS_PROGRAM = 100003
CALL, REPLY = 0, 1
MAX_RECORD = 64 << 20
V3_PROCS = {0: "NULL", 1: "GETATTR", 3: "LOOKUP", 4: "ACCESS", 6: "READ", 7: "WRITE",
            8: "CREATE", 16: "READDIR", 17: "READDIRPLUS", 18: "FSSTAT", 19: "FSINFO",
            20: "PATHCONF", 21: "COMMIT"}
V4_OPS = {3: "ACCESS", 4: "CLOSE", 9: "GETATTR", 10: "GETFH", 15: "LOOKUP", 18: "OPEN",
          22: "PUTFH", 24: "PUTROOTFH", 25: "READ", 26: "READDIR", 38: "WRITE",
          40: "BACKCHANNEL_CTL", 42: "EXCHANGE_ID", 43: "CREATE_SESSION",
          44: "DESTROY_SESSION", 47: "GETDEVICEINFO", 50: "LAYOUTGET", 52: "SECINFO_NO_NAME",
          53: "SEQUENCE", 57: "DESTROY_CLIENTID", 58: "RECLAIM_COMPLETE"}
# v4 operations whose arguments we can step over to reach the one that names the RPC
_V4_PREFIX = {53: 32, 24: 0, 10: 0}  # SEQUENCE, PUTROOTFH, GETFH: fixed sizes
OP_PUTFH, OP_READ = 22, 25


class _Xdr:
    def __init__(self, data: bytes | memoryview, pos: int = 0) -> None:
        self.data, self.pos = data, pos

    def u32(self) -> int:
        """The next XDR unsigned 32-bit integer."""
        (v,) = struct.unpack_from("!I", self.data, self.pos)
        self.pos += 4
        return int(v)

    def u64(self) -> int:
        """The next XDR unsigned 64-bit integer."""
        (v,) = struct.unpack_from("!Q", self.data, self.pos)
        self.pos += 8
        return int(v)

    def opaque(self) -> None:
        """Skip a variable-length XDR opaque (length, bytes, padding)."""
        n = self.u32()
        self.pos += (n + 3) & ~3

    def skip(self, n: int) -> None:
        """Skip n bytes (ValueError past the end)."""
        self.pos += n


@dataclass
class _Stream:
    """One direction of one TCP connection, as captured."""
    base: int | None = None  # sequence number of the stream's first byte
    segments: list[tuple[int, bytes, float]] = field(default_factory=list)
    highest: int = 0  # highest sequence end seen so far (relative)
    out_of_order: int = 0  # segments that arrived below it: retransmitted or reordered
    data_segments: int = 0

    def add(self, seq: int, payload: bytes, t: float, syn: bool) -> None:
        """Add one segment's payload at its sequence number (retransmissions keep the last copy's time)."""
        if syn:
            self.base = (seq + 1) & 0xFFFFFFFF
            return
        if not payload:
            return
        if self.base is None:
            self.base = seq
        rel = (seq - self.base) & 0xFFFFFFFF
        if rel >= 1 << 31:  # before the first byte we saw: not part of our stream
            return
        self.data_segments += 1
        if rel < self.highest:
            self.out_of_order += 1
        self.highest = max(self.highest, rel + len(payload))
        self.segments.append((rel, payload, t))

    def assemble(self) -> tuple[bytes, list[int], list[float]]:
        """The contiguous stream from its first byte up to the first hole, and a map from
        stream offsets to the time those bytes could be delivered (running max of
        arrival times: bytes past a hole wait for it to fill)."""
        buf = bytearray()
        starts: list[int] = []
        times: list[float] = []
        ready = 0.0
        for rel, payload, t in sorted(self.segments, key=lambda s: (s[0], s[2])):
            end = rel + len(payload)
            if rel > len(buf):
                break  # a hole the capture never saw filled
            if end <= len(buf):
                continue
            ready = max(ready, t)
            starts.append(len(buf))
            times.append(ready)
            buf += payload[len(buf) - rel:]
        return bytes(buf), starts, times


def _time_at(starts: list[int], times: list[float], offset: int) -> float:
    return times[max(0, bisect.bisect_right(starts, offset) - 1)]


def _records(stream: bytes) -> list[tuple[int, int, bytes]]:
    """(offset of the record mark, record length, first bytes of the body) of each
    complete ONC RPC record in a stream (fragments joined)."""
    out = []
    pos = 0
    while pos + 4 <= len(stream):
        start, length, body = pos, 0, b""
        while True:
            (mark,) = struct.unpack_from("!I", stream, pos)
            frag = mark & 0x7FFFFFFF
            if frag > MAX_RECORD:
                return out  # not a record mark: the stream did not start at one
            if pos + 4 + frag > len(stream):
                return out  # the capture ended inside this record
            if len(body) < 512:
                body += stream[pos + 4:pos + 4 + min(frag, 512)]
            length += frag
            pos += 4 + frag
            if mark & 0x80000000 or pos + 4 > len(stream):
                break
        out.append((start, 4 + length, body))
    return out


def _v4_compound(x: _Xdr, call: dict[str, Any]) -> None:
    """Name an NFSv4 COMPOUND by its first operation past the prefix ones (SEQUENCE,
    PUTFH...), with a READ's offset and count."""
    x.opaque()  # tag
    x.skip(4)  # minor version
    numops = x.u32()
    call["op"] = "COMPOUND"
    for _ in range(numops):
        op = x.u32()
        if op in _V4_PREFIX:
            x.skip(_V4_PREFIX[op])
        elif op == OP_PUTFH:
            x.opaque()
        else:
            call["op"] = V4_OPS.get(op, f"op{op}")
            if op == OP_READ:
                x.skip(16)  # stateid
                call["offset"], call["count"] = x.u64(), x.u32()
            break


def _name_call(x: _Xdr, call: dict[str, Any], prog: int, vers: int, proc: int) -> None:
    """Fill in the call's operation (and a READ's offset and count) from its arguments."""
    if prog != NFS_PROGRAM:
        call["op"] = f"prog{prog}"
    elif vers == 3:
        call["op"] = V3_PROCS.get(proc, f"proc{proc}")
        if proc == 6:
            x.opaque()  # file handle
            call["offset"], call["count"] = x.u64(), x.u32()
    elif vers == 4 and proc == 1:
        _v4_compound(x, call)
    elif proc == 0:
        call["op"] = "NULL"


def _parse_call(body: bytes) -> dict[str, Any] | None:
    """An RPC call's xid, program, version and operation (a READ with its offset and
    count); None for a reply or a record too short to parse."""
    x = _Xdr(body)
    try:
        xid, mtype = x.u32(), x.u32()
        if mtype != CALL:
            return None
        _rpcvers, prog, vers, proc = x.u32(), x.u32(), x.u32(), x.u32()
        x.skip(4)
        x.opaque()  # credential
        x.skip(4)
        x.opaque()  # verifier
        call: dict[str, Any] = {"xid": xid, "prog": prog, "vers": vers, "op": f"proc{proc}",
                                "offset": None, "count": None}
        _name_call(x, call, prog, vers, proc)
        return call
    except struct.error:
        return None


@dataclass
class Analysis:
    """A capture's NFS traffic: one row per RPC, the in-flight timeline and a summary."""
    rpcs: pd.DataFrame
    timeline: pd.DataFrame
    summary: dict[str, Any]


def _frame_time(reader: Any, meta: Any) -> float:
    """A frame's capture time in seconds: a pcap record holds seconds and micro- (or
    nano-) seconds, a pcapng block a 64-bit count in its interface's resolution."""
    if hasattr(meta, "tsresol"):
        return ((meta.tshigh << 32) | meta.tslow) / meta.tsresol
    return meta.sec + meta.usec * (1e-9 if getattr(reader, "nano", False) else 1e-6)


def _dissector(pcap: Path, reader: Any, meta: Any, frame: int) -> Any:
    """The scapy layer a frame starts with, by its link type (a pcap file's one, a
    pcapng interface's own): Ethernet, Linux cooked (`tcpdump -i any`), raw IP,
    loopback. SpecError naming the frame for a link type scapy cannot dissect."""
    linktype = meta.linktype if hasattr(meta, "linktype") else reader.linktype
    layer = conf.l2types.num2layer.get(linktype)
    if layer is None:
        raise SpecError(f"{pcap}: frame {frame}: link type {linktype} is not one analyse "
                        "reads (Ethernet 1, Linux cooked 113 or 276, raw IP 101 or 228, "
                        "loopback 0)")
    return layer


def _dissect(layer: Any, data: bytes) -> Any:
    """The frame dissected from its first layer; None for one too short or too broken
    for that layer (a capture cut at a small snaplen): scapy itself treats a layer past
    the first that fails this way as raw bytes, whatever the exception."""
    try:
        return layer(data)
    except Exception:  # noqa: BLE001 (scapy's own rule for the layers it dissects)
        return None


def _read_streams(pcap: Path, port: int) -> tuple[dict[tuple[int, bool], _Stream], int]:
    """The TCP streams of the NFS connections in a pcap or pcapng file, by (client port,
    to server), and the number of frames read. SpecError for a missing or non-pcap file."""
    userfiles.check(pcap, "capture")
    streams: dict[tuple[int, bool], _Stream] = defaultdict(_Stream)
    with _scapy_quiet():  # its complaints about the file end in our SpecError, or in EOF
        try:
            reader = RawPcapReader(str(pcap))
        except Scapy_Exception as exc:
            raise SpecError(f"{pcap}: not a pcap capture ({exc})") from None
        frames = _read_frames(pcap, reader, port, streams)
    return streams, frames


@contextlib.contextmanager
def _scapy_quiet() -> Iterator[None]:
    """scapy's reader warns on stderr about a file it cannot read (then gives up, or
    stops early as at the end of a capture cut short): silenced while we read."""
    runtime = logging.getLogger("scapy.runtime")
    level = runtime.level
    runtime.setLevel(logging.ERROR)
    try:
        yield
    finally:
        runtime.setLevel(level)


def _read_frames(pcap: Path, reader: Any, port: int,
                 streams: dict[tuple[int, bool], _Stream]) -> int:
    """Add every NFS frame of an open capture to its stream; the number of frames."""
    t0: float | None = None
    frames = 0
    with reader:
        for data, meta in reader:
            frames += 1
            t = _frame_time(reader, meta)
            t0 = t if t0 is None else t0
            pkt = _dissect(_dissector(pcap, reader, meta, frames), data)
            tcp = pkt.getlayer(TCP) if pkt is not None else None
            if tcp is None or pkt.getlayer(IP) is None or port not in (tcp.sport, tcp.dport):
                continue
            to_server = tcp.dport == port
            conn = tcp.sport if to_server else tcp.dport
            streams[(conn, to_server)].add(int(tcp.seq), bytes(tcp.payload), t - t0,
                                           bool(int(tcp.flags) & 0x02))
    return frames


def _connection_rpcs(conn: int, calls_stream: _Stream,
                     replies: _Stream) -> tuple[list[dict[str, Any]], bool]:
    """One connection's RPCs (calls matched with their replies by XID), and whether its
    call stream had to be skipped (joined mid-record: no SYN in the capture)."""
    calls_data, c_starts, c_times = calls_stream.assemble()
    reply_data, r_starts, r_times = replies.assemble()
    calls: dict[int, dict[str, Any]] = {}
    for start, _length, body in _records(calls_data):
        call = _parse_call(body)
        if call is None:
            continue
        call.update(conn=conn, call_s=_time_at(c_starts, c_times, start))
        calls[call["xid"]] = call
    rows: list[dict[str, Any]] = []
    for start, length, body in _records(reply_data):
        if len(body) < 8:
            continue
        xid, mtype = struct.unpack_from("!II", body)
        call = calls.pop(xid, None)
        if mtype != REPLY or call is None:
            continue
        call.update(reply_bytes=length, reply_first_s=_time_at(r_starts, r_times, start),
                    reply_last_s=_time_at(r_starts, r_times, start + length - 1))
        rows.append(call)
    rows += [dict(c, reply_bytes=None, reply_first_s=None, reply_last_s=None)
             for c in calls.values()]  # no reply in the capture
    return rows, bool(calls_data) and not rows


def analyse(pcap: Path | str, rate_bps: float = 0.0, rtt_s: float = 0.0,
            port: int = NFS_PORT) -> Analysis:
    """Dissect the NFS/RPC traffic in a pcap (frames as seen by the client): one row per
    RPC, the in-flight timeline against the BDP (rate x RTT) and a summary."""
    streams, frames = _read_streams(Path(pcap), port)
    rows: list[dict[str, Any]] = []
    skipped = 0
    for (conn, to_server), stream in sorted(streams.items()):
        if to_server:
            found, skip = _connection_rpcs(conn, stream, streams.get((conn, False), _Stream()))
            rows += found
            skipped += skip
    cols = ["conn", "xid", "vers", "op", "offset", "count", "call_s", "reply_first_s",
            "reply_last_s", "reply_bytes"]
    rpcs = pd.DataFrame(rows, columns=cols).sort_values("call_s", ignore_index=True)
    rpcs["latency_ms"] = (rpcs["reply_last_s"] - rpcs["call_s"]) * 1000.0
    timeline = _timeline(rpcs)
    summary = _summary(rpcs, timeline, streams, rate_bps, rtt_s)
    summary.update(frames=frames, streams_skipped=skipped)
    return Analysis(rpcs, timeline, summary)


def _timeline(rpcs: pd.DataFrame) -> pd.DataFrame:
    """Step series: after each event, the RPCs, READs and requested READ bytes in flight."""
    done = rpcs.dropna(subset=["reply_last_s"])
    events: list[tuple[float, int, int, int]] = []
    for r in done.itertuples():
        is_read = r.op == "READ"
        nbytes = int(r.count) if is_read and r.count == r.count else 0
        events.append((float(r.call_s), 1, int(is_read), nbytes))
        events.append((float(r.reply_last_s), -1, -int(is_read), -nbytes))
    events.sort(key=lambda e: (e[0], e[1]))  # at one instant, completions first
    rows, n, reads, nbytes = [], 0, 0, 0
    for t, dn, dr, db in events:
        n, reads, nbytes = n + dn, reads + dr, nbytes + db
        rows.append((t, n, reads, nbytes))
    return pd.DataFrame(rows, columns=["t_s", "rpcs_in_flight", "reads_in_flight",
                                       "read_bytes_in_flight"])


def _time_weighted(timeline: pd.DataFrame, col: str) -> float:
    if len(timeline) < 2:
        return 0.0
    t = timeline["t_s"].to_numpy()
    v = timeline[col].to_numpy()
    span = t[-1] - t[0]
    return float((v[:-1] * (t[1:] - t[:-1])).sum() / span) if span > 0 else 0.0


def _summary(rpcs: pd.DataFrame, timeline: pd.DataFrame, streams: dict[tuple[int, bool], _Stream],
             rate_bps: float, rtt_s: float) -> dict[str, Any]:
    reads = rpcs[rpcs["op"] == "READ"]
    answered = reads.dropna(subset=["reply_last_s"])
    sizes = reads["count"].dropna().astype(int)
    span = (answered["reply_last_s"].max() - answered["call_s"].min()) if len(answered) else 0
    bdp = rate_bps / 8 * rtt_s
    mean_bytes = _time_weighted(timeline, "read_bytes_in_flight")
    to_client = [s for (_, up), s in streams.items() if not up]
    return {
        "rpcs": len(rpcs),
        "reads": len(reads),
        "read_bytes": int(sizes.sum()),
        "read_size_median": int(sizes.median()) if len(sizes) else 0,
        "read_size_max": int(sizes.max()) if len(sizes) else 0,
        "read_latency_median_ms": float(answered["latency_ms"].median()) if len(answered)
        else float("nan"),
        "reads_in_flight_max": int(timeline["reads_in_flight"].max()) if len(timeline) else 0,
        "reads_in_flight_mean": _time_weighted(timeline, "reads_in_flight"),
        "read_bytes_in_flight_max": int(timeline["read_bytes_in_flight"].max())
        if len(timeline) else 0,
        "read_bytes_in_flight_mean": mean_bytes,
        "bdp_bytes": bdp,
        "in_flight_of_bdp": mean_bytes / bdp if bdp else float("nan"),
        "read_MB_s": float(answered["count"].sum() / span / 1e6) if span else float("nan"),
        "connections": len(to_client),
        "data_segments_to_client": sum(s.data_segments for s in to_client),
        "retransmitted_to_client": sum(s.out_of_order for s in to_client),
    }


def plot(result: Analysis, path: Path | str, title: str = "") -> Path:
    """Two panels over time: READs in flight; requested READ MiB in flight vs the BDP."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tl, s = result.timeline, result.summary
    fig, (ax1, ax2) = plt.subplots(2, 1, sharex=True, figsize=(8, 5.5))
    if len(tl):
        ax1.step(tl["t_s"], tl["reads_in_flight"], where="post", lw=0.8)
        ax2.step(tl["t_s"], tl["read_bytes_in_flight"] / 2**20, where="post", lw=0.8,
                 label="requested READ bytes in flight")
    if s.get("bdp_bytes"):
        ax2.axhline(s["bdp_bytes"] / 2**20, color="k", ls="--", lw=1,
                    label=f"BDP {s['bdp_bytes'] / 2**20:.1f} MiB")
    ax1.set_ylabel("READ RPCs in flight")
    ax2.set_ylabel("MiB in flight")
    ax2.set_xlabel("time since capture start (s)")
    ax2.legend(loc="upper right", fontsize=8)
    kib = s.get("read_size_median", 0) // 1024
    ax1.set_title((f"{title}: " if title else "") + f"{s.get('reads', 0)} READs, median "
                  f"{kib} KiB, {s.get('read_MB_s', 0):.1f} MB/s", fontsize=10)
    fig.tight_layout()
    path = Path(path)
    try:
        with atomic.replacing(path) as tmp:
            fig.savefig(tmp, dpi=110, format="png")  # whatever the name ends with
    finally:
        plt.close(fig)
    return path
