"""The fq qdisc through pyroute2, which has no plugin for it: its options in and out.

fq (net/sched/sch_fq.c) keeps a queue per flow (per socket for local senders, per hash of
the packet's addresses and ports for forwarded ones) and, with a maxrate, sends no flow
faster than it: what caps one NFS connection (network/access.py). Its options are
netlink attributes TCA_FQ_* (include/uapi/linux/pkt_sched.h), every one a u32 but the
horizon-drop flag (u8) and the priority map and weights (structures, left as bytes).
The flow max rate is a u32 of bytes per second: ~34.4 Gbit/s at most (MAX_RATE_BYTES);
the kernel reads ~0U as no cap.

This module is a pyroute2 tc plugin (parent, options, get_parameters); `install()` puts
it in pyroute2's plugin table for the kind "fq".
"""

from __future__ import annotations

import sys
from typing import Any

from pyroute2.netlink import nla
from pyroute2.netlink.rtnl import TC_H_ROOT
from pyroute2.netlink.rtnl.tcmsg import plugins

parent = TC_H_ROOT
NO_MAX_RATE = 2**32 - 1  # TCA_FQ_FLOW_MAX_RATE's "no cap" (~0U)
MAX_RATE_BYTES = NO_MAX_RATE - 1  # the largest cap it can carry, bytes/s
PARAMETERS = {"limit": "TCA_FQ_PLIMIT", "flow_limit": "TCA_FQ_FLOW_PLIMIT",
              "maxrate": "TCA_FQ_FLOW_MAX_RATE", "orphan_mask": "TCA_FQ_ORPHAN_MASK"}


class options(nla):  # noqa: N801 (pyroute2's plugin interface name)
    """tc's fq options, TCA_FQ_PLIMIT to TCA_FQ_OFFLOAD_HORIZON."""

    nla_map = (("TCA_FQ_UNSPEC", "none"),
               ("TCA_FQ_PLIMIT", "uint32"),
               ("TCA_FQ_FLOW_PLIMIT", "uint32"),
               ("TCA_FQ_QUANTUM", "uint32"),
               ("TCA_FQ_INITIAL_QUANTUM", "uint32"),
               ("TCA_FQ_RATE_ENABLE", "uint32"),
               ("TCA_FQ_FLOW_DEFAULT_RATE", "uint32"),
               ("TCA_FQ_FLOW_MAX_RATE", "uint32"),
               ("TCA_FQ_BUCKETS_LOG", "uint32"),
               ("TCA_FQ_FLOW_REFILL_DELAY", "uint32"),
               ("TCA_FQ_ORPHAN_MASK", "uint32"),
               ("TCA_FQ_LOW_RATE_THRESHOLD", "uint32"),
               ("TCA_FQ_CE_THRESHOLD", "uint32"),
               ("TCA_FQ_TIMER_SLACK", "uint32"),
               ("TCA_FQ_HORIZON", "uint32"),
               ("TCA_FQ_HORIZON_DROP", "uint8"),
               ("TCA_FQ_PRIOMAP", "hex"),
               ("TCA_FQ_WEIGHTS", "hex"),
               ("TCA_FQ_OFFLOAD_HORIZON", "uint32"))


def get_parameters(kwarg: dict[str, Any]) -> dict[str, Any]:
    """TCA_OPTIONS from keyword arguments: limit and flow_limit (packets), maxrate
    (bytes/s per flow) and orphan_mask (the flow hash bits of forwarded packets)."""
    return {"attrs": [[attr, int(kwarg[key])] for key, attr in PARAMETERS.items()
                      if key in kwarg]}


def install() -> None:
    """Make pyroute2 use this module as its fq plugin (idempotent)."""
    plugins["fq"] = sys.modules[__name__]
