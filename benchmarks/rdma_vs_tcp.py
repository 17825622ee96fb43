"""Benchmark (lab VM): the same files read cold over NFS/TCP and NFS/RDMA through the fibre.

    lab/run --vm --kernel forky .venv/bin/python -m benchmarks.rdma_vs_tcp \
        [--km 0,1000,3000] [--rate 1gbit] [--files 4] [--mib 16] [--reps 2]

apn topology, one worker; soft-RoCE (rdma_rxe) in the storage and worker namespaces, so
RoCE crosses the same veth, htb and netem as TCP (testbed/services/rdma.py; needs a kernel
with per-namespace rxe sockets: Debian testing's, not Debian 12's 6.1). nfsd listens on
tcp 2049 and rdma 20049. For each distance, repetition and transport (order alternating
between repetitions): a fresh mount (NFSv4.2, rsize 1 MiB, the given read-ahead), the page
cache dropped, every file read sequentially in 1 MiB reads; MB/s = bytes / wall time, the
median over repetitions is printed next to each transport's bound: for TCP the mount's
read-ahead window per RTT, for RDMA soft-RoCE's own window of 128 unacknowledged packets
per queue pair (RXE_MAX_UNACKED_PSNS) x the RoCE path MTU (1 KiB on a 1,500-byte link, 4 KiB
with --mtu 9000) per RTT, which binds long before the mount's window does.

The header names the kernel, how it runs (APN_LAB_KERNEL: uml, qemu-tcg, qemu-kvm, or the
machine's own), the CPU and the date: soft-RoCE is CPU-heavy (every RoCE packet is built and
checked in software, with an ICRC), so figures from software emulation say how the two
transports compare on this machine, not what RDMA hardware does.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import statistics
from pathlib import Path

from benchmarks import common
from testbed import topology
from testbed.network.engine import Network
from testbed.services.nfs import NfsMount, NfsServer
from testbed.services.rdma import rdma_site
from testbed.spec import FibreSpec, MountSpec, NfsServerSpec, parse_rate

READ_BYTES = 1 << 20
RXE_UNACKED_PACKETS = 128  # RXE_MAX_UNACKED_PSNS


def machine() -> str:
    """What the figures were measured on: the kernel and how it runs, the CPUs, the date."""
    cpu = "unknown CPU"
    try:
        cpu = next(line.split(":", 1)[1].strip()
                   for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    kind = os.environ.get("APN_LAB_KERNEL", "this machine's kernel")
    host = os.environ.get("APN_LAB_HOST_CPU")
    where = f"{os.cpu_count()} x {cpu}" + (f" on a host with {host}" if host else "")
    return f"kernel {platform.release()} ({kind}), {where}, {datetime.date.today().isoformat()}"


def roce_mtu(link_mtu: int) -> int:
    """The RoCE path MTU soft-RoCE picks on a link: the largest InfiniBand MTU that fits in
    the Ethernet MTU after its headers (IP, UDP, BTH, ICRC: 1,500 -> 1,024; 9,000 -> 4,096)."""
    return max(m for m in (256, 512, 1024, 2048, 4096) if m <= link_mtu - 80)


def tcp_bound_MB_s(read_ahead_kb: int, file_bytes: int, rtt_ms: float) -> float:
    """What one sequential reader's window allows over NFS/TCP: two read-ahead windows in
    flight (each the read-ahead, or one READ_BYTES read if larger), per RTT, plus one round
    trip per file for its OPEN."""
    if rtt_ms <= 0:
        return math.inf
    window = 2 * max(read_ahead_kb * 1024, READ_BYTES)
    rounds = 1 + math.ceil(file_bytes / window)
    return file_bytes / (rounds * rtt_ms / 1000.0) / 1e6


def rxe_bound_MB_s(link_mtu: int, rtt_ms: float) -> float:
    """Soft-RoCE keeps at most RXE_MAX_UNACKED_PSNS (128) packets unacknowledged per queue
    pair (drivers/infiniband/sw/rxe/rxe_param.h): 128 x path MTU per RTT, whatever the
    mount asks for. RDMA hardware has no such small window."""
    if rtt_ms <= 0:
        return float("inf")
    return RXE_UNACKED_PACKETS * roce_mtu(link_mtu) / 1e6 / (rtt_ms / 1e3)


def set_mtu(net: Network, mtu: int) -> None:
    """The topology sets `mtu` on the fibre only: give the worker's side the same, so the
    whole path (and soft-RoCE's path MTU) uses it."""
    for node in ("srv", "s1", "w1"):
        ipr = net.ipr(node)
        for link in ipr.get_links():
            if link.get_attr("IFLA_IFNAME") != "lo" and link.get_attr("IFLA_MTU") != mtu:
                ipr.link("set", index=link["index"], mtu=mtu)


def parse_args() -> argparse.Namespace:
    """The benchmark's options."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--km", default="0,1000,3000", help="distances (default 0,1000,3000)")
    ap.add_argument("--rate", default="1gbit", help="fibre rate (default 1gbit)")
    ap.add_argument("--files", type=int, default=4, help="files (default 4)")
    ap.add_argument("--mib", type=int, default=16, help="MiB per file (default 16)")
    ap.add_argument("--reps", type=int, default=2, help="repetitions (default 2)")
    ap.add_argument("--read-ahead-kb", type=int, default=16384,
                    help="read-ahead of both mounts (default 16384, the tuned mount's)")
    ap.add_argument("--threads", type=int, default=8, help="nfsd threads (default 8)")
    ap.add_argument("--mtu", type=int, default=1500,
                    help="fibre MTU (default 1500; 9000 lets soft-RoCE use 4 KiB packets)")
    return ap.parse_args()


def print_header(args: argparse.Namespace, link_MB_s: float) -> None:
    """The machine, what is read how, the bounds and the table's column names."""
    print(f"NFS/TCP vs NFS/RDMA (soft-RoCE), {machine()}")
    print(f"{args.files} x {args.mib} MiB read cold in 1 MiB reads, apn 1 worker, link "
          f"{args.rate} ({link_MB_s:.0f} MB/s), MTU {args.mtu} (RoCE {roce_mtu(args.mtu)}), "
          f"NFSv4.2 rsize 1 MiB, read-ahead {args.read_ahead_kb} KiB, {args.threads} nfsd "
          f"threads, median of {args.reps}")
    print("bounds: tcp = min(link, read-ahead window / RTT); rdma = min(link, soft-RoCE's "
          "128 unacknowledged packets / RTT)")
    print(f"{'km':>6} {'RTT ms':>7} {'tcp MB/s':>9} {'rdma MB/s':>10} {'rdma/tcp':>9} "
          f"{'tcp bound':>10} {'rdma bound':>11}")


def read_both(net: Network, server: NfsServer, paths: list[str], args: argparse.Namespace
              ) -> dict[str, list[float]]:
    """MB/s per repetition of the files read cold over each transport (a fresh mount
    each time; which goes first alternates between repetitions)."""
    got: dict[str, list[float]] = {"tcp": [], "rdma": []}
    for rep in range(args.reps):
        for transport in common.alternate(("tcp", "rdma"), rep):
            mspec = MountSpec(transport=transport, read_ahead_kb=args.read_ahead_kb)
            with NfsMount(net, "w1", server, mspec) as m:
                if m.options()["proto"] != transport:
                    raise SystemExit(f"mount is {m.options()['proto']}, not {transport}")
                nbytes, seconds = common.cold_read([m.path / n for n in paths], READ_BYTES)
            got[transport].append(nbytes / 1e6 / seconds)
    return got


def print_row(km: float, spec: FibreSpec, got: dict[str, list[float]],
              args: argparse.Namespace, link_MB_s: float) -> None:
    """One distance's medians next to each transport's bound."""
    tcp, rdma = statistics.median(got["tcp"]), statistics.median(got["rdma"])
    bound = min(link_MB_s, tcp_bound_MB_s(args.read_ahead_kb, args.mib << 20, spec.rtt_ms))
    rbound = min(link_MB_s, rxe_bound_MB_s(args.mtu, spec.rtt_ms))
    print(f"{km:>6.0f} {spec.rtt_ms:>7.2f} {tcp:>9.1f} {rdma:>10.1f} "
          f"{rdma / tcp:>9.2f} {bound:>10.1f} {rbound:>11.1f}", flush=True)


def main() -> None:
    """Read the files over TCP and RDMA at each distance and print them against the bounds."""
    args = parse_args()
    link_MB_s = parse_rate(args.rate) / 8
    topo = topology.build("apn", {"workers": 1, "distance_km": 0, "rate": args.rate,
                                  "mtu": args.mtu})
    with Network(topo) as net:
        names = [f"f{i:02d}.bin" for i in range(args.files)]
        data = common.random_files(net, names, args.mib)
        if args.mtu != 1500:
            set_mtu(net, args.mtu)
        server = net.enter(NfsServer(net, "srv", data, NfsServerSpec(threads=args.threads)))
        rdma_site(net, server, ["w1"])
        print_header(args, link_MB_s)
        for km in (float(x) for x in args.km.split(",")):
            spec = net.set_fibre("srv", "s1", distance_km=km)
            print_row(km, spec, read_both(net, server, names, args), args, link_MB_s)


if __name__ == "__main__":
    main()
