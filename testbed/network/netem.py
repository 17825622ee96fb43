"""netem's random seed through pyroute2, whose netem plugin stops at TCA_NETEM_RATE.

netem draws loss and jitter from a per-qdisc PRNG. Linux >= 6.3 takes its seed as
TCA_NETEM_PRNG_SEED (a u64) and dumps it back; without one every add/change reseeds at
random. With a seed, the n-th packet netem handles is dropped (or delayed) the same way
in every run, so points compared side by side (time scales, mounts, reruns) see the same
loss pattern and their difference is the setting's, not the draw's (common random
numbers). Older kernels ignore the attribute and dump no seed: read() then reports None.

This module is a pyroute2 tc plugin (parent, options, get_parameters): pyroute2's netem
plugin with netem's later attributes in its map; `install()` puts it in pyroute2's plugin
table for the kind "netem" (a superset: every other attribute is encoded and decoded as
before).
"""

from __future__ import annotations

import sys
from typing import Any

from pyroute2.netlink.rtnl import tcmsg as _tcmsg
from pyroute2.netlink.rtnl.tcmsg import sched_netem

parent = sched_netem.parent


class options(sched_netem.options):  # noqa: N801 (pyroute2's plugin interface name)
    """tc_netem_qopt plus every TCA_NETEM_* attribute up to the PRNG seed (14)."""

    nla_map = (*sched_netem.options.nla_map,
               ("TCA_NETEM_ECN", "uint32"),
               ("TCA_NETEM_RATE64", "uint64"),
               ("TCA_NETEM_PAD", "hex"),
               ("TCA_NETEM_LATENCY64", "hex"),
               ("TCA_NETEM_JITTER64", "hex"),
               ("TCA_NETEM_SLOT", "hex"),
               ("TCA_NETEM_SLOT_DIST", "hex"),
               ("TCA_NETEM_PRNG_SEED", "uint64"))


def get_parameters(kwarg: dict[str, Any]) -> dict[str, Any]:
    """pyroute2's netem parameters, plus TCA_NETEM_PRNG_SEED when `seed` is given."""
    seed = kwarg.pop("seed", None)
    opts = sched_netem.get_parameters(kwarg)
    if seed is not None:
        opts["attrs"].append(["TCA_NETEM_PRNG_SEED", int(seed)])
    return opts


def install() -> None:
    """Make pyroute2 use this module as its netem plugin (idempotent)."""
    _tcmsg.plugins["netem"] = sys.modules[__name__]


def seed_of(opts: Any) -> int | None:
    """The seed a dumped netem qdisc's options report (None: the kernel keeps none)."""
    value = opts.get_attr("TCA_NETEM_PRNG_SEED")
    return None if value is None else int(value)
