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

from testbed.errors import SpecError

SPEED_OF_LIGHT_KM_S = 299_792.458
DEFAULT_GROUP_INDEX = 1.469  # -> 4.90 us/km
MAX_RATE_MBIT = 100_000.0  # 100 Gbit/s, the APN line rate
IFNAMSIZ = 15  # usable characters of a Linux interface name
TCP_HEADER_OVERHEAD = 52  # IPv4 (20) + TCP with timestamps (32): MSS = MTU - 52
LIMIT_FACTOR = 1.5  # netem queue >= 1.5 x BDP (in packets) ...
QUEUED_WINDOWS = 16  # ... + this many TCP buffers (nconnect's maximum) waiting for the rate
MAX_TIME_SCALE = 1000.0
MIN_LIMIT_PKTS = 1000  # never below netem's own default

_RATE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(bit|bps)?\s*$",
                      re.IGNORECASE | re.ASCII)
INT_TEXT_RE = re.compile(r"[+-]?[0-9]+\Z", re.ASCII)
FLOAT_TEXT_RE = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?\Z", re.ASCII)
TRUE_TEXT = ("true", "yes", "on", "1")
FALSE_TEXT = ("false", "no", "off", "0")
_RATE_MULT = {"": 1.0, "k": 1e-3, "m": 1.0, "g": 1e3, "t": 1e6}
_NAME_RE = re.compile(r"^[a-z][a-z0-9]*$")


def parse_rate(value: str | float | int, field: str = "rate") -> float:
    """Return a rate in Mbit/s from a number (already Mbit/s) or text such as "10gbit".

    Raises SpecError naming `field` when the value is not a positive rate.
    """
    if isinstance(value, bool):
        raise SpecError(f"{field}: expected a rate such as 10gbit, got {value!r}")
    if isinstance(value, (int, float)):
        mbit = float(value)
    else:
        match = _RATE_RE.match(str(value))
        if not match or (match.group(3) or "").lower() == "bps":
            raise SpecError(f"{field}: expected a rate such as 100mbit or 10gbit, got {value!r}")
        mbit = float(match.group(1)) * _RATE_MULT[match.group(2).lower()]
    if not math.isfinite(mbit) or mbit <= 0:
        raise SpecError(f"{field}: rate must be > 0, got {value!r}")
    return mbit


def parse_text(text: str, kind: type) -> Any:
    """Command-line text -> int, float or bool, strictly: ASCII digits only (Python's
    int() and float() would take full-width or other Unicode digits), finite numbers.

    Raises ValueError naming what was expected."""
    t = text.strip()
    if kind is bool:
        if t.lower() in TRUE_TEXT + FALSE_TEXT:
            return t.lower() in TRUE_TEXT
        raise ValueError("expected true or false")
    if kind is int:
        if INT_TEXT_RE.match(t):
            return int(t)
        raise ValueError("expected an integer")
    if FLOAT_TEXT_RE.match(t) and math.isfinite(float(t)):
        return float(t)
    raise ValueError("expected a finite number")


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


