"""Benchmark (run in the lab kernel): our engine vs Mininet, and fibre vs raw veth.

    lab/run .venv/bin/python -m benchmarks.engine_vs_mininet [--workers 16] [--reps 3]

Prints, side by side from one run:
  1. setup + teardown time of the N-worker `apn` topology: testbed's engine vs
     `mn --custom topologies/apn.py --topo apn,workers=N --link fibre --switch lxbr`
     (Debian's Mininet, the checkout on its Python's path as docs/topologies.md says:
     its own setup, link configuration and cleanup; --test none);
  2. TCP goodput of one flow through the emulated fibre at 0 km (htb at 100 Gbit/s + netem
     with zero delay) vs a raw veth pair between two namespaces, alternated.
Not a test: figures depend on the machine; the ratios are what we track.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

from pyroute2 import IPRoute, netns

from testbed import topology
from testbed.network import path_metrics
from testbed.network.engine import Network
from testbed.paths import REPO


def engine_once(workers: int) -> float:
    """Seconds to set up and tear down the apn topology with the testbed's engine."""
    t0 = time.perf_counter()
    with Network(topology.build("apn", {"workers": workers, "distance_km": 3000,
                                        "rate": "10gbit"})):
        pass
    return time.perf_counter() - t0


def mininet_once(workers: int) -> float:
    """Seconds for Mininet (`mn`) to set up, configure and clean up the same topology."""
    argv = ["mn", "--custom", str(REPO / "topologies" / "apn.py"),
            "--topo", f"apn,workers={workers},distance_km=3000,rate=10gbit",
            "--link", "fibre", "--switch", "lxbr", "--controller", "none", "--test", "none"]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"mn failed: {proc.stderr.strip().splitlines()[-1:]}")
    return elapsed


def raw_veth_goodput(seconds: float) -> float:
    """One TCP flow's goodput (Mbit/s) over a bare veth pair between two namespaces."""
    a, b = "tbbe01-rawa", "tbbe01-rawb"
    for n in (a, b):
        netns.create(n)
    try:
        with IPRoute(netns=a) as ia, IPRoute(netns=b) as ib:
            ia.link("add", ifname="ra", kind="veth", peer={"ifname": "rb", "net_ns_fd": b})
            for ipr, ifn, ip in ((ia, "ra", "10.9.0.1"), (ib, "rb", "10.9.0.2")):
                idx = ipr.link_lookup(ifname=ifn)[0]
                ipr.addr("add", index=idx, address=ip, prefixlen=24)
                ipr.link("set", index=idx, state="up")
                ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
        return path_metrics.tcp_goodput(a, b, "10.9.0.2", seconds=seconds)
    finally:
        for n in (a, b):
            netns.remove(n)


def fibre_goodput(seconds: float) -> float:
    """One TCP flow's goodput (Mbit/s) through the emulated fibre at 0 km."""
    topo = topology.build("apn", {"workers": 1, "distance_km": 0, "rate": "100gbit"})
    with Network(topo) as net:
        return path_metrics.tcp_goodput(net.namespace("srv"), net.namespace("w1"),
                                   net.address("w1"), seconds=seconds)


def setup_times(workers: int, reps: int) -> None:
    """Setup + teardown of the engine and of Mininet (when installed), medians."""
    ours, theirs = [], []
    have_mn = shutil.which("mn") is not None
    for _ in range(reps):
        ours.append(engine_once(workers))
        if have_mn:
            theirs.append(mininet_once(workers))
    print(f"apn topology, {workers} workers, setup+teardown, {reps} reps (median):")
    print(f"  testbed engine : {statistics.median(ours):7.2f} s   {['%.2f' % x for x in ours]}")
    if have_mn:
        print(f"  mininet (mn)   : {statistics.median(theirs):7.2f} s   "
              f"{['%.2f' % x for x in theirs]}")
        print(f"  ratio mininet/engine: {statistics.median(theirs) / statistics.median(ours):.1f}x")
    else:
        print("  mininet: `mn` not installed (apt-get install mininet)")


def goodputs(seconds: float, reps: int) -> None:
    """One flow through a raw veth pair and through the fibre, alternated, medians."""
    fib, raw = [], []
    for _ in range(reps):
        raw.append(raw_veth_goodput(seconds))
        fib.append(fibre_goodput(seconds))
    print(f"one TCP flow, {seconds:g} s each, {reps} reps alternated (median):")
    print(f"  raw veth pair            : {statistics.median(raw) / 1000:6.2f} Gbit/s "
          f"{['%.2f' % (x / 1000) for x in raw]}")
    print(f"  fibre at 0 km (htb+netem): {statistics.median(fib) / 1000:6.2f} Gbit/s "
          f"{['%.2f' % (x / 1000) for x in fib]}")
    print(f"  ratio fibre/raw: {statistics.median(fib) / statistics.median(raw):.2f}")


def main() -> int:
    """Both comparisons, one after the other."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    setup_times(args.workers, args.reps)
    goodputs(args.seconds, args.reps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
