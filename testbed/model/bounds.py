"""What should limit a point: a model of the loader reading over the emulated path, and
the name of the bound that binds (limited_by). Pure functions, no I/O.

Per worker, every bound is a read rate (bytes/s):

  compute  the accelerator's demand at 100 % AU: batch x sample / compute time
  fibre    the line rate's fair share (every span on the path divided among the workers
           crossing it), times the payload share of a frame (MSS / (MTU + 14))
  window   the TCP buffers: nconnect x (tcp_rmem max x the advertised share) / RTT, the
           share being 1/2 before Linux 6.6 (tcp_adv_win_scale 1) and, since, the received
           skbs' len/truesize (SKB_WINDOW_SHARE, 0.76: one packet per skb, as the lab's
           paced lines deliver them; up to 0.95 when they arrive merged); over NFS/RDMA soft-RoCE's
           own window instead: 128 unacknowledged packets per queue pair
           (RXE_MAX_UNACKED_PSNS) x the RoCE path MTU (1 KiB on a 1,500-byte link, 4 KiB
           at 9,000) per RTT
  loss     the TCP response to random loss per connection (testbed.model.tcp: Mathis for
           reno, RFC 8312's response function for cubic), times nconnect
  slots    NFSv3's RPC slot table: nconnect x rpc_slots READs of rsize per RTT (every
           request holds a slot of its TCP transport until its reply; the kernel's
           65,536 never binds, a lowered tcp_max_slot_table_entries does; NFSv4.1+
           transports keep unlimited slots, their sessions' own grow on demand)
  latency  per-file and per-request round trips times the loader's depth: an event
           simulation (model.sim) of `readers` readers, each opening a file (one round
           trip) and reading it in read_kib requests through Linux's on-demand read-ahead
           (model.readahead), all replies sharing the path's rate first come first served
           (the fibre's share, or the end hosts' where lower)
  host     what the end hosts let the worker move (model.host): its NFS connections,
           its host's NIC, the server; limited_by names the one that binds:
           "host (connection)", "host (nic)" or "host (server)"

The prediction is the smallest bound (compute included); its name is limited_by. A
measurement far below the prediction with the machine busy is the emulator's, which the
caller decides from its own evidence (emulator_reasons).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import testbed.model.tcp as tcp
from testbed import kernel
from testbed.model.host import HOST_LABELS, binding
from testbed.model.sim import Reading, Setting, read_rate_Bps

PAGE = 4096
ETH_HEADER = 14
RXE_UNACKED = 128                            # soft-RoCE's packets in flight per queue pair
ROCE_MTUS = (4096, 2048, 1024, 512, 256)     # InfiniBand MTUs a RoCE path can take
RXE_MAX_HDR = 80                             # rxe's RXE_MAX_HDR_LENGTH: the MTU's headroom
ROCE_HEADERS = 20 + 8 + 12 + 4 + 4           # IPv4, UDP, BTH, AETH, ICRC of a read reply
LABELS = ("compute", "fibre", "window", "slots", "loss", "latency", *HOST_LABELS, "emulator")


@dataclass(frozen=True)
class Path:
    """A worker's path to the storage host: round trip, its fair share of the line rate,
    random loss per packet, MTU, TCP connections (nconnect), TCP buffer maximum, cc."""

    rtt_s: float
    share_Bps: float
    loss: float = 0.0
    mtu: int = 1500
    connections: int = 1
    buffer_bytes: int = kernel.TCP_BUFFER_BYTES
    cc: str = "cubic"
    transport: str = "tcp"
    window_share: float = 0.5
    clock_scale: float = 1.0  # time dilation k: CUBIC's curve runs on the real clock
    rpc_slots: int = kernel.RPC_SLOTS  # requests in flight per TCP connection (NFSv3)
    host: dict[str, float] = field(default_factory=dict)  # model.host's terms (bytes/s)

    @property
    def mss(self) -> int:
        """Payload per packet: TCP's (timestamps on), or the RoCE path MTU over RDMA."""
        if self.transport == "rdma":
            return roce_mtu(self.mtu)
        return tcp.mss_bytes(self.mtu)


# The share of its buffer an NFS connection's receiver advertises since Linux 6.6, whose
# receive window is the buffer x len/truesize of the skbs it samples: 0.76 when packets
# arrive one per skb, as a line paced by htb delivers them (the reading client: 1.55-1.60
# MB of 2 MiB at 3,000 km, 1 Gbit/s; nfsd receiving writes: 797,952 bytes of 1 MiB; UML
# 7.2). A bulk stream whose packets arrive faster than the receiver handles them gets
# them merged (GRO) and advertises up to 0.95 (iperf through the lab's veths); NFS reads
# at 100 Gbit/s have read up to 1.25 x this term (resnet50, one worker at 3,000 km).
SKB_WINDOW_SHARE = 0.76


def window_share(kernel_release: str) -> float:
    """The share of tcp_rmem a receiver advertises as window on this kernel release:
    1/2 before 6.6 (tcp_adv_win_scale = 1), SKB_WINDOW_SHARE since (the least it
    advertises on the lab's paced lines: a figure above the window term by up to 1.25 x
    is a receiver that merged its packets)."""
    try:
        major, minor = (int(x) for x in kernel_release.split("-")[0].split(".")[:2])
    except ValueError:
        return 0.5
    return 0.5 if (major, minor) < (6, 6) else SKB_WINDOW_SHARE


