"""Specs: frozen, validated descriptions with units in their names. No I/O here.

FibreSpec    one APN fibre span: distance -> delay, rate, loss, jitter, MTU, asymmetry;
             derives RTT, bandwidth-delay product and the netem queue limit.
Direction    the netem/htb parameters of one direction of a link (what tc is given).
parse_rate   "10gbit", "200mbit", 1000 (Mbit/s) -> Mbit/s.
check_name   node names that fit Linux's 15-character interface names.

Physics: light in single-mode fibre travels at c / n_g with a group index n_g ~ 1.469, i.e.
~4.9 us per km one way (3,000 km -> 14.7 ms one way, 29.4 ms RTT).
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Any, Mapping

from testbed import kernel, schema
from testbed.errors import SpecError
from testbed.schema import (CONGESTION_CONTROLS, FLOAT_TEXT_RE, MOUNT_TRANSPORTS,  # noqa: F401
                            NFS_VERSIONS, U64, parse_rate, parse_text)

SPEED_OF_LIGHT_KM_S = 299_792.458
DEFAULT_GROUP_INDEX = schema.default("group_index")  # -> 4.90 us/km
IFNAMSIZ = 15  # usable characters of a Linux interface name
TCP_HEADER_OVERHEAD = 52  # IPv4 (20) + TCP with timestamps (32): MSS = MTU - 52
LIMIT_FACTOR = 1.5  # netem queue >= 1.5 x BDP (in packets) ...
QUEUED_WINDOWS = 16  # ... + this many TCP buffers (nconnect's maximum) waiting for the rate
MIN_LIMIT_PKTS = 1000  # never below netem's own default

_NAME_RE = re.compile(r"^[a-z][a-z0-9]*$")


def format_rate(mbit: float) -> str:
    """Mbit/s -> the shortest exact text tc would accept ("100gbit", "250mbit", "1.5kbit")."""
    mbit = float(mbit)
    if mbit >= 1000 and (mbit / 1000).is_integer():
        return f"{int(mbit // 1000)}gbit"
    if mbit.is_integer():
        return f"{int(mbit)}mbit"
    return f"{mbit * 1000:g}kbit"


def check_name(name: str, what: str = "node", max_len: int = IFNAMSIZ - 5) -> str:
    """Validate a node name: lower-case alphanumerics starting with a letter, short enough
    that "<name>-eth<N>" fits the 15-character interface limit. Returns the name."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise SpecError(f"{what} name {name!r}: use lower-case letters and digits, "
                        "starting with a letter")
    if len(name) > max_len:
        raise SpecError(f"{what} name {name!r} is {len(name)} characters; at most {max_len} fit "
                        f"'<name>-eth<N>' in the {IFNAMSIZ}-character interface limit")
    return name


def validate(spec: Any, rows: Mapping[str, str]) -> None:
    """Check each field of a frozen spec against its schema row ({field: row name}) and
    store the canonical value: the bounds live in testbed.schema, nowhere else."""
    for field, name in rows.items():
        object.__setattr__(spec, field, schema.check(name, getattr(spec, field), field))


@dataclass(frozen=True)
class Direction:
    """What one direction of a link is given: htb rate, then netem delay/jitter/loss/limit."""

    delay_ms: float
    jitter_ms: float
    loss_pct: float
    rate_mbit: float
    limit_pkts: int
    mtu: int
    seed: int | None = None  # netem's PRNG seed (None: a fresh random one)


REVERSE_SEED_SALT = 0x9E3779B97F4A7C15  # B->A draws its own stream from the same seed


def rows_of(cls: type, target: str) -> dict[str, str]:
    """A spec dataclass's fields -> the schema rows that check them: the rows that set
    `target` (schema.fields_of), and for a field none of them sets, the row of its own
    name (a knob two specs share: mtu, time_scale)."""
    own = schema.fields_of(target)
    return {f.name: own.get(f.name, f.name) for f in dataclasses.fields(cls)
            if f.name in own or f.name in schema.ROWS}


