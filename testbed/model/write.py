"""What should limit a checkpoint's write: a model of one rank writing its files over
NFS across the emulated path (testbed.workload.checkpoint.write: mkdir, then per file
open, transfer_size writes, fsync, close), and the name of the term that binds. Pure
functions, no I/O; the read path's model is bounds.py.

    write_bound(path, file_bytes, folders) -> WriteBound (seconds, per-term seconds,
                                                            limited_by)

seconds = client copy + bytes / streaming rate + slow start + round trips x RTT.

The streaming rate is the smallest of five rates (bytes/s), each a term:

  fibre    the worker's fair share of the line, as payload (the caller passes it as
           bounds.fibre_Bps returns it; the ~200 bytes of RPC and NFS header per 1 MiB
           WRITE are left out)
  window   nconnect x tcp buffer x window_share / RTT: what a connection keeps in
           flight is the receiver's advertised window, window_share of nfsd's tcp_rmem
           max (nfsd leaves its sockets to autotuning; since Linux 6.6 the share is
           the received skbs' len/truesize, scaling_ratio). The client's send buffer
           (tcp_wmem max, set alike by TcpPolicy) holds the window and some unsent
           bytes: the RPC transport sleeps when it is full and is woken when a third
           is free (xs_tcp_write_space: sk_stream_wspace >= sk_stream_min_wspace), so
           it rarely binds while window_share < 1 (measured: send-buffer-limited 5.7 %
           of the time, receive-window-limited 74 %). Measured (UML 7.2, 1 MiB
           buffers, 29.4 ms): nfsd advertised 0.76 of its tcp_rmem (797,952 bytes of
           1 MiB; bounds.window_share says 0.95, iperf's skbs): pass the share the
           receiver advertises (the client's tcp_info snd_wnd / buffer).
  slots    NFSv4.1 session slots x wsize / RTT: every WRITE holds a slot until its reply
           (RFC 8881 section 2.10.6); the Linux client asks for max_session_slots (64,
           NFS4_DEF_SLOT_TABLE_SIZE) and follows the server's target up to 1,024
           (NFS4_MAX_SLOT_TABLE): pass what the session was granted. Slots are per
           session, not per connection: nconnect does not multiply them.
  loss     the TCP response to random loss per connection x nconnect, as the read
           path's (bounds.loss_Bps: Mathis for reno, RFC 8312 for cubic)
  server   nfsd's rate into its export (tmpfs in the lab: infinite unless measured)
  host (connection), host (nic), host (server)
           what the end hosts let the rank write (model.host, the write direction: the
           client's most per connection x nconnect / the ranks sharing the host's
           connections, its NIC's egress, the server's most); inf without a host profile.
           The connections' term counts the busiest connection's bytes: each file is
           flushed at its fsync in WRITEs of wsize dealt out round-robin, so a file of
           w WRITEs puts ceil(w / nconnect) of them on one connection (measured: 14
           MiB in two files over 4 connections of 10 MB/s took 0.43 s, as 4 MiB on the
           busiest takes, not 0.35 s, as 14 MiB over 40 MB/s would)

In series with the streaming time (each its own term):

  client      the bytes at the client's copy rate into its page cache (client_Bps,
              infinite unless measured): the NFS client starts writeback at fsync while
              the dirty bytes stay below vm.dirty_background_ratio (10 % of available
              memory), so nothing crosses the wire while the rank writes (measured: the
              lab's 32-48 MiB checkpoints sent every WRITE from fsync). Above that the
              flusher overlaps the copy and this term overstates the time.
  slow start  the time lost ramping the congestion window from Linux's initial 10
              segments per connection (RFC 6928), doubling per round trip, to the
              streaming rate's window or the file's bytes, where the connections
              restart (restarts): with tcp_slow_start_after_idle (Linux's default; the
              path's slow_start_after_idle) after idling longer than an RTO (RTT + 200
              ms) since the last checkpoint (write_bound's idle_s: the training between
              two, minutes in training; the window halves per idle RTO down to the
              initial one), or spread over nconnect > 1 connections, each idle through
              the others' turns. A single connection paused for less than an RTO, or
              any with the sysctl off, keeps the window it reached (no term). Each file
              is flushed at its own fsync; the window carries over to the next file.
              Measured (checkpoint table, lab-sized checkpoints 5 ms apart): the default
              mount took 0.70-0.73 x a model restarting every checkpoint, 1.17-1.22 x
              one keeping the window. One connection, 12 MiB at 3,000 km and 1 Gbit/s
              (tests/system/test_write_model.py, UML 7.2, 2026-12-07): idle 2 s with
              the sysctl on 0.465 s against the model's 0.457 (restart), idle 50 ms
              0.260 against 0.252 (kept), idle 2 s with it off 0.262 against 0.252.
  round trips those nothing overlaps: two per folder the rank makes (mkdir, then the
              ACCESS the client sends about the new folder before creating a file in
              it: its access cache starts empty); per file OPEN (with create) before
              its first WRITE, the reply to its last WRITE after its last byte left,
              and, when it took more than one WRITE (> wsize), the COMMIT fsync sends
              after that reply (UNSTABLE WRITEs reach stable storage only by COMMIT,
              RFC 8881 section 18.3; a flush of one WRITE goes FILE_SYNC instead: the
              client's FLUSH_COND_STABLE). No CLOSE goes out: nfsd granted a write
              delegation with the OPEN. So 2 round trips a file of <= wsize, 3 above;
              tests/system/test_checkpoint.py's WRITE_RTTS = 2 is a floor.
              Measured (UML 7.2, 29.4 ms, 16 files of 64 KiB): 1 CREATE, 1 ACCESS,
              16 OPEN, 16 WRITE, no COMMIT or CLOSE; 1.03 s against 34 round trips'
              1.00 s.

limited_by names the term taking longest: among the rate terms the slowest (the first in
WRITE_LABELS on a tie) stands for the streaming time; "client", "slow start" or "round
trips" when its own time exceeds that. Left out: nfsd's CPU, loss during slow start,
a fresh connection's receive-window autotuning (the first checkpoint on a new mount is
slower) and the bytes htb lets pass above its rate in a burst.

Checked in the lab kernel (tests/system/test_write_model.py, UML 7.2, 2026-12-07) with the
model fed by the configuration only (client_Bps infinite, window_share SKB_WINDOW_SHARE):
a fibre-, a window- and two round-trip-bound checkpoint took 1.03-1.06 x the model's time
(the client's copy, which it leaves out), the fsync lap (the wire's part) 1.00-1.04 x.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import testbed.model.tcp as tcp
from testbed import kernel
from testbed.errors import SpecError
from testbed.model.bounds import Path, loss_Bps
from testbed.model.host import CONNECTION, HOST_LABELS

RATE_LABELS = ("fibre", "window", "slots", "loss", "server", *HOST_LABELS)
SERIAL_LABELS = ("client", "slow start", "round trips")
WRITE_LABELS = (*RATE_LABELS, *SERIAL_LABELS)
FOLDER_RTTS = 2  # per folder the rank creates: mkdir, ACCESS on it before the first create
INIT_CWND = 10  # Linux's TCP_INIT_CWND (RFC 6928), segments


def _number(name: str, value: object, low: float, *, low_ok: bool = True,
            inf_ok: bool = False) -> float:
    """value as a float, checked against `low` (inclusive when low_ok) and finiteness;
    SpecError (a ValueError) naming the field otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise SpecError(f"write path: {name} = {value!r}; must be a number")
    if (value < low) if low_ok else (value <= low):
        raise SpecError(f"write path: {name} = {value!r}; must be "
                        f"{'>=' if low_ok else '>'} {low:g}")
    if math.isinf(value) and not inf_ok:
        raise SpecError(f"write path: {name} = {value!r}; must be finite")
    return float(value)


