"""Benchmark (lab kernel): one big file read cold over NFS through the fibre, default vs
tuned mount options, next to the window/RTT bound and the link rate.

    lab/run .venv/bin/python -m benchmarks.nfs_read [--mib 256] [--rate 1gbit]

apn topology, one worker, the link at 1 Gbit/s (UML's one CPU moves ~80-120 MB/s of
NFS at 0 km, so the link is about what the lab kernel sustains). For each distance and
mount: fresh mount, page cache dropped, the file read sequentially in --bs KiB reads
(128 KiB, as cp and cat do; the request size matters: the kernel's window is at least one
request, up to rsize). "default" is the kernel's own choices (rsize negotiated = 1 MiB
from the server, read-ahead 128 KiB, one connection); "tuned" sets rsize 1 MiB, nconnect 4 and a 16 MiB read-ahead. The bound is
min(link, in-flight window / RTT), the window being two read-ahead windows (each the
read-ahead or one rsize READ if larger): testbed.model's prediction.
"""

from __future__ import annotations

import argparse

from benchmarks import common
from testbed import topology
from testbed.model import Path as ModelPath
from testbed.model import Reading, predict
from testbed.network.engine import Network
from testbed.services.nfs import NfsMount, NfsServer
from testbed.spec import FibreSpec, MountSpec, NfsServerSpec, parse_rate

MOUNTS = {"default": MountSpec(),
          "tuned": MountSpec(rsize=1 << 20, nconnect=4, read_ahead_kb=16384)}
DISTANCES = (0, 60, 3000)


def bound_MB_s(spec: FibreSpec, link_MB_s: float, size: int, bs: int,
               opts: dict[str, str]) -> float:
    """min(link, in-flight window / RTT) for one reader of a `size`-byte file in bs-byte
    reads with the mount's rsize and read-ahead (testbed.model)."""
    return predict(
        ModelPath(spec.rtt_ms / 1000.0, link_MB_s * 1e6, buffer_bytes=1 << 30),
        Reading(1, size, bs, int(opts["rsize"]), int(opts["read_ahead_kb"]) << 10),
        float("inf")).predicted / 1e6


def read_each_mount(net: Network, server: NfsServer, km: float, args: argparse.Namespace,
                    size: int) -> dict[str, float]:
    """MB/s of the file read cold through each mount at km, one line each."""
    link_MB_s = parse_rate(args.rate) / 8
    spec = net.set_fibre("srv", "s1", distance_km=km)
    rates: dict[str, float] = {}
    for name, mspec in MOUNTS.items():
        with NfsMount(net, "w1", server, mspec) as m:
            opts = m.options()
            _, seconds = common.cold_read([m.path / "big.bin"], args.bs << 10)
        rates[name] = rate = size / 1e6 / seconds
        bound = bound_MB_s(spec, link_MB_s, size, args.bs << 10, opts)
        print(f"{km:>5} {spec.rtt_ms:>7.2f} {name:>8} {rate:>7.1f} {bound:>10.1f} "
              f"{rate / bound:>8.2f}", flush=True)
    return rates


def main() -> None:
    """Read the file at each distance with each mount and print MB/s against the bound."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=256, help="file size (default 256 MiB)")
    ap.add_argument("--rate", default="1gbit", help="fibre rate (default 1gbit)")
    ap.add_argument("--bs", type=int, default=128,
                    help="application read size in KiB (default 128, as cp and cat)")
    ap.add_argument("--threads", type=int, default=8, help="nfsd threads (default 8)")
    args = ap.parse_args()
    topo = topology.build("apn", {"workers": 1, "distance_km": 0, "rate": args.rate})
    with Network(topo) as net:
        data = common.random_files(net, ["big.bin"], args.mib)
        server = net.enter(NfsServer(net, "srv", data, NfsServerSpec(threads=args.threads)))
        size = (data / "big.bin").stat().st_size
        print(f"one {args.mib} MiB file, cold, apn 1 worker, link {args.rate} "
              f"({parse_rate(args.rate) / 8:.0f} MB/s), {args.threads} nfsd threads, "
              f"{args.bs} KiB reads")
        print(f"{'km':>5} {'RTT ms':>7} {'mount':>8} {'MB/s':>7} {'bound MB/s':>10} "
              f"{'of bound':>8}")
        mbs = {km: read_each_mount(net, server, km, args, size) for km in DISTANCES}
        for km in DISTANCES:
            print(f"tuned/default at {km} km: {mbs[km]['tuned'] / mbs[km]['default']:.1f}x")


if __name__ == "__main__":
    main()