@dataclass(frozen=True)
class FibreSpec:
    """One span of APN fibre between two nodes.

    Attributes (units in names):
        distance_km: fibre length; one-way delay = distance_km x group_index / c.
        rate_mbit: line rate (<= 100 Gbit/s), shaped with htb in each direction.
        loss_pct: random loss in percent per packet, e.g. 0.001 (= 1e-5).
        jitter_ms: netem delay jitter (uniform +-), 0 for a stable fibre.
        extra_delay_ms: one-way equipment delay (transponders, switches) added to the fibre.
        group_index: the fibre's group refractive index (1.469 -> 4.90 us/km).
        mtu: MTU of both ends.
        rate_reverse_mbit, loss_reverse_pct: asymmetric B->A direction (None = same as A->B).
        time_scale: time dilation k >= 1. Every figure above stays the emulated scenario's;
            what tc is given (direction()) runs k times slower: rates / k, delay and jitter
            x k. Bytes in flight (BDP), queue limits and TCP buffers are unchanged.
        loss_seed: netem's PRNG seed for loss and jitter (0 <= seed < 2**64; B->A uses
            a stream of its own derived from it); None = a fresh random draw each time
            the link is configured. Same seed, same packets dropped in the same order.
    """

    distance_km: float = schema.default("distance_km")
    rate_mbit: float = schema.default("rate")
    loss_pct: float = schema.default("loss_pct")
    jitter_ms: float = schema.default("jitter_ms")
    extra_delay_ms: float = schema.default("extra_delay_ms")
    group_index: float = schema.default("group_index")
    mtu: int = schema.default("mtu")
    rate_reverse_mbit: float | None = None
    loss_reverse_pct: float | None = None
    time_scale: float = schema.default("time_scale")
    loss_seed: int | None = None

    def __post_init__(self) -> None:
        validate(self, FIBRE_ROWS)
        if self.time_scale == "auto":
            raise SpecError("time_scale: a fibre needs a number (\"auto\" is resolved "
                            "before a fibre is built)")
        if self.jitter_ms > self.one_way_delay_ms and self.jitter_ms > 0:
            raise SpecError(f"jitter_ms: {self.jitter_ms:g} ms exceeds the one-way delay "
                            f"{self.one_way_delay_ms:g} ms (netem would reorder packets)")

    # --- construction -------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FibreSpec:
        """Build from a mapping (TOML, CLI -p); accepts "rate" as text ("10gbit").

        Raises SpecError naming any unknown field."""
        known = {f.name for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in data.items():
            if key == "rate":
                kwargs["rate_mbit"] = parse_rate(value, "rate")
            elif key == "rate_reverse":
                kwargs["rate_reverse_mbit"] = parse_rate(value, "rate_reverse")
            elif key in known:
                kwargs[key] = value
            else:
                raise SpecError(f"unknown fibre field {key!r}; known: "
                                f"{', '.join(sorted(known | {'rate'}))}")
        return cls(**kwargs)

    def replace(self, **changes: Any) -> FibreSpec:
        """A copy with some fields changed (validated again)."""
        return FibreSpec.from_dict({**dataclasses.asdict(self), **changes})

    # --- derived ------------------------------------------------------------------------
    @property
    def us_per_km(self) -> float:
        """One-way delay per km of this fibre (microseconds)."""
        return self.group_index / SPEED_OF_LIGHT_KM_S * 1e6

    @property
    def one_way_delay_ms(self) -> float:
        """The emulated one-way delay: distance x us/km + equipment delay (ms)."""
        return self.distance_km * self.us_per_km / 1000.0 + self.extra_delay_ms

    @property
    def rtt_ms(self) -> float:
        """The emulated round trip without jitter (ms)."""
        return 2.0 * self.one_way_delay_ms

    @property
    def mss_bytes(self) -> int:
        """TCP's payload per packet at this MTU (timestamps on)."""
        return self.mtu - TCP_HEADER_OVERHEAD

    def bdp_bytes(self, rate_mbit: float | None = None) -> int:
        """Bandwidth-delay product at the RTT (plus jitter) and the given (default line) rate."""
        rate = self.rate_mbit if rate_mbit is None else rate_mbit
        rtt_s = (self.rtt_ms + 2 * self.jitter_ms) / 1000.0
        return int(math.ceil(rate * 1e6 / 8 * rtt_s))

    def limit_pkts(self, rate_mbit: float | None = None) -> int:
        """netem queue limit, in packets: room for 1.5 x the BDP (the delay line) plus
        what QUEUED_WINDOWS connections' TCP buffers can have waiting for the line rate
        (htb holds them inside netem), counted in MTU-sized packets; never below 1000.

        A fibre has no queue to overflow, so the emulator's must not drop either. netem
        counts packets, not bytes, and TCP sizes its offload packets to ~1 ms of its
        pacing rate: at a dilated (lower) real rate each packet carries fewer bytes, and a
        limit sized for the BDP alone overflowed (measured: tuned mount, 3,000 km, 200
        Mbit/s, k = 5). Counting single frames makes the limit hold at any k."""
        flight = LIMIT_FACTOR * self.bdp_bytes(rate_mbit) + QUEUED_WINDOWS * \
            self.tcp_buffer_bytes()
        return max(MIN_LIMIT_PKTS, math.ceil(flight / self.mtu))

    def direction(self, forward: bool = True) -> Direction:
        """tc parameters for A->B (forward) or B->A, in real time (dilated by time_scale:
        the queue limit, in packets, is the emulated BDP's)."""
        rate = self.rate_mbit
        loss = self.loss_pct
        if not forward:
            rate = self.rate_reverse_mbit if self.rate_reverse_mbit is not None else rate
            loss = self.loss_reverse_pct if self.loss_reverse_pct is not None else loss
        k = self.time_scale
        return Direction(delay_ms=self.one_way_delay_ms * k, jitter_ms=self.jitter_ms * k,
                         loss_pct=loss, rate_mbit=rate / k,
                         limit_pkts=max(self.limit_pkts(self.rate_mbit),
                                        self.limit_pkts(rate)),
                         mtu=self.mtu, seed=self._seed(forward))

    def _seed(self, forward: bool) -> int | None:
        """A direction's netem seed: loss_seed A->B, a salted one B->A (None: random)."""
        if self.loss_seed is None:
            return None
        return self.loss_seed if forward else self.loss_seed ^ REVERSE_SEED_SALT

    def tcp_buffer_bytes(self) -> int:
        """A per-socket TCP buffer maximum that lets one flow fill the fibre: 2 x BDP (Linux
        advertises about half its receive buffer as window), never below 6 MiB."""
        return max(kernel.TCP_BUFFER_BYTES, 2 * self.bdp_bytes(max(self.rate_mbit,
                                                           self.rate_reverse_mbit or 0)))

    def summary(self) -> dict[str, float | int]:
        """The figures a user checks: what `testbed topo show --json` prints per link."""
        fwd = self.direction(True)
        return {
            "distance_km": self.distance_km,
            "delay_ms": round(self.one_way_delay_ms, 6),
            "rtt_ms": round(self.rtt_ms, 6),
            "jitter_ms": self.jitter_ms,
            "loss_pct": self.loss_pct,
            "rate_mbit": self.rate_mbit,
            "bdp_bytes": self.bdp_bytes(),
            "limit_pkts": fwd.limit_pkts,
            "mtu": self.mtu,
            "time_scale": self.time_scale,
        }


FIBRE_ROWS = rows_of(FibreSpec, "fibre")  # field -> the schema row that checks it


MAX_TIMEO_DS = int(schema.row("timeo_ds").hi or 0)  # the kernel caps NFS/TCP timeo at 600 s


@dataclass(frozen=True)
class NfsServerSpec:
    """The storage site's kernel nfsd.

    versions: NFS versions served ("3", "4.1", "4.2"); threads: nfsd threads;
    grace_s/lease_s: NFSv4 grace and lease times (short, so a run does not wait 90 s).
    """

    versions: tuple[str, ...] = schema.default("nfsd_versions")
    threads: int = schema.default("nfsd_threads")
    grace_s: int = schema.default("grace_s")
    lease_s: int = schema.default("lease_s")

    def __post_init__(self) -> None:
        versions = self.versions
        if isinstance(versions, str):
            versions = [versions]
        elif isinstance(versions, (tuple, list)):
            versions = [str(v) for v in versions]
        object.__setattr__(self, "versions", versions)
        validate(self, {"versions": "nfsd_versions", "threads": "nfsd_threads",
                        "grace_s": "grace_s", "lease_s": "lease_s"})


NFS_RDMA_PORT = 20049  # IANA's NFS over RDMA port (RFC 5666)


@dataclass(frozen=True)
class MountSpec:
    """How a GPU worker mounts the export (kernel NFS client options).

    transport: "tcp" or "rdma" (NFS over RDMA: proto=rdma, port 20049, RFC 5666; needs an
    RDMA device in the worker's and the server's namespaces, services.rdma);
    read_ahead_kb: written to the mount's bdi (None keeps the kernel default, 128 KiB);
    actimeo_s: attribute cache time (None = kernel default); nocto: no close-to-open;
    hard/soft with timeo_ds (tenths of a second) and retrans; fsc: read through the
    GPU site's local FS-Cache (needs a running services.fscache.CacheFiles); rpc_slots:
    sunrpc's tcp_max_slot_table_entries while an NFSv3 mount is made, the READs and
    WRITEs in flight per TCP connection (None keeps the kernel's 65,536).
    """

    vers: str = schema.default("vers")
    rsize: int = schema.default("rsize")
    wsize: int = schema.default("wsize")
    nconnect: int = schema.default("nconnect")
    read_ahead_kb: int | None = None
    actimeo_s: int | None = None
    nocto: bool = schema.default("nocto")
    hard: bool = schema.default("hard")
    timeo_ds: int = schema.default("timeo_ds")
    retrans: int = schema.default("retrans")
    fsc: bool = schema.default("fsc")
    transport: str = schema.default("transport")
    rpc_slots: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.vers, (int, float)) and not isinstance(self.vers, bool):
            object.__setattr__(self, "vers", str(self.vers))  # vers = 4.2 in TOML
        validate(self, MOUNT_ROWS)
        if self.rpc_slots is not None and (self.transport != "tcp" or self.vers != "3"):
            raise SpecError(f"rpc_slots = {self.rpc_slots}: the RPC slot table binds NFSv3 "
                            f"over TCP only (vers = {self.vers!r}, transport = "
                            f"{self.transport!r}: NFSv4.1+ transports keep unlimited slots "
                            "and the session's govern; RDMA has its own credits)")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MountSpec:
        """Build from a mapping (TOML, profiles); SpecError naming an unknown field."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise SpecError(f"unknown mount field {sorted(unknown)[0]!r}; known: "
                            f"{', '.join(sorted(known))}")
        return cls(**dict(data))

    def dilated(self, k: float) -> MountSpec:
        """The same mount for a run dilated by k: its RPC timeout k times longer (capped
        at the kernel's 600 s)."""
        return dataclasses.replace(self, timeo_ds=min(MAX_TIMEO_DS, round(self.timeo_ds * k)))

    def options(self, fsc_tag: str = "") -> str:
        """The -o string for mount.nfs; fsc_tag names this client's cache volume."""
        proto = ["proto=tcp"] if self.transport == "tcp" else \
            ["proto=rdma", f"port={NFS_RDMA_PORT}"]
        opts = [f"vers={self.vers}", *proto, f"rsize={self.rsize}", f"wsize={self.wsize}",
                "hard" if self.hard else "soft", f"timeo={self.timeo_ds}",
                f"retrans={self.retrans}", "retry=0"]
        if self.nconnect != kernel.NCONNECT:  # written only where it differs
            opts.append(f"nconnect={self.nconnect}")
        if self.actimeo_s is not None:
            opts.append(f"actimeo={self.actimeo_s}")
        if self.nocto:
            opts.append("nocto")
        if self.fsc:
            opts.append(f"fsc={fsc_tag}" if fsc_tag else "fsc")
        if self.vers == "3":
            # No NLM (read-only training data, no statd in the worker) and the MOUNT
            # protocol over TCP too, like the NFS traffic.
            opts += ["nolock", "mountproto=tcp"]
        return ",".join(opts)


MOUNT_ROWS = rows_of(MountSpec, "mount")  # field -> the schema row that checks it


HOST_ROWS = {**{schema.row(name).spec_field: name for name in schema.HOST_KNOBS},
             "time_scale": "time_scale"}
ETH_HEADER = 14  # what a qdisc counts of a frame besides its IP packet


@dataclass(frozen=True)
class Access:
    """What one worker's access link is given, in real time (dilated: rates / k), per
    direction: htb's rate (the worker's share of its host's NIC and of the server) and
    fq's per-flow maxrate (one NFS connection), both in Mbit/s on the wire (inf: none);
    and fq's room, in packets per flow, for every byte TCP may have in flight."""

    read_rate_mbit: float
    read_flow_mbit: float
    write_rate_mbit: float
    write_flow_mbit: float
    flow_limit_pkts: int

    @property
    def unlimited(self) -> bool:
        """Whether nothing on this access link needs shaping (no qdisc at all)."""
        return math.isinf(min(self.read_rate_mbit, self.read_flow_mbit,
                              self.write_rate_mbit, self.write_flow_mbit))


@dataclass(frozen=True)
class HostSpec:
    """The end hosts' limits a point assumes (a host profile, docs/hosts.md): one GPU
    host's NFS client and storage NIC, and the storage server. Units in the names: data
    rates (file data, what fio reports) for connections and the server, line rates for
    the NIC; math.inf where nothing limits.

        gpus                 GPU workers per host: they share its NIC and, mounting one
                             server address, its NFS client's connections (nconnect)
        nic_read/write_mbit  the host's storage NIC line rate in and out
        conn_*_mbit          file data one NFS connection moves at most, by transport
                             (TCP: conn_*, RDMA: rdma_conn_*) and direction
        server_conn_mbit     the server's most per connection (both directions)
        server_total_mbit    the server's most to every worker together
        time_scale           time dilation k: the emulator's rates are these / k
    """

    gpus: int = schema.default("host_gpus")
    nic_read_mbit: float = schema.default("host_nic_read_mbit")
    nic_write_mbit: float = schema.default("host_nic_write_mbit")
    conn_read_mbit: float = schema.default("conn_read_mbit")
    conn_write_mbit: float = schema.default("conn_write_mbit")
    rdma_conn_read_mbit: float = schema.default("rdma_conn_read_mbit")
    rdma_conn_write_mbit: float = schema.default("rdma_conn_write_mbit")
    server_conn_mbit: float = schema.default("server_conn_mbit")
    server_total_mbit: float = schema.default("server_total_mbit")
    time_scale: float = 1.0

    def __post_init__(self) -> None:
        validate(self, HOST_ROWS)
        if self.time_scale == "auto":
            raise SpecError("time_scale: a host needs a number (\"auto\" is resolved "
                            "before a host is built)")

    @classmethod
    def from_profile(cls, name: str) -> HostSpec:
        """A preset profile's spec (schema.HOST_PROFILES); SpecError for another name."""
        if name not in schema.HOST_PROFILES:
            raise SpecError(f"host profile {name!r}: known presets: "
                            f"{', '.join(schema.HOST_PROFILES)}")
        values = schema.HOST_PROFILES[name].values
        return cls(**{schema.row(k).spec_field: v for k, v in values.items()})

    def client_conn_mbit(self, transport: str, write: bool) -> float:
        """The client's most over one connection of `transport` in one direction."""
        if transport == "rdma":
            return self.rdma_conn_write_mbit if write else self.rdma_conn_read_mbit
        return self.conn_write_mbit if write else self.conn_read_mbit

    def conn_mbit(self, transport: str, write: bool) -> float:
        """The most one connection moves: the client's or the server's, the smaller."""
        return min(self.client_conn_mbit(transport, write), self.server_conn_mbit)

    def nic_mbit(self, write: bool) -> float:
        """The host's NIC line rate in the direction the data goes."""
        return self.nic_write_mbit if write else self.nic_read_mbit

    def access(self, transport: str, on_host: int, on_server: int, payload: float,
               line_mbit: float, buffer_bytes: int, mtu: int) -> Access:
        """What a worker's access link is given (see Access): the worker's share of its
        host's NIC (one of `on_host` workers) and of the server (one of `on_server`),
        its connections' each at conn_mbit / on_host (its host's connections are shared
        by the workers on it), data rates on the wire as payload (the frames' payload
        share) carries them; a limit no lower than the worker's line (line_mbit, as
        emulated) cannot bind and is left out; then every rate / k."""
        def real(mbit: float) -> float:
            return mbit / self.time_scale if mbit < line_mbit else math.inf

        def rate(write: bool) -> float:
            return real(min(self.nic_mbit(write) / on_host,
                            self.server_total_mbit / on_server / payload))

        def flow(write: bool) -> float:
            return real(self.conn_mbit(transport, write) / on_host / payload)
        mss = mtu - TCP_HEADER_OVERHEAD
        return Access(rate(False), flow(False), rate(True), flow(True),
                      math.ceil(buffer_bytes / mss) + QUEUED_WINDOWS)


ONCE = schema.default("event_count")  # an event that does not repeat
DOWN_LOSS_PCT = 100.0  # a span down: netem drops every packet (what is already past the
#                        cut, inside the delay line, still arrives, as light in the fibre)


@dataclass(frozen=True)
class EventSpec:
    """Fibre events within one point: what happens to every fibre span, when, how often.

    Attributes (emulated seconds; time_scale k stretches them to real time, as every
    delay of a dilated point):
        kind: "none", "down" (every packet dropped), "reroute" (a longer path: extra_km
            of fibre and/or extra_delay_ms of equipment, then back), "loss" (a loss
            burst at loss_pct, then back), "rate" (the line rate at rate_mbit, then back).
        at_s: the first event's start, after the start of the measured window.
        duration_s: how long each event lasts.
        every_s, count: count events, one every every_s seconds (count 1: once).
        direction: "both", "to_workers" (the direction data is read in) or "to_storage".
        tail_s: the measured window runs at least this long after the last event ends.
        time_scale: time dilation k.
    """

    kind: str = schema.default("event")
    at_s: float = schema.default("event_at_s")
    duration_s: float = schema.default("event_duration_s")
    every_s: float = schema.default("event_every_s")
    count: int = schema.default("event_count")
    direction: str = schema.default("event_direction")
    extra_km: float = schema.default("event_extra_km")
    extra_delay_ms: float = schema.default("event_extra_delay_ms")
    loss_pct: float = schema.default("event_loss_pct")
    rate_mbit: float | None = None
    tail_s: float = schema.default("event_tail_s")
    time_scale: float = schema.default("time_scale")

    def __post_init__(self) -> None:
        for field, name in EVENT_ROWS.items():  # messages name the knob (event_at_s)
            object.__setattr__(self, field, schema.check(name, getattr(self, field), name))
        problem = self._problem()
        if problem:
            raise SpecError(problem)

    def _problem(self) -> str | None:
        """What makes the fields disagree with one another (None: nothing)."""
        if self.kind == "reroute" and self.extra_km == 0 and self.extra_delay_ms == 0:
            return "event = \"reroute\" needs event_extra_km or event_extra_delay_ms > 0"
        if self.kind == "loss" and self.loss_pct == 0:
            return "event = \"loss\" needs event_loss_pct > 0"
        if self.kind == "rate" and self.rate_mbit is None:
            return "event = \"rate\" needs event_rate (the line rate during the event)"
        if (self.count > ONCE) != (self.every_s > 0):
            return (f"event_count = {self.count} and event_every_s = {self.every_s:g}: a "
                    "repeating event needs both (count >= 2, every_s > 0), a single one neither")
        if self.count > ONCE and self.every_s <= self.duration_s:
            return (f"event_every_s = {self.every_s:g} must exceed event_duration_s = "
                    f"{self.duration_s:g} (the events would overlap)")
        return None

    @property
    def active(self) -> bool:
        """Whether the point has any event."""
        return self.kind != "none"

    def times(self) -> list[tuple[float, float]]:
        """(start, end) of each event, emulated seconds into the measured window."""
        if not self.active:
            return []
        return [(self.at_s + i * self.every_s, self.at_s + i * self.every_s + self.duration_s)
                for i in range(self.count)]

    def real_times(self) -> list[tuple[float, float]]:
        """(start, end) of each event in real seconds of the run (x time_scale)."""
        return [(a * self.time_scale, b * self.time_scale) for a, b in self.times()]

    def window_s(self) -> float:
        """The shortest measured window (emulated seconds) that holds every event and
        tail_s after the last one (0 without events)."""
        times = self.times()
        return times[-1][1] + self.tail_s if times else 0.0

    def takes(self, forward_to_workers: bool) -> bool:
        """Whether a direction of a span (the one towards the workers, or the other) takes
        the event."""
        if not self.active:
            return False
        return self.direction == "both" or \
            (self.direction == "to_workers") == forward_to_workers

    def during(self, fibre: FibreSpec, forward: bool) -> Direction:
        """What tc gives one direction of `fibre` while the event lasts (real time)."""
        if self.kind == "reroute":
            return fibre.replace(distance_km=fibre.distance_km + self.extra_km,
                                 extra_delay_ms=fibre.extra_delay_ms + self.extra_delay_ms
                                 ).direction(forward)
        if self.kind == "rate":
            assert self.rate_mbit is not None
            return fibre.replace(rate_mbit=self.rate_mbit,
                                 rate_reverse_mbit=self.rate_mbit).direction(forward)
        d = fibre.direction(forward)
        loss = DOWN_LOSS_PCT if self.kind == "down" else self.loss_pct
        return dataclasses.replace(d, loss_pct=loss)

    def describe(self) -> str:
        """The event in words: "down 1 s at 2 s", "reroute +500 km 10 s at 2 s, x3 every
        30 s (to_workers)"."""
        what = {"down": "down", "loss": f"loss {self.loss_pct:g} %",
                "reroute": "reroute" + (f" +{self.extra_km:g} km" if self.extra_km else "")
                + (f" +{self.extra_delay_ms:g} ms" if self.extra_delay_ms else ""),
                "rate": f"rate {format_rate(self.rate_mbit or 1)}", "none": "none"}[self.kind]
        text = f"{what} {self.duration_s:g} s at {self.at_s:g} s"
        if self.count > ONCE:
            text += f", x{self.count} every {self.every_s:g} s"
        return text + ("" if self.direction == "both" else f" ({self.direction})")


EVENT_ROWS = rows_of(EventSpec, "event")  # field -> the schema row that checks it
