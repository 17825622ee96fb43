"""Traffic control for one direction of a fibre span, through pyroute2 (no `tc` subprocess).

Each fibre end's egress gets:

    htb root 1: (default class 1:1)
      class 1:1  rate = ceil = the direction's rate (64-bit rates above 34 Gbit/s)
        netem 10:  delay, jitter, loss, limit (>= 1.5 x BDP packets)

Shaping happens where the packet leaves the sender's side, the delay line holds the
bandwidth-delay product. apply() installs that tree from scratch; change() restates EVERY
parameter (netem keeps parameters a change does not repeat); read() returns what the
kernel reports, so callers and tests compare it with what they asked for.

netem takes delay and jitter in microseconds (psched ticks, converted by pyroute2): the
conversion from milliseconds happens here and only here.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.rtnl.tcmsg import common as tc_common

from testbed.errors import KernelError
from testbed.network import netem as netem_seed
from testbed.spec import Direction

log = logging.getLogger(__name__)
netem_seed.install()  # netem's PRNG seed (TCA_NETEM_PRNG_SEED) in and out of pyroute2

ROOT = "1:"
CLASS = "1:1"
NETEM = "10:"
HZ = 1000
GSO_MAX_BYTES = 65_536
U32_MAX = 2**32 - 1


def _us(ms: float) -> int:
    return int(round(ms * 1000.0))


def _burst_bytes(rate_mbit: float, mtu: int) -> int:
    """htb bucket: one timer tick of traffic, but at least one GSO super-packet."""
    return int(max(rate_mbit * 1e6 / 8 / HZ + mtu, GSO_MAX_BYTES + mtu))


def _netem_args(d: Direction) -> dict[str, Any]:
    args = {"delay": _us(d.delay_ms), "jitter": _us(d.jitter_ms), "loss": d.loss_pct,
            "limit": d.limit_pkts}
    return args if d.seed is None else {**args, "seed": d.seed}


def htb_class_args(rate_mbit: float, mtu: int) -> dict[str, Any]:
    """An htb class's rate = ceil and buckets (one tick of traffic, at least a GSO
    super-packet) for a rate in Mbit/s."""
    rate = f"{int(round(rate_mbit * 1e6))}bit"
    burst = _burst_bytes(rate_mbit, mtu)
    return {"rate": rate, "ceil": rate, "burst": burst, "cburst": burst, "mtu": mtu}


def _htb_class_args(d: Direction) -> dict[str, Any]:
    return htb_class_args(d.rate_mbit, d.mtu)


def call(what: str, ifname: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """fn(*args, **kwargs), a netlink tc request; KernelError naming what and where."""
    log.debug("tc %s on %s: %s %s", what, ifname, args, kwargs)
    try:
        return fn(*args, **kwargs)
    except NetlinkError as exc:
        hint = " (is sch_netem/sch_htb/sch_fq available? run in the lab kernel: lab/run)" \
            if exc.code in (2, 22, 95) else ""
        raise KernelError(f"tc {what} on {ifname}: {exc.args[-1] if exc.args else exc}"
                          f"{hint}") from None


def clear(ipr: IPRoute, index: int, ifname: str) -> None:
    """Remove our root qdisc if any (the device falls back to its default)."""
    try:
        ipr.tc("del", index=index, handle=ROOT, root=True)
    except NetlinkError as exc:
        if exc.code not in (2, 22):  # ENOENT / EINVAL: nothing installed
            raise KernelError(f"tc del root on {ifname}: {exc}") from None


def apply(ipr: IPRoute, index: int, ifname: str, d: Direction) -> None:
    """Install the htb + netem tree for direction `d` on device `index`."""
    clear(ipr, index, ifname)
    call("add htb", ifname, ipr.tc, "add", "htb", index=index, handle=ROOT, default=1)
    call("add htb class", ifname, ipr.tc, "add-class", "htb", index=index, handle=CLASS,
         parent=ROOT, **_htb_class_args(d))
    call("add netem", ifname, ipr.tc, "add", "netem", index=index, handle=NETEM,
         parent=CLASS, **_netem_args(d))


def change(ipr: IPRoute, index: int, ifname: str, d: Direction) -> None:
    """Reconfigure a running direction in place (no packets flushed), every parameter
    restated so nothing of the old configuration survives (zero delay/loss included)."""
    call("change htb class", ifname, ipr.tc, "change-class", "htb", index=index,
         handle=CLASS, parent=ROOT, **_htb_class_args(d))
    call("change netem", ifname, ipr.tc, "change", "netem", index=index, handle=NETEM,
         parent=CLASS, **_netem_args(d))


@dataclass(frozen=True)
class Readback:
    """One direction as the kernel reports it, plus the qdisc counters."""

    delay_ms: float
    jitter_ms: float
    loss_pct: float
    rate_mbit: float
    limit_pkts: int
    netem_drops: int
    netem_backlog_pkts: int
    htb_drops: int
    sent_pkts: int  # frames (a GSO packet counts as its segments)
    sent_skbs: int = 0  # packets as netem handled them (a GSO packet counts once)
    sent_bytes: int = 0
    htb_overlimits: int = 0
    seed: int | None = None  # netem's PRNG seed as dumped (None: kernel keeps none)

    @property
    def frames_per_packet(self) -> float:
        """Mean frames per packet netem saw: 1.0 when it drops and delays single frames."""
        return self.sent_pkts / self.sent_skbs if self.sent_skbs else float("nan")


def _ticks_to_ms(ticks: int) -> float:
    return ticks / tc_common.tick_in_usec / 1000.0


def _our_qdiscs(ipr: IPRoute, index: int, ifname: str) -> tuple[Any, Any]:
    """(netem qdisc, htb root qdisc) of device `index`; KernelError when either is missing."""
    netem = htb_root = None
    for q in ipr.get_qdiscs(index=index):
        kind = q.get_attr("TCA_KIND")
        if kind == "netem":
            netem = q
        elif kind == "htb" and q["parent"] == 0xFFFFFFFF:
            htb_root = q
    if netem is None or htb_root is None:
        raise KernelError(f"{ifname}: no htb+netem tree installed")
    return netem, htb_root


def htb_class(ipr: IPRoute, index: int, ifname: str) -> tuple[int, int]:
    """(rate in bytes/s, packets sent) of our htb class; KernelError when it is missing."""
    rate_bytes = None
    skbs = 0
    for c in ipr.get_classes(index=index):
        if c.get_attr("TCA_KIND") != "htb" or c["handle"] != 0x10001:
            continue
        copts = c.get_attr("TCA_OPTIONS")
        rate_bytes = copts.get_attr("TCA_HTB_RATE64") or copts.get_attr("TCA_HTB_PARMS")["rate"]
        # htb counts one "lend" per packet its only class sends (GSO packets once).
        skbs = int((c.get_attr("TCA_XSTATS") or {}).get("lends", 0))
    if rate_bytes is None:
        raise KernelError(f"{ifname}: htb class {CLASS} missing")
    return rate_bytes, skbs


def stats(msg: Any) -> tuple[int, int, int, int, int]:
    """(drops, queue length, packets, bytes, overlimits) of a qdisc's basic counters."""
    s = msg.get_attr("TCA_STATS") or {}  # struct tc_stats: its counter is "drop"
    return (int(s.get("drop", 0)), int(s.get("qlen", 0)), int(s.get("packets", 0)),
            int(s.get("bytes", 0)), int(s.get("overlimits", 0)))


def read(ipr: IPRoute, index: int, ifname: str) -> Readback:
    """Read the htb rate and netem parameters/counters of device `index` back from the kernel.

    Raises KernelError when the device does not carry our tree."""
    netem, htb_root = _our_qdiscs(ipr, index, ifname)
    opts = netem.get_attr("TCA_OPTIONS")
    rate_bytes, skbs = htb_class(ipr, index, ifname)
    n_drops, n_qlen, _, _, _ = stats(netem)
    h_drops, _, h_sent, h_bytes, h_over = stats(htb_root)
    return Readback(
        delay_ms=_ticks_to_ms(opts["delay"]),
        jitter_ms=_ticks_to_ms(opts["jitter"]),
        loss_pct=opts["loss"] / U32_MAX * 100.0,
        rate_mbit=rate_bytes * 8 / 1e6,
        limit_pkts=int(opts["limit"]),
        netem_drops=n_drops,
        netem_backlog_pkts=n_qlen,
        htb_drops=h_drops,
        sent_pkts=h_sent,
        sent_skbs=skbs,
        sent_bytes=h_bytes,
        htb_overlimits=h_over,
        seed=netem_seed.seed_of(opts),
    )
