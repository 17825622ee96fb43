"""The knob schema: every setting a user can give, declared once.

One row of DIMENSIONS per knob says: its name (in experiment files, -p KEY=VALUE and
`testbed knobs`), its type and unit, the values it allows, its default, which part of a
point it sets (fibre, topology, server, dataset, mount, loader, window, data path, ...)
and which spec field, whether it can change on a running testbed (live) or needs a fresh
one, its value in the co-located baseline, the TOML table where a plain value may also be
given, its CSV column and its plot label. The specs (testbed.spec, the workload's specs)
validate their fields against these rows and take their defaults from them; experiment
parsing, the CLI, the CSV columns and the plot axes read the same rows. Fields the
library has but experiments do not sweep (a fibre's group index, netem's seed, nfsd's
grace time, ...) are rows too, with `exposed = False`. FILE_SETTINGS holds the
experiment file's own settings (repetitions, au_bar, [search] and [capture] keys).

Values are parsed strictly: from TOML or the Python API they must have the right type
(an integer knob takes 4, not "4" or 4.0; numbers are finite); from text (-p KEY=VALUE)
they must be ASCII numbers (full-width or other Unicode digits are refused), true/false,
or a rate like 10gbit. Choices that name an upper layer's registry (workload presets,
data paths) are declared here by the registry's name and bound by that layer
(Dimension.bind), so this module imports nothing above the errors.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import reprlib
from dataclasses import dataclass
from typing import Any, Callable

from testbed.errors import SpecError

TARGETS = ("fibre", "topology", "server", "dataset", "mount", "loader", "window",
           "data_path", "run", "preset", "host", "host_profile", "event")
NFS_VERSIONS = ("3", "4.1", "4.2")
MOUNT_TRANSPORTS = ("tcp", "rdma")
CONGESTION_CONTROLS = ("cubic", "reno")  # every kernel has both built in
FORMATS = ("raw", "npz", "record")
# fibre events within a point (testbed.spec.EventSpec): a span down, a reroute (longer
# path), a loss burst, a rate change; in one direction of the span or both
EVENT_KINDS = ("none", "down", "reroute", "loss", "rate")
EVENT_DIRECTIONS = ("both", "to_workers", "to_storage")
READER_KINDS = ("thread", "process")
ACCESS = ("file", "record")
NO_PRESET = "custom"  # the `workload` knob's value for "no preset: the knobs as given"
MiB_KIB = 1024
U64 = 2**64

_RATE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(bit|bps)?\s*$",
                      re.IGNORECASE | re.ASCII)
INT_TEXT_RE = re.compile(r"[+-]?[0-9]+\Z", re.ASCII)
FLOAT_TEXT_RE = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?\Z", re.ASCII)
TRUE_TEXT = ("true", "yes", "on", "1")
FALSE_TEXT = ("false", "no", "off", "0")
_RATE_MULT = {"": 1.0, "k": 1e-3, "m": 1.0, "g": 1e3, "t": 1e6}


def rate_mbit(value: str | float | int) -> float:
    """A rate's number in Mbit/s from a number (already Mbit/s) or text such as "10gbit",
    whatever its size; ValueError when it is not written as a rate."""
    if isinstance(value, bool):
        raise ValueError("expected a rate such as 100mbit or 10gbit")
    if isinstance(value, (int, float)):
        return float(value)
    match = _RATE_RE.match(str(value))
    if not match or (match.group(3) or "").lower() == "bps":
        raise ValueError("expected a rate such as 100mbit or 10gbit")
    return float(match.group(1)) * _RATE_MULT[match.group(2).lower()]


def parse_rate(value: str | float | int, field: str = "rate") -> float:
    """Return a rate in Mbit/s from a number (already Mbit/s) or text such as "10gbit".

    Raises SpecError naming `field` when the value is not a positive rate."""
    try:
        mbit = rate_mbit(value)
    except ValueError as exc:
        raise SpecError(f"{field}: {exc}, got {value!r}") from None
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


def number(x: float) -> str:
    """A bound or value in messages: 1048576, 0.5, 40075 (no exponent, no trailing .0)."""
    if isinstance(x, int):
        return str(x)
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _bounded_repr(limit: int) -> reprlib.Repr:
    """A repr that stops early: a few items of each container, a few levels deep, long
    text and numbers cut, so that a YAML alias bomb (a billion items by reference) or a
    string of megabytes costs no more than a short value. Values that fit are written
    as repr writes them (a table's keys sorted)."""
    r = reprlib.Repr()
    r.maxlevel, r.maxlist, r.maxtuple, r.maxdict, r.maxset = 4, 12, 12, 12, 12
    r.maxstring = r.maxlong = r.maxother = 4 * limit  # longer than shown: cut at the end
    return r


def show(value: Any, limit: int = 60) -> str:
    """A value as it appears in an error message: repr, one line, shortened (whatever its
    size: see _bounded_repr)."""
    text = _bounded_repr(limit).repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _int(value: Any, text: bool) -> int:
    """An integer: from -p text, or a Python/TOML int (never a bool)."""
    if text and isinstance(value, str):
        return int(parse_text(value, int))
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError("expected an integer")


def _float(value: Any, text: bool) -> float:
    """A finite number: from -p text, or a Python/TOML int or float (never a bool)."""
    if text and isinstance(value, str):
        return float(parse_text(value, float))
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("expected a number")
    try:
        out = float(value)  # an int past the float range raises here, not a float
    except OverflowError:
        raise ValueError("expected a finite number") from None
    if not math.isfinite(out):
        raise ValueError("expected a finite number")
    return out


def _with_range(said: str, allowed: str) -> str:
    """A parser's complaint with what the knob allows, said once: "expected an integer"
    and "an integer 1 .. 16" make "expected an integer 1 .. 16"."""
    kind = said.removeprefix("expected ")
    if kind != said and allowed.startswith(kind):
        return f"expected {allowed}"
    return f"{said}: {allowed}"


def _bool(value: Any, text: bool) -> bool:
    """true or false (from -p text also yes/no, on/off, 1/0)."""
    if isinstance(value, bool):
        return value
    if text and isinstance(value, str):
        return bool(parse_text(value, bool))
    raise ValueError("expected true or false")


def _rate(value: Any, text: bool) -> float:
    """A rate in Mbit/s: a number, or ASCII text such as 100mbit or 10gbit (its size is
    the row's range to judge)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError("expected a rate such as 100mbit or 10gbit")
    if isinstance(value, str) and not value.isascii():
        raise ValueError("expected a rate such as 100mbit or 10gbit")
    mbit = rate_mbit(value)
    if not math.isfinite(mbit):
        raise ValueError("expected a finite rate")
    return mbit


def _auto(value: Any, text: bool) -> float | str:
    """A number, or "auto" (decided by the testbed: time_scale by a calibration at run
    start, tcp_buffer_mib from the path's bandwidth-delay product)."""
    if isinstance(value, str) and value.strip() == "auto":
        return "auto"
    return _float(value, text)


NO_LIMIT = "none"  # a limit knob's value for "nothing limits it" (math.inf)


def _limit(value: Any, text: bool) -> float:
    """A rate in Mbit/s that caps something (a host's connection, NIC, server), or
    "none" (math.inf, as the Python API and the presets write it): no cap."""
    if (isinstance(value, str) and value.strip() == NO_LIMIT) or \
            (isinstance(value, float) and value == math.inf):
        return math.inf
    try:
        return _rate(value, text)
    except ValueError:
        raise ValueError("expected a rate in Mbit/s or text like 10gbit") from None


def _choice(value: Any, text: bool) -> str:
    """A name (checked against the knob's choices afterwards)."""
    if not isinstance(value, str):
        raise ValueError("expected a name")
    return value.strip() if text else value


def _str_list(value: Any, text: bool) -> tuple[str, ...]:
    """A non-empty list of names (from -p text: comma-separated)."""
    if text and isinstance(value, str):
        value = [v for v in value.split(",")]
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ValueError("expected a non-empty list of names")
    return tuple(v.strip() for v in value)


PARSERS: dict[str, Callable[[Any, bool], Any]] = {
    "int": _int, "float": _float, "bool": _bool, "rate": _rate, "choice": _choice,
    "str_list": _str_list, "auto": _auto, "limit": _limit,
}
KIND_WORDS = {"int": "an integer", "float": "a number", "auto": "\"auto\" or a number",
              "rate": "a rate in Mbit/s or text like 10gbit",
              "limit": "a rate in Mbit/s or text like 10gbit"}


@dataclass(frozen=True)
class Dimension:
    """One knob (see the module docstring)."""

    name: str
    kind: str                      # a key of PARSERS
    unit: str                      # "km", "ms", "%", "Mbit/s", "KiB", "B", "" (a count)
    target: str                    # a member of TARGETS: which part of a point it sets
    help: str                      # one line for --check and the docs
    lo: float | None = None        # inclusive bounds for numbers (rate: lo exclusive)
    hi: float | None = None
    choices: tuple[str, ...] = ()
    registry: str = ""             # choices bound later from this registry (Dimension.bind)
    pow2: bool = False             # integers that must be a power of two
    default: Any = None            # its value when nothing sets it
    live: bool = True              # False: a new value needs a fresh testbed/server/dataset
    baseline: Any = None           # its value in the co-located baseline (None: unchanged)
    per_link: bool = False         # fibre knobs: addressable per named link
    section: str | None = None     # the TOML table a plain value may be given in
    key: str | None = None         # its key in that table (default: name)
    field: str | None = None       # the spec field it sets (default: name)
    column: str | None = None      # the CSV column (default: name)
    label: str | None = None       # the plot axis label (default: help + unit)
    exposed: bool = True           # False: a spec field that experiments do not set
    optional: bool = False         # the spec field may be None (kernel default)
    source: str = ""               # where its default comes from (`testbed knobs`)

    @property
    def spec_field(self) -> str:
        """The field of the target's spec this knob sets."""
        return self.field or self.name

    @property
    def csv_column(self) -> str:
        """The column of results.csv that holds this knob's value."""
        return self.column or self.name

    @property
    def section_key(self) -> str:
        """Its key inside its own TOML table ([dataset] files, [server] threads, ...)."""
        return self.key or self.name

    @property
    def axis_label(self) -> str:
        """A plot axis label in words, with the unit."""
        if self.label:
            return self.label
        return f"{self.help} ({self.unit})" if self.unit else self.help

    def allowed(self) -> tuple[str, ...]:
        """The names a choice (or list of names) may take (empty: not bound yet)."""
        return self.choices

    def bind(self, registries: dict[str, tuple[str, ...]]) -> Dimension:
        """This row with its registry's names as choices (itself when it names none)."""
        if not self.registry:
            return self
        return dataclasses.replace(self, choices=tuple(registries[self.registry]))

    def describe_range(self) -> str:
        """What this knob allows, in words (for error messages and --check)."""
        if self.kind in ("choice", "str_list"):
            names = self.allowed()
            if names:
                return "one of " + ", ".join(names)
            return f"a {self.registry} name" if self.registry else "a name"
        if self.kind == "bool":
            return "true or false"
        hi = number(self.hi) if self.hi is not None else "any"
        span = f"{number(self.lo or 0)} .. {hi}"
        extra = ", a power of two" if self.pow2 else \
            f", or \"{NO_LIMIT}\" (no limit)" if self.kind == "limit" else ""
        return f"{KIND_WORDS[self.kind]} {span}{' ' + self.unit if self.unit else ''}{extra}"

    def parse(self, value: Any, text: bool = False) -> Any:
        """The canonical value of this knob from TOML (text=False) or -p text (text=True).

        Raises ValueError with what is allowed (the caller adds where and which key)."""
        try:
            out = PARSERS[self.kind](value, text)
        except ValueError as exc:
            raise ValueError(_with_range(str(exc), self.describe_range())) from None
        self._check_range(out)
        return out

    def check(self, value: Any, field: str | None = None) -> Any:
        """A spec field's value checked against this row (the Python API's path): the
        canonical value, or SpecError "FIELD: must be ALLOWED, got VALUE". Values are typed
        (text is parsed only by the callers that read text, and a rate may be "10gbit");
        whole floats are taken for integer knobs (mtu = 1500.0); None where optional."""
        if value is None and self.optional:
            return None
        given = value
        if self.kind == "int" and isinstance(value, float) and value.is_integer():
            value = int(value)
        try:
            return self.parse(value)
        except ValueError:
            raise SpecError(f"{field or self.spec_field}: must be {self.describe_range()}, "
                            f"got {show(given)}") from None

    def _check_range(self, value: Any) -> None:
        """ValueError when a parsed value is outside what the row allows."""
        if self.kind in ("choice", "str_list"):
            self._check_names(value)
            return
        if self.kind == "bool" or value == "auto" or (self.kind == "limit" and
                                                        value == math.inf):
            return
        too_low = self.lo is not None and value < self.lo
        if too_low or (self.hi is not None and value > self.hi):
            raise ValueError(f"out of range: {self.describe_range()}")
        if self.pow2 and value & (value - 1):
            raise ValueError(f"not a power of two: {self.describe_range()}")

    def _check_names(self, value: Any) -> None:
        """ValueError naming the first name that is not a choice (with a "did you mean")."""
        allowed = self.allowed()
        items = value if isinstance(value, tuple) else (value,)
        bad = [v for v in items if allowed and v not in allowed]
        if bad:
            hint = difflib.get_close_matches(bad[0], allowed, n=1)
            raise ValueError(f"unknown {bad[0]!r}" + (f" (did you mean {hint[0]!r}?)"
                             if hint else "") + f": {self.describe_range()}")


D = Dimension
DIMENSIONS: tuple[Dimension, ...] = (
    # fibre spans: per link, set live on the running testbed
    D("distance_km", "float", "km", "fibre", "fibre distance", 0, 40_075, default=0.0,
      per_link=True, baseline=0.0),
    D("loss_pct", "float", "%", "fibre", "random loss per packet", 0, 50, default=0.0,
      per_link=True, baseline=0.0),
    D("jitter_ms", "float", "ms", "fibre", "delay jitter", 0, 1000, default=0.0,
      per_link=True, baseline=0.0),
    D("extra_delay_ms", "float", "ms", "fibre", "equipment delay (one way)", 0, 1000,
      default=0.0, per_link=True, baseline=0.0),
    # below 1 Mbit/s one 1 MiB NFS READ takes more than 8 s: not a line to train over
    D("rate", "rate", "Mbit/s", "fibre", "line rate", 1, 100_000, default=1000.0,
      per_link=True, field="rate_mbit", column="rate_mbit"),
    D("rate_reverse", "rate", "Mbit/s", "fibre", "line rate B->A (asymmetric)", 1, 100_000,
      field="rate_reverse_mbit", exposed=False, optional=True),
    D("loss_reverse_pct", "float", "%", "fibre", "random loss per packet B->A", 0, 50,
      exposed=False, optional=True),
    D("group_index", "float", "", "fibre", "group refractive index", 1, 3, default=1.469,
      exposed=False),
    D("loss_seed", "int", "", "fibre", "netem's loss and jitter seed", 0, U64 - 1,
      exposed=False, optional=True),
    # the topology: a fresh testbed per value
    D("workers", "int", "", "topology", "GPU workers per site", 1, 1024, live=False),
    # the cluster topology's: its servers are GPU hosts of host_gpus workers each; its
    # fibres set which links exist, so one value per experiment ([fixed] or -p)
    D("servers", "int", "", "topology", "GPU servers (topology cluster)", 1, 1024,
      default=1, live=False),
    D("fibres", "int", "", "topology", "parallel fibre spans (topology cluster)", 1, 64,
      default=1, live=False),
    D("mtu", "int", "B", "topology", "MTU of every link", 576, 9000, default=1500,
      live=False),
    # the storage site's nfsd
    D("nfsd_threads", "int", "", "server", "nfsd threads", 1, 256, default=8, live=False,
      section="server", key="threads", field="threads"),
    D("nfsd_versions", "str_list", "", "server", "NFS versions served",
      choices=NFS_VERSIONS, default=("4.1", "4.2"), live=False, section="server",
      key="versions", field="versions"),
    D("grace_s", "int", "s", "server", "NFSv4 grace time", 10, 3600, default=10,
      exposed=False),
    D("lease_s", "int", "s", "server", "NFSv4 lease time", 10, 3600, default=10,
      exposed=False),
    # the training set on the storage site
    D("files", "int", "", "dataset", "files in the training set", 1, 1_000_000, default=64,
      live=False, section="dataset"),
    D("file_kib", "int", "KiB", "dataset", "file size", 4, 4 * MiB_KIB * MiB_KIB,
      default=1024, live=False, section="dataset"),
    D("format", "choice", "", "dataset", "file format", choices=FORMATS, default="raw",
      live=False, section="dataset"),
    D("records_per_file", "int", "", "dataset", "records per record file", 1, 65_536,
      default=8, live=False, section="dataset"),
    D("dataset_seed", "int", "", "dataset", "content seed", 0, 2**31 - 1, default=7,
      field="seed", exposed=False),
    # each worker's NFS mount (also the fields of a [mounts.NAME] profile)
    D("mount", "choice", "", "mount", "mount profile ([mounts.NAME])", default="default"),
    D("vers", "choice", "", "mount", "NFS version", choices=NFS_VERSIONS, default="4.2",
      section="mounts"),
    D("rsize", "int", "B", "mount", "NFS read size", 4096, 1_048_576, pow2=True,
      default=1_048_576, section="mounts"),
    D("wsize", "int", "B", "mount", "NFS write size", 4096, 1_048_576, pow2=True,
      default=1_048_576, section="mounts"),
    D("nconnect", "int", "", "mount", "TCP connections per mount", 1, 16, default=1,
      section="mounts"),
    D("transport", "choice", "", "mount", "NFS transport (rdma: port 20049, soft-RoCE)",
      choices=MOUNT_TRANSPORTS, default="tcp", section="mounts"),
    D("read_ahead_kb", "int", "KiB", "mount", "read-ahead", 0, MiB_KIB * MiB_KIB,
      section="mounts", optional=True),
    # sunrpc's tcp_max_slot_table_entries while an NFSv3 mount is made (the kernel's
    # 65,536 never binds; NFSv4.1+ transports ignore it): READs in flight per connection
    D("rpc_slots", "int", "", "mount", "RPC slots per TCP connection (NFSv3)", 2, 65_536,
      section="mounts", optional=True),
    D("actimeo_s", "int", "s", "mount", "attribute cache time", 0, 86_400,
      section="mounts", optional=True),
    D("nocto", "bool", "", "mount", "no close-to-open consistency", default=False,
      section="mounts"),
    D("hard", "bool", "", "mount", "hard mount (retry forever)", default=True,
      section="mounts"),
    D("timeo_ds", "int", "ds", "mount", "RPC timeout", 1, 6000, default=600,
      section="mounts"),
    D("retrans", "int", "", "mount", "RPC retransmissions", 0, 20, default=2,
      section="mounts"),
    D("fsc", "bool", "", "mount", "read through FS-Cache (set by the data path)",
      default=False, exposed=False),
    # the GPU hosts' TCP buffers: "auto" = 2 x the path's BDP (at least 6 MiB), or a size
    # (6 = Linux's default tcp_rmem maximum); also a field of a [mounts.NAME] profile
    D("tcp_buffer_mib", "auto", "MiB", "host", "TCP buffer maximum", 0.0625, 4096,
      default="auto", section="mounts"),
    D("congestion", "choice", "", "host", "TCP congestion control on every host",
      choices=CONGESTION_CONTROLS, default="cubic"),
    D("delayed_ack", "bool", "", "host",
      "receivers delay ACKs (false: route quickack on every host)", default=True),
    D("loss_probe", "bool", "", "host",
      "senders send tail loss probes (false: tcp_early_retrans = 0)", default=True),
    D("slow_start_after_idle", "bool", "", "host",
      "an idle connection restarts from the initial window "
      "(net.ipv4.tcp_slow_start_after_idle; false keeps it)", default=True,
      source="Linux's default 1 (RFC 2861); wide-area data movers set 0"),
    # the end hosts (a host profile: [hosts.NAME] or a preset of HOST_PROFILES): what one
    # GPU host's NFS client, its storage NIC and the storage server move at most. Data
    # rates are the file data a connection or server moves (what fio reports); NIC rates
    # are line rates, of which the frames' payload share carries data (docs/hosts.md)
    D("host", "choice", "", "host_profile", "host profile ([hosts.NAME] or a preset)",
      default="gpu-server", source="a current GPU server: see host_* and conn_* below"),
    D("host_gpus", "int", "", "host_profile",
      "GPU workers per host (they share its NIC and its NFS connections)", 1, 1024,
      default=8, section="hosts", field="gpus",
      source="DGX H100: 8 GPUs a system (NVIDIA DGX BasePOD reference architecture)"),
    D("host_nic_read_mbit", "limit", "Mbit/s", "host_profile",
      "storage NIC line rate into a host (reads)", 1, 1_600_000, default=400_000.0,
      section="hosts", field="nic_read_mbit", source="DGX H100: two ConnectX-7 ports "
      "for storage at 200 GbE (NVIDIA HGX AI factory RA, NetApp AIPod); the cards take up "
      "to 400 Gb/s a port"),
    D("host_nic_write_mbit", "limit", "Mbit/s", "host_profile",
      "storage NIC line rate out of a host (writes)", 1, 1_600_000, default=400_000.0,
      section="hosts", field="nic_write_mbit", source="as host_nic_read_mbit (a NIC is "
      "symmetric; cloud VMs meter egress only: azure-* presets)"),
    D("conn_read_mbit", "limit", "Mbit/s", "host_profile",
      "file data one NFS TCP connection reads at most", 1, 1_600_000, default=12_500.0,
      section="hosts", source="VAST: 8 TCP connections per 100 Gbit/s; Azure NetApp Files "
      "D32s_v4: ~3,500 MiB/s with nconnect = 2.3 x one (12.8 Gbit/s); disagree: ANF "
      "E104id_v5 ~1,000 MiB/s (8.4), Pure 10 Gbit/s (docs/hosts.md)"),
    D("conn_write_mbit", "limit", "Mbit/s", "host_profile",
      "file data one NFS TCP connection writes at most", 1, 1_600_000, default=13_800.0,
      section="hosts", source="Azure NetApp Files E104id_v5: 6,600 MiB/s with nconnect = "
      "~4 x one (1,650 MiB/s); D32s_v4: ~1,500 MiB/s, its egress cap (docs/hosts.md)"),
    D("rdma_conn_read_mbit", "limit", "Mbit/s", "host_profile",
      "file data one NFS/RDMA connection reads at most", 1, 1_600_000, default=50_000.0,
      section="hosts", source="VAST: 2 RDMA connections per 100 Gbit/s (vs 8 over TCP); "
      "no published single-QP measurement (docs/hosts.md)"),
    D("rdma_conn_write_mbit", "limit", "Mbit/s", "host_profile",
      "file data one NFS/RDMA connection writes at most", 1, 1_600_000, default=50_000.0,
      section="hosts", source="as rdma_conn_read_mbit"),
    D("server_conn_mbit", "limit", "Mbit/s", "host_profile",
      "file data the server moves over one connection at most", 1, 1_600_000,
      default=math.inf, section="hosts", source="none by default: the published "
      "per-connection figures measure a client and a server together (conn_*); Pure "
      "FlashBlade: 10 Gbit/s per connection to one blade"),
    D("server_total_mbit", "limit", "Mbit/s", "host_profile",
      "file data the storage server moves at most, to all workers", 1, 1_600_000,
      default=200_000.0, section="hosts", source="NetApp AFF A900 (the PoC's array "
      "class): up to 300 GB/s from 12 HA pairs, 25 GB/s a pair (NetApp AIPod sizing)"),
    # the loader and the emulated accelerator
    D("workload", "choice", "", "preset", "workload preset", registry="presets",
      default=NO_PRESET, section="workload", key="preset"),
    D("workload_scale", "float", "", "preset", "preset scale (sample and compute)",
      1e-6, 1, default=1.0, section="workload", key="scale"),
    # a checkpoint job's training time between two checkpoints (unset: the DLIO config's
    # time_between_checkpoints, MLPerf's 5 s); in the job's full-size seconds
    D("checkpoint_interval_s", "float", "s", "run",
      "training time between checkpoints (default: the DLIO config's)", 0, 365 * 86_400,
      section="workload", optional=True,
      source="DLIO checkpoint.time_between_checkpoints (MLPerf Storage: 5 s)"),
    D("batch", "int", "", "loader", "samples per step", 1, 100_000, default=4,
      section="workload"),
    D("compute_ms", "float", "ms", "loader", "emulated compute per step", 0, 600_000,
      default=50.0, section="workload"),
    # the measured window (testbed.workload.window): emulated seconds
    D("measure_s", "float", "s", "window", "measured window (at least)", 0.5, 3600,
      default=5.0, section="workload"),
    D("measure_max_s", "float", "s", "window", "measured window (at most)", 0.5, 3600,
      default=20.0, section="workload"),
    D("measure_stall_s", "float", "s", "window",
      "measured window when the accelerator waits (at least)", 0, 3600, default=0.0,
      section="workload"),
    D("warmup_max_s", "float", "s", "window", "warm-up (at most)", 0.5, 3600,
      default=20.0, section="workload"),
    D("min_steps", "int", "", "window", "measured steps (at least)", 2, 100_000,
      default=20, section="workload"),
    D("au_ci_target", "float", "%", "window", "AU interval to reach (95 %, +-)", 0.05, 50,
      default=1.0, section="workload"),
    D("readers", "int", "", "loader", "reader threads or processes", 1, 256, default=4,
      section="workload"),
    D("prefetch", "int", "", "loader", "batches requested ahead", 1, 1024, default=2,
      section="workload"),
    D("shuffle", "bool", "", "loader", "shuffle samples each epoch", default=True,
      section="workload"),
    D("seed", "int", "", "loader", "shuffle seed", 0, 2**31 - 1, default=1,
      section="workload"),
    D("reader_kind", "choice", "", "loader", "reader kind", choices=READER_KINDS,
      default="thread", section="workload"),
    D("access", "choice", "", "loader", "sample = file or record", choices=ACCESS,
      default="file", section="workload"),
    D("read_kib", "int", "KiB", "loader", "application read size", 4, 65_536,
      default=1024, section="workload"),
    # time dilation: the whole scenario runs k times slower (rates / k, delays, compute and
    # timeouts x k); every figure is reported in emulated units
    D("time_scale", "auto", "", "run", "time dilation k", 1, 1000, default=1.0),
    # where training reads from
    D("data_path", "choice", "", "data_path", "data path", registry="data paths",
      default="direct"),
    D("cache_mib", "int", "MiB", "data_path", "FS-Cache size", 64, MiB_KIB * MiB_KIB,
      default=1024, section="cache", key="size_mib"),
    D("stage_parallel", "int", "", "data_path", "parallel staging copies", 1, 64,
      default=4, section="staging", key="parallel"),
    # scheduled fibre events within a point (testbed.spec.EventSpec): times in emulated
    # seconds from the start of the measured window (x k in real time); every fibre span
    # of the topology takes the event; the measured window lasts past the last one. The
    # co-located baseline has no event (the perfect fibre, at 0 km)
    D("event", "choice", "", "event", "fibre event during the measured window",
      choices=EVENT_KINDS, default="none", baseline="none", field="kind"),
    D("event_at_s", "float", "s", "event", "event start, into the measured window", 0, 3600,
      default=2.0, baseline=2.0, field="at_s"),
    D("event_duration_s", "float", "s", "event", "event duration", 0.001, 3600,
      default=1.0, baseline=1.0, field="duration_s"),
    D("event_every_s", "float", "s", "event", "event period (0: once)", 0, 3600,
      default=0.0, baseline=0.0, field="every_s"),
    D("event_count", "int", "", "event", "event occurrences (repeating every event_every_s)",
      1, 1000, default=1, baseline=1, field="count"),
    D("event_direction", "choice", "", "event", "event direction", choices=EVENT_DIRECTIONS,
      default="both", baseline="both", field="direction"),
    D("event_extra_km", "float", "km", "event", "reroute: extra fibre distance", 0, 40_075,
      default=0.0, baseline=0.0, field="extra_km"),
    D("event_extra_delay_ms", "float", "ms", "event", "reroute: extra one-way delay", 0,
      1000, default=0.0, baseline=0.0, field="extra_delay_ms"),
    D("event_loss_pct", "float", "%", "event", "loss burst: loss per packet", 0, 100,
      default=0.0, baseline=0.0, field="loss_pct"),
    D("event_rate", "rate", "Mbit/s", "event", "rate change: the line rate meanwhile", 1,
      100_000, field="rate_mbit", column="event_rate_mbit", optional=True),
    D("event_tail_s", "float", "s", "event", "measured after the last event (at least)",
      0, 3600, default=5.0, baseline=5.0, field="tail_s"),
)
ROWS: dict[str, Dimension] = {d.name: d for d in DIMENSIONS}
HOST_KNOBS: tuple[str, ...] = tuple(d.name for d in DIMENSIONS if d.section == "hosts")


@dataclass(frozen=True)
class HostProfile:
    """A named host profile (the `host` knob's presets): what it is, its values of the
    host knobs (the rest keep their defaults, which are gpu-server's) and their source."""

    name: str
    what: str
    values: dict[str, Any]
    source: str = ""


NO_HOST_LIMITS = {k: math.inf for k in HOST_KNOBS if ROWS[k].kind == "limit"}
HOST_PROFILES: dict[str, HostProfile] = {p.name: p for p in (
    HostProfile("gpu-server", "a current 8-GPU server (DGX H100 class) reading an "
                "all-flash NFS server over 2 x 200 GbE storage ports", {},
                "every host knob's default (testbed knobs)"),
    HostProfile("ideal", "no host limits: end hosts with CPU to spare (the testbed before "
                "host profiles)", dict(NO_HOST_LIMITS)),
    HostProfile("azure-nd-h100-v5", "Azure ND H100 v5 VM: 8 GPUs, 80,000 Mbit/s egress, "
                "ingress not metered", {"host_gpus": 8, "host_nic_read_mbit": math.inf,
                                        "host_nic_write_mbit": 80_000.0},
                "Azure ND H100 v5 size table; Azure meters VM bandwidth on egress only"),
    HostProfile("azure-d32s-v4", "Azure D32s_v4 VM (Azure NetApp Files' scale-up client): "
                "16,000 Mbit/s egress, ingress not metered",
                {"host_gpus": 1, "host_nic_read_mbit": math.inf,
                 "host_nic_write_mbit": 16_000.0, "conn_read_mbit": 12_750.0},
                "Dsv4 size table (ANF measured writes stop at ~1,500 MiB/s, 12.6 Gbit/s: "
                "its egress); one connection ~1,520 MiB/s (3,500 / 2.3)"),
)}
DEFAULT_HOST = "gpu-server"

# The experiment file's own settings: not knobs of a point, but checked the same way.
FILE_SETTINGS: dict[str, Dimension] = {d.name: d for d in (
    D("repetitions", "int", "", "run", "repetitions", 1, 100, default=1),
    D("au_bar", "float", "%", "loader", "AU bar", 0.001, 100, default=90.0),
    D("max_points", "int", "", "run", "max_points", 3, 64, default=12),
    D("max_runs", "int", "", "run", "max_runs", 1, 50, default=5),
    D("enabled", "bool", "", "run", "enabled", default=True),
    D("seconds", "float", "s", "run", "seconds", 0.1, 3600, default=120.0),
    D("max_mib", "int", "MiB", "run", "max_mib", 1, 65536, default=32),
    D("keep_pcap", "bool", "", "run", "keep_pcap", default=False),
)}


def knobs_of(target: str) -> tuple[str, ...]:
    """The knobs that set one part of a point (a row's `target`: "loader", "window",
    "fibre", ...), in the table's order."""
    return tuple(d.name for d in DIMENSIONS if d.target == target)


def fields_of(target: str) -> dict[str, str]:
    """Spec field -> knob, for the knobs that set one part of a point."""
    return {d.spec_field: d.name for d in DIMENSIONS if d.target == target}


def row(name: str) -> Dimension:
    """The schema row of a knob or spec field by name (KeyError: a programming error)."""
    return ROWS[name]


def default(name: str) -> Any:
    """A knob's default, for a spec dataclass's field declaration."""
    return ROWS[name].default


def check(name: str, value: Any, field: str | None = None) -> Any:
    """A spec field checked against its row: the canonical value, or SpecError."""
    return ROWS[name].check(value, field or name)


def tolerance_row(unit: str, span: float) -> Dimension:
    """[search] tolerance: a positive number in the searched knob's unit, below the span
    of the searched range."""
    return D("tolerance", "float", unit, "run", "tolerance", 1e-9, span)