def _number(value: Any, field: str, *, minimum: float | None = 0.0,
            maximum: float | None = None, strict_min: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise SpecError(f"{field}: expected a number, got {value!r}") from None
    value = float(value)
    if not math.isfinite(value):
        raise SpecError(f"{field}: expected a finite number, got {value!r}")
    if minimum is not None and (value < minimum or (strict_min and value == minimum)):
        op = ">" if strict_min else ">="
        raise SpecError(f"{field}: must be {op} {minimum:g}, got {value:g}")
    if maximum is not None and value > maximum:
        raise SpecError(f"{field}: must be <= {maximum:g}, got {value:g}")
    return value


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
U64 = 2**64


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

    distance_km: float = 0.0
    rate_mbit: float = 1000.0
    loss_pct: float = 0.0
    jitter_ms: float = 0.0
    extra_delay_ms: float = 0.0
    group_index: float = DEFAULT_GROUP_INDEX
    mtu: int = 1500
    rate_reverse_mbit: float | None = None
    loss_reverse_pct: float | None = None
    time_scale: float = 1.0
    loss_seed: int | None = None

    def __post_init__(self) -> None:
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731 (frozen dataclass)
        set_("distance_km", _number(self.distance_km, "distance_km", maximum=40_075.0))
        set_("rate_mbit", _rate(self.rate_mbit, "rate_mbit"))
        set_("loss_pct", _number(self.loss_pct, "loss_pct", maximum=100.0))
        set_("jitter_ms", _number(self.jitter_ms, "jitter_ms", maximum=10_000.0))
        set_("extra_delay_ms", _number(self.extra_delay_ms, "extra_delay_ms", maximum=10_000.0))
        set_("group_index", _number(self.group_index, "group_index", minimum=1.0, maximum=3.0))
        mtu = _number(self.mtu, "mtu", minimum=576, maximum=65_535)
        if not mtu.is_integer():
            raise SpecError(f"mtu: must be a whole number of bytes, got {self.mtu!r}")
        set_("mtu", int(mtu))
        if self.rate_reverse_mbit is not None:
            set_("rate_reverse_mbit", _rate(self.rate_reverse_mbit, "rate_reverse_mbit"))
        if self.loss_reverse_pct is not None:
            set_("loss_reverse_pct",
                 _number(self.loss_reverse_pct, "loss_reverse_pct", maximum=100.0))
        set_("time_scale", _number(self.time_scale, "time_scale", minimum=1.0,
                                   maximum=MAX_TIME_SCALE))
        if self.loss_seed is not None and (
                isinstance(self.loss_seed, bool) or not isinstance(self.loss_seed, int)
                or not 0 <= self.loss_seed < U64):
            raise SpecError(f"loss_seed: expected an integer in [0, 2**64), "
                            f"got {self.loss_seed!r}")
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
        return max(6 * 1024 * 1024, 2 * self.bdp_bytes(max(self.rate_mbit,
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


def _rate(value: Any, field: str) -> float:
    mbit = parse_rate(value, field)
    if mbit > MAX_RATE_MBIT:
        raise SpecError(f"{field}: at most {MAX_RATE_MBIT:g} Mbit/s (100 Gbit/s), got {mbit:g}")
    return mbit


NFS_VERSIONS = ("3", "4.1", "4.2")
MAX_TIMEO_DS = 6000  # the kernel caps an NFS/TCP timeout at 600 s


@dataclass(frozen=True)
class NfsServerSpec:
    """The storage site's kernel nfsd.

    versions: NFS versions served ("3", "4.1", "4.2"); threads: nfsd threads;
    grace_s/lease_s: NFSv4 grace and lease times (short, so a run does not wait 90 s).
    """

    versions: tuple[str, ...] = ("4.1", "4.2")
    threads: int = 8
    grace_s: int = 10
    lease_s: int = 10

    def __post_init__(self) -> None:
        versions = tuple(str(v) for v in (self.versions if not isinstance(self.versions, str)
                                          else (self.versions,)))
        for v in versions:
            if v not in NFS_VERSIONS:
                raise SpecError(f"versions: unknown NFS version {v!r}; known: "
                                f"{', '.join(NFS_VERSIONS)}")
        if not versions:
            raise SpecError("versions: at least one NFS version is needed")
        object.__setattr__(self, "versions", versions)
        if not isinstance(self.threads, int) or not 1 <= self.threads <= 256:
            raise SpecError(f"threads: must be 1..256, got {self.threads!r}")
        for name in ("grace_s", "lease_s"):
            if not isinstance(getattr(self, name), int) or not 10 <= getattr(self, name) <= 3600:
                raise SpecError(f"{name}: must be 10..3600 s, got {getattr(self, name)!r}")


MOUNT_TRANSPORTS = ("tcp", "rdma")
# TCP congestion controls a point may ask for (every kernel has both built in)
CONGESTION_CONTROLS = ("cubic", "reno")
NFS_RDMA_PORT = 20049  # IANA's NFS over RDMA port (RFC 5666)


@dataclass(frozen=True)
class MountSpec:
    """How a GPU worker mounts the export (kernel NFS client options).

    transport: "tcp" or "rdma" (NFS over RDMA: proto=rdma, port 20049, RFC 5666; needs an
    RDMA device in the worker's and the server's namespaces, services.rdma);
    read_ahead_kb: written to the mount's bdi (None keeps the kernel default, 128 KiB);
    actimeo_s: attribute cache time (None = kernel default); nocto: no close-to-open;
    hard/soft with timeo_ds (tenths of a second) and retrans; fsc: read through the
    GPU site's local FS-Cache (needs a running services.fscache.CacheFiles).
    """

    vers: str = "4.2"
    rsize: int = 1_048_576
    wsize: int = 1_048_576
    nconnect: int = 1
    read_ahead_kb: int | None = None
    actimeo_s: int | None = None
    nocto: bool = False
    hard: bool = True
    timeo_ds: int = 600
    retrans: int = 2
    fsc: bool = False
    transport: str = "tcp"

    def __post_init__(self) -> None:
        object.__setattr__(self, "vers", str(self.vers))
        if self.transport not in MOUNT_TRANSPORTS:
            raise SpecError(f"transport: {self.transport!r} is not one of "
                            f"{', '.join(MOUNT_TRANSPORTS)}")
        if self.vers not in NFS_VERSIONS:
            raise SpecError(f"vers: unknown NFS version {self.vers!r}; known: "
                            f"{', '.join(NFS_VERSIONS)}")
        for name in ("rsize", "wsize"):
            v = getattr(self, name)
            if not isinstance(v, int) or not 4096 <= v <= 1_048_576 or v & (v - 1):
                raise SpecError(f"{name}: a power of two from 4096 to 1048576, got {v!r}")
        if not isinstance(self.nconnect, int) or not 1 <= self.nconnect <= 16:
            raise SpecError(f"nconnect: must be 1..16, got {self.nconnect!r}")
        if self.read_ahead_kb is not None and (not isinstance(self.read_ahead_kb, int)
                                               or not 0 <= self.read_ahead_kb <= 1_048_576):
            raise SpecError(f"read_ahead_kb: must be 0..1048576, got {self.read_ahead_kb!r}")
        if self.actimeo_s is not None and (not isinstance(self.actimeo_s, int)
                                           or self.actimeo_s < 0):
            raise SpecError(f"actimeo_s: must be >= 0, got {self.actimeo_s!r}")
        if not isinstance(self.timeo_ds, int) or not 1 <= self.timeo_ds <= MAX_TIMEO_DS:
            raise SpecError(f"timeo_ds: must be 1..6000 tenths of a second, got {self.timeo_ds!r}")
        if not isinstance(self.retrans, int) or not 0 <= self.retrans <= 20:
            raise SpecError(f"retrans: must be 0..20, got {self.retrans!r}")
        for name in ("nocto", "hard", "fsc"):
            if not isinstance(getattr(self, name), bool):
                raise SpecError(f"{name}: must be true or false, got {getattr(self, name)!r}")

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
        if self.nconnect > 1:
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
