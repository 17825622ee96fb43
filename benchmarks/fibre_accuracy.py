"""Benchmark (lab kernel): configured vs measured RTT, loss and shaped rate of the fibre.

    lab/run .venv/bin/python -m benchmarks.fibre_accuracy
"""

import argparse

from testbed import topology
from testbed.network import path_metrics
from testbed.network.engine import Network


def rtts(net: Network) -> None:
    """Configured vs measured TCP round trips at four distances."""
    srv, w1 = net.namespace("srv"), net.namespace("w1")
    print("distance_km  configured_rtt_ms  median_ms  min_ms  p99_ms  error_ms")
    for km in (0, 60, 1000, 3000):
        spec = net.set_fibre("srv", "s1", distance_km=km)
        r = path_metrics.tcp_rtt(w1, srv, net.address("srv"), count=30)
        print(f"{km:>11}  {spec.rtt_ms:>17.3f}  {r.median_ms:>9.3f}  {r.min_ms:>6.3f}  "
              f"{r.p99_ms:>6.3f}  {r.median_ms - spec.rtt_ms:>+8.3f}")


def losses(net: Network) -> None:
    """Configured vs measured loss of UDP datagrams, with a 99.9 % interval."""
    srv, w1 = net.namespace("srv"), net.namespace("w1")
    for loss in (0.1, 1.0):
        net.set_fibre("srv", "s1", distance_km=100, loss_pct=loss)
        sent, got = path_metrics.udp_loss(srv, w1, net.address("w1"), count=5000)
        lo, hi = path_metrics.binomial_ci(sent - got, sent)
        print(f"loss configured {loss}%: measured {100 * (sent - got) / sent:.3f}% "
              f"(99.9% CI {100 * lo:.3f}-{100 * hi:.3f}%)")


def rate(net: Network) -> None:
    """One TCP flow against the shaped rate at 3,000 km, and what netem and htb dropped."""
    srv, w1 = net.namespace("srv"), net.namespace("w1")
    net.set_fibre("srv", "s1", distance_km=3000, loss_pct=0)
    mbit = path_metrics.tcp_goodput(srv, w1, net.address("w1"), seconds=8, warmup_s=2)
    fwd, _ = net.read_fibre("srv", "s1")
    print(f"rate 200 Mbit/s at 29.4 ms RTT: one TCP flow {mbit:.1f} Mbit/s "
          f"({100 * (mbit / 200 - 1):+.1f}%), netem drops {fwd.netem_drops}, htb drops {fwd.htb_drops}")


def main() -> None:
    """Round trips, loss and rate on one apn network at 200 Mbit/s."""
    argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0]).parse_args()
    with Network(topology.build("apn", {"workers": 1, "distance_km": 0,
                                        "rate": "200mbit"})) as net:
        rtts(net)
        losses(net)
        rate(net)


if __name__ == "__main__":
    main()
