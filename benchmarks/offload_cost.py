"""Benchmark (lab kernel): what netem sees with and without the testbed's offload setting,
and what single frames cost.

    lab/run .venv/bin/python benchmarks/offload_cost.py [--seconds 8] [--reps 2]

Part 1, frames per packet at the sender-side fibre end (htb class packets / lends) and
the flow's rate, one iperf3 flow each way at 1,000 km, 1 Gbit/s, 0.1 % loss, on `apn`
(the storage host's interface is a fibre end) and `two-sites` (it is one LAN hop from
its fibre end), with
    kernel defaults          TSO, GSO on; GRO off on veths (7.2's default)
    TSO+GSO off, sender      the obvious fix: moves segmentation after the sender's qdisc
    testbed (frames)         gso_max_segs 1 on hosts, GRO off on switch ports
Mathis/CUBIC for this point: 45.8 Mbit/s.

Part 2, the cost: one iperf3 flow srv -> w1 and w1 -> srv at 0 km, full-size packets vs
single frames, rate 10 Gbit/s (htb never throttles) and 1 Gbit/s, guest CPU busy,
repetitions alternating the order.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testbed import topology  # noqa: E402
from testbed.network import iperf, offload  # noqa: E402
from testbed.network.engine import Network  # noqa: E402

TSO_GSO_OFF = {"tx-tcp-segmentation": False, "tx-generic-segmentation": False}
TSO_GSO_ON = {"tx-tcp-segmentation": True, "tx-generic-segmentation": True}

# topology, parameters, fibre (a, b), flows (sender, receiver); a->b is the forward way
CASES = (
    ("apn", {"workers": 1, "distance_km": 1000}, ("srv", "s1"),
     (("srv", "w1"), ("w1", "srv"))),
    ("two-sites", {"workers": 1, "distance_a_km": 1000, "distance_b_km": 60}, ("s0", "s1"),
     (("srv", "a1"), ("a1", "srv"))),
)
SETTINGS = ("kernel defaults", "TSO+GSO off, sender", "testbed (frames)")


def cpu_times() -> tuple[float, float]:
    fields = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields) - fields[3] - fields[4], sum(fields)


def host_ifname(net: Network, host: str) -> str:
    return next(l.get_attr("IFLA_IFNAME") for l in net.ipr(host).get_links()
                if l.get_attr("IFLA_IFNAME") != "lo")


def apply(net: Network, setting: str, sender: str) -> None:
    offload.follow(net, frames=setting == "testbed (frames)")
    for host in net.hosts:
        wanted = TSO_GSO_OFF if setting.startswith("TSO") and host == sender else TSO_GSO_ON
        offload.set_features(net.namespace(host), host_ifname(net, host), wanted)
        net.tcp.sysctl(host, "net/ipv4/route/flush", "1")


def part1(seconds: float) -> None:
    print("frames per packet at the sender-side fibre end, 1,000 km, 1 Gbit/s, 0.1 % loss")
    print(f"{'topology':10} {'flow':9} " + " ".join(f"{s:>30}" for s in SETTINGS))
    for name, params, fibre, flows in CASES:
        with Network(topology.build(name, {**params, "rate": "1gbit", "loss_pct": 0.1})) as net:
            for sender, receiver in flows:
                cells = []
                for setting in SETTINGS:
                    apply(net, setting, sender)
                    way = 0 if sender == "srv" else 1
                    before = net.read_fibre(*fibre)[way]
                    flow = iperf.run(net, sender, receiver, seconds=seconds)
                    after = net.read_fibre(*fibre)[way]
                    fpp = (after.sent_pkts - before.sent_pkts) / \
                        max(1, after.sent_skbs - before.sent_skbs)
                    cells.append(f"{fpp:6.2f} frames/pkt {flow.mbit:7.1f} Mbit/s")
                print(f"{name:10} {sender + '->' + receiver:9} "
                      + " ".join(f"{c:>30}" for c in cells), flush=True)


def part2(seconds: float, reps: int) -> None:
    print("\ncost at 0 km: one iperf3 flow, full-size packets vs single frames")
    print(f"{'rate':7} {'rep':>3} {'packets':12} {'flow':8} {'Mbit/s':>8} {'guest CPU %':>11}")
    for rate in ("10gbit", "1gbit"):
        with Network(topology.build("apn", {"workers": 1, "distance_km": 0,
                                            "rate": rate})) as net:
            for rep in range(reps):
                order = (False, True) if rep % 2 == 0 else (True, False)
                for frames in order:
                    offload.follow(net, frames=frames)
                    for sender, receiver in (("srv", "w1"), ("w1", "srv")):
                        busy0, total0 = cpu_times()
                        flow = iperf.run(net, sender, receiver, seconds=seconds)
                        busy1, total1 = cpu_times()
                        cpu = 100 * (busy1 - busy0) / max(1.0, total1 - total0)
                        print(f"{rate:7} {rep:>3} {'frames' if frames else 'full-size':12} "
                              f"{sender + '->' + receiver:8} {flow.mbit:>8.1f} {cpu:>11.0f}",
                              flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    part1(args.seconds)
    part2(args.seconds, args.reps)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