def _integer(name: str, value: object, low: int) -> int:
    """value as an int >= low; SpecError (a ValueError) naming the field otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise SpecError(f"write path: {name} = {value!r}; must be an integer >= {low}")
    return value


@dataclass(frozen=True)
class WritePath:
    """A worker's path to the NFS server for writing: round trip, the payload rate of its
    fair share of the line (bounds.fibre_Bps's value), the mount's wsize and nconnect,
    the TCP buffer maximum (tcp_wmem max, the same as the receiver's tcp_rmem max here)
    and the share of it the receiver advertises as window, the session's
    slots, nfsd's write rate, the client's copy rate into its page cache, random loss
    per packet, MTU and congestion control (for the loss term). Validated at
    construction: SpecError (a ValueError) with one line naming the field."""

    rtt_s: float
    share_Bps: float
    wsize: int = 1 << 20
    connections: int = 1
    buffer_bytes: int = kernel.TCP_BUFFER_BYTES
    window_share: float = 0.5
    slots: int = kernel.SESSION_SLOTS
    server_Bps: float = math.inf
    loss: float = 0.0
    mtu: int = 1500
    cc: str = "cubic"
    client_Bps: float = math.inf
    host: dict[str, float] = field(default_factory=dict)  # model.host's write terms
    slow_start_after_idle: bool = kernel.SLOW_START_AFTER_IDLE

    def __post_init__(self) -> None:
        _number("rtt_s", self.rtt_s, 0.0)
        for name in ("share_Bps", "server_Bps", "client_Bps"):
            _number(name, getattr(self, name), 0.0, low_ok=False, inf_ok=True)
        for label, rate in self.host.items():
            if label not in HOST_LABELS:
                raise SpecError(f"write path: host term {label!r}; known: "
                                f"{', '.join(HOST_LABELS)}")
            _number(label, rate, 0.0, low_ok=False, inf_ok=True)
        if _number("window_share", self.window_share, 0.0, low_ok=False) > 1:
            raise SpecError(f"write path: window_share = {self.window_share!r}; must be <= 1")
        if _number("loss", self.loss, 0.0) >= 1:
            raise SpecError(f"write path: loss = {self.loss!r}; must be < 1 (a probability)")
        for name in ("wsize", "connections", "buffer_bytes", "slots"):
            _integer(name, getattr(self, name), 1)
        tcp.mss_bytes(_integer("mtu", self.mtu, 1))
        if self.cc not in tcp.MODELS:
            raise SpecError(f"write path: cc = {self.cc!r}; known: {', '.join(tcp.MODELS)}")


@dataclass(frozen=True)
class WriteBound:
    """The model's time for one rank to write and fsync its files: seconds in all, the
    seconds of each term of WRITE_LABELS (a rate term: the bytes at that rate alone;
    the others: their own time, in series), the binding label and the bytes."""

    seconds: float
    terms: dict[str, float]
    limited_by: str
    nbytes: int = 0

    def Bps(self) -> float:  # noqa: N802 (units in the name, as elsewhere)
        """The rank's write rate the model expects: bytes / seconds (inf when there is
        nothing to wait for)."""
        return self.nbytes / self.seconds if self.seconds > 0 else math.inf


def write_rates(path: WritePath) -> dict[str, float]:
    """Every rate term of `path` (bytes/s, inf where a term does not bind: at zero RTT
    the window and slots terms, without loss the loss term), keyed as RATE_LABELS."""
    def per_rtt(nbytes: float) -> float:
        return nbytes / path.rtt_s if path.rtt_s > 0 else math.inf
    loss = loss_Bps(Path(path.rtt_s, path.share_Bps, path.loss, path.mtu, path.connections,
                         path.buffer_bytes, path.cc, window_share=path.window_share))
    window = path.connections * path.buffer_bytes * path.window_share
    return {"fibre": path.share_Bps, "window": per_rtt(window),
            "slots": per_rtt(path.slots * path.wsize), "loss": loss,
            "server": path.server_Bps,
            **{label: path.host.get(label, math.inf) for label in HOST_LABELS}}


def _burst_ramp(window: float, full: float, nbytes: int, rate_Bps: float,  # noqa: N803
                rtt_s: float) -> tuple[float, float]:
    """One file's flush from a congestion window of `window` bytes: (the seconds it
    takes beyond nbytes / rate + one round trip, the window after). Each round sends
    what the window allows and grows it by as much (slow start) until it reaches
    `full` (rate x RTT), from where the rest streams at the rate."""
    rounds, sent = 0, 0
    while sent < nbytes and window < full:
        burst = min(int(window), nbytes - sent)
        sent, rounds, window = sent + burst, rounds + 1, window + burst
    if sent >= nbytes:  # the last round's reply is the round trip already counted
        return max(0.0, (rounds - 1) * rtt_s - nbytes / rate_Bps), window
    return max(0.0, rounds * rtt_s - sent / rate_Bps), window


def rto_s(path: WritePath) -> float:
    """The least RTO a connection of the path has: its RTT plus TCP_RTO_MIN (Linux's
    rttvar term never falls below rto_min; the lab's routes scale it with k, so in
    emulated seconds it stays 200 ms)."""
    return path.rtt_s + kernel.TCP_RTO_MIN_S


def restarts(path: WritePath, idle_s: float) -> bool:
    """Whether a checkpoint's connections start from the initial window: only with
    tcp_slow_start_after_idle, when they sat idle longer than an RTO since the last
    checkpoint (idle_s: the training between two), or when the mount spreads a rank's
    RPCs over several connections: each carries one in nconnect of the checkpoint's
    round trips and idles through the others' (measured, checkpoint table: the tuned
    mount's lab-sized checkpoints at 1,000 and 3,000 km took 0.86-0.87 x a model that
    restarts them and 1.32-1.46 x one that does not). A single connection is busy with
    the checkpoint's own small RPCs, one RTT apart, until its data, and keeps its window
    over a pause shorter than an RTO (the lab's 5 ms between lab-sized checkpoints)."""
    return path.slow_start_after_idle and (path.connections > 1 or idle_s > rto_s(path))


def slow_start_s(path: WritePath, rate_Bps: float,  # noqa: N803
                 file_bytes: Sequence[int], idle_s: float = math.inf) -> float:
    """Seconds lost to slow start by files flushed one after the other (each at its
    fsync) at rate_Bps: where the connections restart (restarts: after idle_s of
    training, or spread over several connections) they start from INIT_CWND segments
    each and keep the window they reach from one file to the next (their idle between
    files, the next OPEN and copy, is taken as shorter than an RTO); where they do not,
    they kept the previous checkpoint's window and lose nothing. 0 at zero RTT."""
    full = rate_Bps * path.rtt_s
    if path.rtt_s <= 0 or not math.isfinite(full) or not restarts(path, idle_s):
        return 0.0
    window, lost = float(path.connections * INIT_CWND * tcp.mss_bytes(path.mtu)), 0.0
    for nbytes in file_bytes:
        extra, window = _burst_ramp(window, full, nbytes, rate_Bps, path.rtt_s)
        lost += extra
    return lost


def file_round_trips(nbytes: int, wsize: int) -> int:
    """Round trips of one file nothing overlaps: OPEN; the reply to its last WRITE (a
    file of one WRITE goes FILE_SYNC); and when it took more than one WRITE, the COMMIT
    fsync sends after the last reply. An empty file: OPEN alone."""
    return 1 + (nbytes > 0) + (nbytes > wsize)


def round_trips(file_bytes: Sequence[int], wsize: int, folders: int = 1) -> int:
    """Round trips a rank writing files of `file_bytes` bytes under `folders` new
    folders cannot overlap: FOLDER_RTTS a folder, file_round_trips a file."""
    return FOLDER_RTTS * folders + sum(file_round_trips(n, wsize) for n in file_bytes)


def _sizes(file_bytes: Sequence[int], folders: int) -> int:
    """The total of file_bytes, each an integer >= 0, with folders an integer >= 0;
    SpecError (a ValueError) otherwise."""
    if isinstance(file_bytes, (str, bytes)) or not isinstance(file_bytes, Sequence):
        raise SpecError(f"file_bytes: {file_bytes!r}; must be a sequence of byte counts")
    _integer("folders", folders, 0)
    return sum(_integer(f"file_bytes[{i}]", n, 0) for i, n in enumerate(file_bytes))


def busiest_bytes(file_bytes: Sequence[int], wsize: int, connections: int) -> int:
    """The bytes the busiest of `connections` carries when each file is flushed in
    WRITEs of wsize dealt out round-robin: ceil(WRITEs / connections) of a file's, at
    most the file (its last WRITE counted whole: the rest of the file is smaller)."""
    return sum(min(n, math.ceil(math.ceil(n / wsize) / connections) * wsize)
               for n in file_bytes)


def write_bound(path: WritePath, file_bytes: Sequence[int], folders: int = 1,
                idle_s: float = math.inf) -> WriteBound:
    """The model's time for one rank to write files of `file_bytes` bytes each (and fsync
    them) over `path`, making `folders` new folders first (the checkpoint's own: 1),
    after idle_s seconds of training since the last checkpoint (inf: a first one).

    Returns a WriteBound: seconds = the client's copy + bytes / the smallest rate + slow
    start + round trips x RTT; terms in seconds keyed as WRITE_LABELS; limited_by the
    term taking longest (the rate terms counted by their slowest). Raises SpecError (a
    ValueError) for a negative or non-integer size or folder count."""
    nbytes = _sizes(file_bytes, folders)
    rates = write_rates(path)
    terms = {k: nbytes / r for k, r in rates.items()}
    terms[CONNECTION] = busiest_bytes(file_bytes, path.wsize, path.connections) * \
        path.connections / rates[CONNECTION]
    binding = max(RATE_LABELS, key=lambda k: (terms[k], -RATE_LABELS.index(k)))
    terms["client"] = nbytes / path.client_Bps
    terms["slow start"] = slow_start_s(path, rates[binding], file_bytes, idle_s)
    terms["round trips"] = round_trips(file_bytes, path.wsize, folders) * path.rtt_s
    label = max((binding, *SERIAL_LABELS), key=lambda k: terms[k])
    seconds = terms[binding] + sum(terms[k] for k in SERIAL_LABELS)
    return WriteBound(seconds, terms, label, nbytes)
