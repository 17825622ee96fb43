"""The table of experiment dimensions: every knob an experiment can fix, sweep or search.

One row per knob says: its name (in files and in -p KEY=VALUE), its type and unit, the
values it allows, which part of a point it sets (fibre, topology, server, dataset, mount,
loader, data path) and which spec field, whether it can change on a running testbed
(live) or needs a fresh one, its value in the co-located baseline, the TOML table where a
plain value may also be given, its CSV column and its plot label. Parsing, validation,
the CSV columns and the plot axes all read this table: a new knob is one row.

Fibre dimensions are per link: `distance_km` sets every fibre of the topology,
`fibre.*.distance_km` too, `fibre.site_b.distance_km` one named fibre.

Values are parsed strictly: from TOML they must have the right type (an integer knob
takes 4, not "4" or 4.0; numbers are finite); from text (-p KEY=VALUE) they must be ASCII
numbers (full-width or other Unicode digits are refused), true/false, or a rate like
10gbit.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from typing import Any, Callable

from testbed.errors import SpecError
from testbed.spec import (CONGESTION_CONTROLS, MOUNT_TRANSPORTS, NFS_VERSIONS, parse_rate,
                          parse_text)
from testbed.workload import ACCESS, FORMATS, READER_KINDS

TARGETS = ("fibre", "topology", "server", "dataset", "mount", "loader", "data_path", "run",
           "preset", "host")


def number(x: float) -> str:
    """A bound or value in messages: 1048576, 0.5, 40075 (no exponent, no trailing .0)."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def show(value: Any, limit: int = 60) -> str:
    """A value as it appears in an error message: repr, one line, shortened."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _int(value: Any, text: bool) -> int:
    if text and isinstance(value, str):
        return int(parse_text(value, int))
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError("expected an integer")


def _float(value: Any, text: bool) -> float:
    if text and isinstance(value, str):
        return float(parse_text(value, float))
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("expected a number")
    if not math.isfinite(value):
        raise ValueError("expected a finite number")
    return float(value)


def _with_range(said: str, allowed: str) -> str:
    """A parser's complaint with what the knob allows, said once: "expected an integer"
    and "an integer 1 .. 16" make "expected an integer 1 .. 16"."""
    kind = said.removeprefix("expected ")
    if kind != said and allowed.startswith(kind):
        return f"expected {allowed}"
    return f"{said}: {allowed}"


def _bool(value: Any, text: bool) -> bool:
    if isinstance(value, bool):
        return value
    if text and isinstance(value, str):
        return bool(parse_text(value, bool))
    raise ValueError("expected true or false")


def _rate(value: Any, text: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError("expected a rate such as 100mbit or 10gbit")
    if isinstance(value, str) and not value.isascii():
        raise ValueError("expected a rate such as 100mbit or 10gbit")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("expected a finite rate")
    try:
        return parse_rate(value)
    except SpecError:
        raise ValueError("expected a rate such as 100mbit or 10gbit") from None


def _auto(value: Any, text: bool) -> float | str:
    """A number, or "auto" (decided by the testbed: time_scale by a calibration at run
    start, tcp_buffer_mib from the path's bandwidth-delay product)."""
    if isinstance(value, str) and value.strip() == "auto":
        return "auto"
    return _float(value, text)


def _choice(value: Any, text: bool) -> str:
    if not isinstance(value, str):
        raise ValueError("expected a name")
    return value.strip() if text else value


def _str_list(value: Any, text: bool) -> tuple[str, ...]:
    if text and isinstance(value, str):
        value = [v for v in value.split(",")]
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ValueError("expected a non-empty list of names")
    return tuple(v.strip() for v in value)


PARSERS: dict[str, Callable[[Any, bool], Any]] = {
    "int": _int, "float": _float, "bool": _bool, "rate": _rate, "choice": _choice,
    "str_list": _str_list, "auto": _auto,
}


@dataclass(frozen=True)
class Dimension:
    """One knob of an experiment (see the module docstring)."""

    name: str
    kind: str                      # a key of PARSERS
    unit: str                      # "km", "ms", "%", "Mbit/s", "KiB", "B", "" (a count)
    target: str                    # a member of TARGETS: which part of a point it sets
    help: str                      # one line for --check and the docs
    lo: float | None = None        # inclusive bounds for numbers (rate: lo exclusive)
    hi: float | None = None
    choices: tuple[str, ...] | Callable[[], tuple[str, ...]] = ()
    pow2: bool = False             # integers that must be a power of two
    live: bool = True              # False: a new value needs a fresh testbed/server/dataset
    baseline: Any = None           # its value in the co-located baseline (None: unchanged)
    per_link: bool = False         # fibre knobs: addressable per named link
    section: str | None = None     # the TOML table a plain value may be given in
    key: str | None = None         # its key in that table (default: name)
    field: str | None = None       # the spec field it sets (default: name)
    column: str | None = None      # the CSV column (default: name)
    label: str | None = None       # the plot axis label (default: help + unit)

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
        """The names a choice (or list of names) may take."""
        return self.choices() if callable(self.choices) else self.choices

    def describe_range(self) -> str:
        """What this knob allows, in words (for error messages and --check)."""
        if self.kind in ("choice", "str_list"):
            return "one of " + ", ".join(self.allowed())
        if self.kind == "bool":
            return "true or false"
        hi = number(self.hi) if self.hi is not None else "any"
        span = f"> 0 and <= {hi}" if self.kind == "rate" else f"{number(self.lo or 0)} .. {hi}"
        kind = {"int": "an integer", "float": "a number", "auto": "\"auto\" or a number",
                "rate": "a rate in Mbit/s or text like 10gbit"}[self.kind]
        extra = ", a power of two" if self.pow2 else ""
        return f"{kind} {span}{' ' + self.unit if self.unit else ''}{extra}"

    def parse(self, value: Any, text: bool = False) -> Any:
        """The canonical value of this knob from TOML (text=False) or -p text (text=True).

        Raises ValueError with what is allowed (the caller adds where and which key)."""
        try:
            out = PARSERS[self.kind](value, text)
        except ValueError as exc:
            raise ValueError(_with_range(str(exc), self.describe_range())) from None
        self._check_range(out)
        return out

    def _check_range(self, value: Any) -> None:
        if self.kind in ("choice", "str_list"):
            allowed = self.allowed()
            items = value if isinstance(value, tuple) else (value,)
            bad = [v for v in items if allowed and v not in allowed]
            if bad:
                hint = difflib.get_close_matches(bad[0], allowed, n=1)
                raise ValueError(f"unknown {bad[0]!r}" + (f" (did you mean {hint[0]!r}?)"
                                 if hint else "") + f": {self.describe_range()}")
            return
        if self.kind == "bool" or value == "auto":
            return
        too_low = value <= 0 if self.kind == "rate" else (self.lo is not None and value < self.lo)
        if too_low or (self.hi is not None and value > self.hi):
            raise ValueError(f"out of range: {self.describe_range()}")
        if self.pow2 and value & (value - 1):
            raise ValueError(f"not a power of two: {self.describe_range()}")


def _presets() -> tuple[str, ...]:
    from testbed.workload.presets import NONE, PRESETS
    return (NONE, *PRESETS)


def _data_paths() -> tuple[str, ...]:
    from testbed.experiment.datapaths import REGISTRY
    return tuple(REGISTRY)


MiB_KIB = 1024
DIMENSIONS: tuple[Dimension, ...] = (
    # fibre spans: per link, set live on the running testbed
    Dimension("distance_km", "float", "km", "fibre", "fibre distance", 0, 40_075,
              per_link=True, baseline=0.0),
    Dimension("loss_pct", "float", "%", "fibre", "random loss per packet", 0, 50,
              per_link=True, baseline=0.0),
    Dimension("jitter_ms", "float", "ms", "fibre", "delay jitter", 0, 1000, per_link=True,
              baseline=0.0),
    Dimension("extra_delay_ms", "float", "ms", "fibre", "equipment delay (one way)", 0, 1000,
              per_link=True, baseline=0.0),
    Dimension("rate", "rate", "Mbit/s", "fibre", "line rate", 0, 100_000, per_link=True,
              field="rate_mbit", column="rate_mbit"),
    # the topology: a fresh testbed per value
    Dimension("workers", "int", "", "topology", "GPU workers per site", 1, 1024, live=False),
    Dimension("mtu", "int", "B", "topology", "MTU of every link", 576, 9000, live=False),
    # the storage site's nfsd
    Dimension("nfsd_threads", "int", "", "server", "nfsd threads", 1, 256, live=False,
              section="server", key="threads", field="threads"),
    Dimension("nfsd_versions", "str_list", "", "server", "NFS versions served",
              choices=NFS_VERSIONS, live=False, section="server", key="versions",
              field="versions"),
    # the training set on the storage site
    Dimension("files", "int", "", "dataset", "files in the training set", 1, 1_000_000,
              live=False, section="dataset"),
    Dimension("file_kib", "int", "KiB", "dataset", "file size", 4, 4 * MiB_KIB * MiB_KIB,
              live=False, section="dataset"),
    Dimension("format", "choice", "", "dataset", "file format", choices=FORMATS,
              live=False, section="dataset"),
    Dimension("records_per_file", "int", "", "dataset", "records per record file", 1,
              65_536, live=False, section="dataset"),
    # each worker's NFS mount (also the fields of a [mounts.NAME] profile)
    Dimension("mount", "choice", "", "mount", "mount profile ([mounts.NAME])"),
    Dimension("vers", "choice", "", "mount", "NFS version", choices=NFS_VERSIONS,
              section="mounts"),
    Dimension("rsize", "int", "B", "mount", "NFS read size", 4096, 1_048_576, pow2=True,
              section="mounts"),
    Dimension("wsize", "int", "B", "mount", "NFS write size", 4096, 1_048_576, pow2=True,
              section="mounts"),
    Dimension("nconnect", "int", "", "mount", "TCP connections per mount", 1, 16,
              section="mounts"),
    Dimension("transport", "choice", "", "mount", "NFS transport (rdma: port 20049, soft-RoCE)",
              choices=MOUNT_TRANSPORTS, section="mounts"),
    Dimension("read_ahead_kb", "int", "KiB", "mount", "read-ahead", 0, MiB_KIB * MiB_KIB,
              section="mounts"),
    Dimension("actimeo_s", "int", "s", "mount", "attribute cache time", 0, 86_400,
              section="mounts"),
    Dimension("nocto", "bool", "", "mount", "no close-to-open consistency",
              section="mounts"),
    Dimension("hard", "bool", "", "mount", "hard mount (retry forever)", section="mounts"),
    Dimension("timeo_ds", "int", "ds", "mount", "RPC timeout", 1, 6000, section="mounts"),
    Dimension("retrans", "int", "", "mount", "RPC retransmissions", 0, 20, section="mounts"),
    # the GPU hosts' TCP buffers: "auto" = 2 x the path's BDP (at least 6 MiB), or a size
    # (6 = Linux's default tcp_rmem maximum); also a field of a [mounts.NAME] profile
    Dimension("tcp_buffer_mib", "auto", "MiB", "host", "TCP buffer maximum", 0.0625, 4096,
              section="mounts"),
    Dimension("congestion", "choice", "", "host", "TCP congestion control on every host",
              choices=CONGESTION_CONTROLS),
    Dimension("delayed_ack", "bool", "", "host",
              "receivers delay ACKs (false: route quickack on every host)"),
    Dimension("loss_probe", "bool", "", "host",
              "senders send tail loss probes (false: tcp_early_retrans = 0)"),
    # the loader and the emulated accelerator
    Dimension("workload", "choice", "", "preset", "workload preset", choices=_presets,
              section="workload", key="preset"),
    Dimension("workload_scale", "float", "", "preset", "preset scale (sample and compute)",
              1e-6, 1, section="workload", key="scale"),
    Dimension("batch", "int", "", "loader", "samples per step", 1, 100_000,
              section="workload"),
    Dimension("compute_ms", "float", "ms", "loader", "emulated compute per step", 0,
              600_000, section="workload"),
    Dimension("measure_s", "float", "s", "loader", "measured window (at least)", 0.5, 3600,
              section="workload"),
    Dimension("measure_max_s", "float", "s", "loader", "measured window (at most)", 0.5,
              3600, section="workload"),
    Dimension("measure_stall_s", "float", "s", "loader",
              "measured window when the accelerator waits (at least)", 0, 3600,
              section="workload"),
    Dimension("warmup_max_s", "float", "s", "loader", "warm-up (at most)", 0.5, 3600,
              section="workload"),
    Dimension("min_steps", "int", "", "loader", "measured steps (at least)", 2, 100_000,
              section="workload"),
    Dimension("au_ci_target", "float", "%", "loader", "AU interval to reach (95 %, +-)",
              0.05, 50, section="workload"),
    Dimension("readers", "int", "", "loader", "reader threads or processes", 1, 256,
              section="workload"),
    Dimension("prefetch", "int", "", "loader", "batches requested ahead", 1, 1024,
              section="workload"),
    Dimension("shuffle", "bool", "", "loader", "shuffle samples each epoch",
              section="workload"),
    Dimension("seed", "int", "", "loader", "shuffle seed", 0, 2**31 - 1,
              section="workload"),
    Dimension("reader_kind", "choice", "", "loader", "reader kind", choices=READER_KINDS,
              section="workload"),
    Dimension("access", "choice", "", "loader", "sample = file or record", choices=ACCESS,
              section="workload"),
    Dimension("read_kib", "int", "KiB", "loader", "application read size", 4, 65_536,
              section="workload"),
    # time dilation: the whole scenario runs k times slower (rates / k, delays, compute and
    # timeouts x k); every figure is reported in emulated units
    Dimension("time_scale", "auto", "", "run", "time dilation k", 1, 1000),
    # where training reads from
    Dimension("data_path", "choice", "", "data_path", "data path", choices=_data_paths),
    Dimension("cache_mib", "int", "MiB", "data_path", "FS-Cache size", 64, MiB_KIB * MiB_KIB,
              section="cache", key="size_mib"),
    Dimension("stage_parallel", "int", "", "data_path", "parallel staging copies", 1, 64,
              section="staging", key="parallel"),
)

BY_NAME: dict[str, Dimension] = {d.name: d for d in DIMENSIONS}
FIBRE_DIMS: tuple[Dimension, ...] = tuple(d for d in DIMENSIONS if d.per_link)
SECTIONS: tuple[str, ...] = ("dataset", "workload", "server", "cache", "staging")


def in_section(section: str) -> dict[str, Dimension]:
    """The knobs a plain TOML table holds, by their key there."""
    return {d.section_key: d for d in DIMENSIONS if d.section == section}


def did_you_mean(word: str, candidates: list[str] | tuple[str, ...]) -> str:
    """' (did you mean X?)' for the closest candidate, or ''."""
    hint = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {hint[0]!r}?)" if hint else ""


