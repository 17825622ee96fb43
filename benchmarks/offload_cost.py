"""Benchmark (lab kernel): what netem sees with and without the testbed's offload setting,
and what single frames cost.

    lab/run .venv/bin/python -m benchmarks.offload_cost [--seconds 8] [--reps 2]

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

from benchmarks import common
from testbed import topology
from testbed.network import iperf, offload
from testbed.network.engine import Network
from testbed.procfs import busy_pct, cpu_times

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


def host_ifname(net: Network, host: str) -> str:
    """The host's one interface (not lo)."""
    return next(l.get_attr("IFLA_IFNAME") for l in net.ipr(host).get_links()
                if l.get_attr("IFLA_IFNAME") != "lo")


def apply(net: Network, setting: str, sender: str) -> None:
    """Put every host and switch port in one of SETTINGS (the sender's own interface
    is the one "TSO+GSO off, sender" changes)."""
    offload.follow(net, frames=setting == "testbed (frames)")
    for host in net.hosts:
        wanted = TSO_GSO_OFF if setting.startswith("TSO") and host == sender else TSO_GSO_ON
        offload.set_features(net.namespace(host), host_ifname(net, host), wanted)
        net.tcp.sysctl(host, "net/ipv4/route/flush", "1")


def frames_per_packet(net: Network, fibre: tuple[str, str], sender: str, receiver: str,
                      seconds: float) -> str:
    """One flow's frames per packet at the sender-side fibre end and its rate, as a cell."""
    way = 0 if sender == "srv" else 1
    before = net.read_fibre(*fibre)[way]
    flow = iperf.run(net, sender, receiver, seconds=seconds)
    after = net.read_fibre(*fibre)[way]
    fpp = (after.sent_pkts - before.sent_pkts) / max(1, after.sent_skbs - before.sent_skbs)
    return f"{fpp:6.2f} frames/pkt {flow.mbit:7.1f} Mbit/s"


def part1(seconds: float) -> None:
    """Frames per packet and rate per topology, flow and setting."""
    print("frames per packet at the sender-side fibre end, 1,000 km, 1 Gbit/s, 0.1 % loss")
    print(f"{'topology':10} {'flow':9} " + " ".join(f"{s:>30}" for s in SETTINGS))
    for name, params, fibre, flows in CASES:
        with Network(topology.build(name, {**params, "rate": "1gbit", "loss_pct": 0.1})) as net:
            for sender, receiver in flows:
                cells = []
                for setting in SETTINGS:
                    apply(net, setting, sender)
                    cells.append(frames_per_packet(net, fibre, sender, receiver, seconds))
                print(f"{name:10} {sender + '->' + receiver:9} "
                      + " ".join(f"{c:>30}" for c in cells), flush=True)


def part2(seconds: float, reps: int) -> None:
    """Rate and guest CPU of full-size packets vs single frames at 0 km, both ways."""
    print("\ncost at 0 km: one iperf3 flow, full-size packets vs single frames")
    print(f"{'rate':7} {'rep':>3} {'packets':12} {'flow':8} {'Mbit/s':>8} {'guest CPU %':>11}")
    for rate in ("10gbit", "1gbit"):
        with Network(topology.build("apn", {"workers": 1, "distance_km": 0,
                                            "rate": rate})) as net:
            for rep in range(reps):
                for frames in common.alternate((False, True), rep):
                    offload.follow(net, frames=frames)
                    for sender, receiver in (("srv", "w1"), ("w1", "srv")):
                        before = cpu_times()
                        flow = iperf.run(net, sender, receiver, seconds=seconds)
                        cpu = busy_pct(before, cpu_times())
                        print(f"{rate:7} {rep:>3} {'frames' if frames else 'full-size':12} "
                              f"{sender + '->' + receiver:8} {flow.mbit:>8.1f} {cpu:>11.0f}",
                              flush=True)


def main() -> int:
    """Both parts, one after the other."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    part1(args.seconds)
    part2(args.seconds, args.reps)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