def roce_mtu(link_mtu: int) -> int:
    """The largest InfiniBand MTU whose RoCEv2 packet fits the link's MTU (rxe's rule)."""
    return next((m for m in ROCE_MTUS if m + RXE_MAX_HDR <= link_mtu), ROCE_MTUS[-1])


@dataclass
class Bounds:
    """Every bound (bytes/s), the prediction and what binds."""

    compute: float
    fibre: float
    window: float
    loss: float
    latency: float
    slots: float = math.inf
    host_terms: dict[str, float] = field(default_factory=dict)  # model.host's, by label
    values: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.values = {"compute": self.compute, "fibre": self.fibre, "window": self.window,
                       "slots": self.slots, "loss": self.loss, "latency": self.latency,
                       "host": self.host}

    @property
    def host(self) -> float:
        """The end hosts' bound: the smallest host term (inf: no host limit)."""
        return binding(self.host_terms)[1]

    @property
    def predicted(self) -> float:
        """The read rate the model expects (the smallest bound)."""
        return min(self.values.values())

    @property
    def limited_by(self) -> str:
        """The binding bound. compute when the demand is met (within 2 %); the latency
        simulation includes the serialisation at the fibre's rate (or the hosts'), so a
        latency bound within 5 % of the fibre's (or the hosts') is theirs; the hosts'
        bound is named by its term (host (connection), host (nic), host (server))."""
        if self.compute <= 1.02 * min(v for k, v in self.values.items() if k != "compute"):
            return "compute"
        name = min((k for k in self.values if k != "compute"), key=self.values.__getitem__)
        if name == "latency" and self.host <= 1.05 * self.latency:
            name = "host"
        if name == "latency" and self.fibre <= 1.05 * self.latency:
            return "fibre"
        return binding(self.host_terms)[0] if name == "host" else name

    def au_pct(self) -> float:
        """The AU the model expects: demand met, or the share of it the reads allow."""
        return 100.0 * min(1.0, self.predicted / self.compute) if self.compute > 0 else 100.0


def loss_Bps(path: Path) -> float:
    """The loss bound of the path's connections: the response function (model.tcp) of the
    path's congestion control (Mathis for reno; RFC 8312's for cubic, its curve on the
    dilated clock), x nconnect. Not modelled for soft-RoCE (go-back-N after a timeout): no bound."""
    if path.loss <= 0 or path.rtt_s <= 0 or path.transport == "rdma":
        return math.inf
    cc = path.cc if path.cc in tcp.MODELS else "reno"
    one = tcp.predict(cc, path.mtu, path.rtt_s * 1000.0, path.loss * 100.0,
                            path.clock_scale)
    return one.MB_s * 1e6 * path.connections


def window_Bps(path: Path) -> float:
    """The TCP buffers' bound: window_share of tcp_rmem's maximum is advertised as
    window; over RDMA soft-RoCE's packets in flight per queue pair."""
    if path.rtt_s <= 0:
        return math.inf
    if path.transport == "rdma":
        return path.connections * RXE_UNACKED * path.mss / path.rtt_s
    return path.connections * path.buffer_bytes * path.window_share / path.rtt_s


def slots_Bps(path: Path, rsize: int) -> float:
    """The RPC slot tables' bound: each TCP connection keeps rpc_slots READs of at most
    rsize in flight per round trip (NFS over RDMA has its own credits: no bound)."""
    if path.rtt_s <= 0 or path.transport != "tcp":
        return math.inf
    return path.connections * path.rpc_slots * rsize / path.rtt_s


def payload_share(mtu: int, transport: str = "tcp") -> float:
    """The share of a frame on a line of this MTU that carries payload (TCP's MSS, or
    RoCE's path MTU, over the frame with its Ethernet header)."""
    path = Path(0.0, 1.0, mtu=mtu, transport=transport)
    frame = path.mtu if path.transport == "tcp" else path.mss + ROCE_HEADERS
    return path.mss / (frame + ETH_HEADER)


def fibre_Bps(path: Path) -> float:
    """The fair share of the line rate that carries payload."""
    return path.share_Bps * payload_share(path.mtu, path.transport)


def predict(path: Path, reading: Reading, demand_Bps: float, local: bool = False) -> Bounds:
    """Every bound of a worker reading over `path` (local: the data path reads on the GPU
    site, so only the demand bounds it). The readers' replies cross the fibre's share or
    the end hosts' rate (on the wire), whichever is lower."""
    if local:
        return Bounds(demand_Bps, math.inf, math.inf, math.inf, math.inf)
    hosts = binding(path.host)[1] / payload_share(path.mtu, path.transport)
    latency = read_rate_Bps(Setting(path.rtt_s, min(path.share_Bps, hosts), reading))
    return Bounds(demand_Bps, fibre_Bps(path), window_Bps(path), loss_Bps(path), latency,
                  slots_Bps(path, reading.rsize), dict(path.host))