@dataclass(frozen=True)
class Key:
    """A knob as an experiment names it: a dimension, and for fibre knobs the link it
    addresses (None: every fibre of the topology)."""

    dim: Dimension
    link: str | None = None

    @property
    def text(self) -> str:
        """How the key is written in files and ids ("distance_km",
        "fibre.site_b.distance_km")."""
        return f"fibre.{self.link}.{self.dim.name}" if self.link else self.dim.name

    @property
    def column(self) -> str:
        """Its CSV column ("rate_mbit", "fibre.site_b.rate_mbit")."""
        return f"fibre.{self.link}.{self.dim.csv_column}" if self.link else self.dim.csv_column

    @property
    def label(self) -> str:
        """A plot axis label in words."""
        return f"{self.link} {self.dim.axis_label}" if self.link else self.dim.axis_label


def parse_key(text: Any, links: tuple[str, ...]) -> Key:
    """A knob's name as written (`nconnect`, `fibre.*.loss_pct`, `fibre.site_b.rate`) ->
    Key. Raises ValueError with a "did you mean" for unknown knobs or links."""
    if not isinstance(text, str):
        raise ValueError(f"a knob name must be text, got {show(text)}")
    if text.startswith("fibre."):
        _, _, rest = text.partition(".")
        link, _, name = rest.rpartition(".")
        dim = BY_NAME.get(name)
        if not link or dim is None or not dim.per_link:
            names = [f"fibre.{l}.{d.name}" for l in ("*", *links) for d in FIBRE_DIMS]
            raise ValueError(f"unknown knob {text!r}{did_you_mean(text, names)}")
        if link != "*" and link not in links:
            known = ", ".join(links) or "none"
            raise ValueError(f"unknown fibre {link!r} in {text!r}{did_you_mean(link, links)}; "
                             f"this topology's fibres: {known}")
        return Key(dim, None if link == "*" else link)
    if text not in BY_NAME:
        names = list(BY_NAME) + [f"fibre.{l}.{d.name}" for l in links for d in FIBRE_DIMS]
        raise ValueError(f"unknown knob {text!r}{did_you_mean(text, names)}")
    return Key(BY_NAME[text])
