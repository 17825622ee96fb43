"""Benchmark (lab kernel): does a lossy fibre cost one TCP flow what TCP's response
function says? One iperf3 flow srv -> w1 (the NFS read direction) on `apn` at 0.01, 0.1
and 1 % loss (each direction) over 60, 1,000 and 3,000 km; prints measured / model per
point and a closing line `RATIO min=<x> max=<y>` over the points the lab could carry.

    lab/run .venv/bin/python -m benchmarks.loss_fidelity [--events 100] [--max-seconds 120]

Model: the CUBIC response function of RFC 8312 section 5 (the larger of CUBIC's own mean
window and its TCP-friendly AIMD estimate) for the congestion control the sender really
runs (read from the namespace and from iperf3), MSS from the MTU, at the configured RTT.
Every point here lies in CUBIC's TCP-friendly region, where the prediction equals Mathis's
(Reno, sqrt(3/(2p))).

Rate 10 Gbit/s: htb never throttles, so the fibre's rate is never the limit. A point is
excluded from the RATIO range, and says why on its line, when
  * the guest CPU was >= 90 % busy (emulator-limited: the lab kernel moves ~2 Gbit/s of
    MTU-sized frames at 0 km with its one CPU),
  * the flow's own smoothed RTT (iperf3's mean of tcpi_rtt) exceeds the fibre's by more
    than 25 % (host-limited: the lab's end hosts, one UML CPU with ~15 us system calls and
    10 ms jiffies, add delay to TCP's loop comparable to the fibre's; an RTT 25 % off
    moves Mathis's rate by 0.8x, the whole width of the 0.75-1.25 goal), or
  * the model asks for >= 90 % of the rate (link-limited).
Columns tlp and rto count TCP's tail-loss probes and retransmission timeouts (nstat in the
sender's namespace): waits on timers that no response function models.

Duration: a loss-limited flow's rate is an average over sawtooth cycles, one per loss
event, so a point runs until ~`--events` loss events are expected (p x model packet rate
x seconds), at least 20 s and at most `--max-seconds`; its line prints the loss events
netem really caused and a 95 % interval from the 1-s rates. A warm-up of 200 RTTs (2-8 s)
is left out: slow start overshoots the loss-limited window ~40x at 0.01 %, and ~10
multiplicative decreases (~160 RTTs) bring it back.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from testbed import topology
from testbed.model import tcp as tcp_model
from testbed.network import iperf
from testbed.network.engine import Network
from testbed.procfs import busy_pct, cpu_times
from testbed.spec import FibreSpec

DISTANCES_KM = (60, 1000, 3000)
LOSSES_PCT = (0.01, 0.1, 1.0)
RATE = "10gbit"
MIN_S = 20.0
CPU_LIMIT_PCT = 90.0
SRTT_LIMIT = 1.25  # flow srtt / fibre RTT above which TCP's loop is not the fibre's
NSTAT = ("TcpExtTCPLossProbes", "TcpExtTCPTimeouts")
LINK_LIMIT = 0.9
GOAL = (0.75, 1.25)


def tcp_counters(net: Network, node: str) -> dict[str, int]:
    """TCP's loss-probe and timeout counters in node's namespace (nstat, no history)."""
    out = net.procs.run(node, ["nstat", "-asz", *NSTAT]).stdout
    counts = {key: 0 for key in NSTAT}
    for line in out.splitlines():
        cols = line.split()
        if len(cols) >= 2 and cols[0] in counts:
            counts[cols[0]] = int(cols[1])
    return counts


def seconds_for(pred: tcp_model.Prediction, events: int, max_s: float) -> float:
    """How long to run a point for ~`events` loss events at the model's packet rate,
    within MIN_S and max_s."""
    pps = pred.mbit * 1e6 / 8 / pred.mss_bytes
    return min(max_s, max(MIN_S, events / (pred.loss_pct / 100 * pps)))


def warmup_s(rtt_ms: float) -> float:
    """The warm-up left out of a point: 200 RTTs, within 2-8 s."""
    return min(8.0, max(2.0, 200 * rtt_ms / 1000))


@dataclass
class Point:
    """One measured point: the fibre, the model's prediction, the flow and what the
    fibre, TCP's counters and the guest's CPU saw meanwhile."""

    km: float
    loss: float
    spec: FibreSpec  # the fibre as set
    pred: tcp_model.Prediction
    secs: float
    flow: iperf.Flow
    drops: int       # frames netem dropped
    wire: float      # of the frames sent, % dropped
    cpu: float       # guest CPU busy %
    tlp: int
    rto: int


def measure(net: Network, cc: str, mtu: int, km: float, loss: float,
            args: argparse.Namespace) -> Point:
    """One flow srv -> w1 on the fibre set to km and loss, long enough for the loss
    events asked for."""
    spec = net.set_fibre("srv", "s1", distance_km=km, loss_pct=loss)
    pred = tcp_model.predict(cc, mtu, spec.rtt_ms, loss)
    secs = seconds_for(pred, args.events, args.max_seconds)
    before, tcp0, cpu0 = net.read_fibre("srv", "s1")[0], tcp_counters(net, "srv"), cpu_times()
    flow = iperf.run(net, "srv", "w1", seconds=secs, omit_s=warmup_s(spec.rtt_ms))
    cpu = busy_pct(cpu0, cpu_times())
    after, tcp1 = net.read_fibre("srv", "s1")[0], tcp_counters(net, "srv")
    tlp, rto = (tcp1[k] - tcp0[k] for k in NSTAT)
    drops = after.netem_drops - before.netem_drops
    frames = after.sent_pkts - before.sent_pkts + drops
    return Point(km, loss, spec, pred, secs, flow, drops, 100 * drops / max(1, frames), cpu,
                 tlp, rto)


def note(p: Point, cc: str) -> tuple[str, bool]:
    """(what the point's line says about it, whether it counts in the RATIO range)."""
    text = f"sender ran {p.flow.cc}, not {cc}; " if p.flow.cc != cc else ""
    if p.cpu >= CPU_LIMIT_PCT:
        return text + f"emulator-limited (guest CPU {p.cpu:.0f} %): excluded", False
    if p.flow.mean_rtt_ms > SRTT_LIMIT * p.spec.rtt_ms:
        return text + (f"host-limited (flow srtt {p.flow.mean_rtt_ms / p.spec.rtt_ms:.1f}x "
                       f"the fibre's RTT): excluded"), False
    if p.pred.mbit >= LINK_LIMIT * p.spec.rate_mbit:
        return text + "link-limited: excluded", False
    return text, True


def row(p: Point, text: str) -> str:
    """The point's line of the table."""
    lo, hi = p.flow.interval_ci95()
    return (f"{p.km:>5g} {p.spec.rtt_ms:>7.3f} {p.loss:>6g} {p.secs:>4.0f} {p.drops:>6} "
            f"{p.wire:>11.4f} {p.flow.mean_rtt_ms:>7.2f} {p.cpu:>5.0f} "
            f"{p.flow.retransmits:>6} {p.tlp:>4} {p.rto:>3} "
            f"{p.flow.mbit:>8.1f} {lo:>6.1f}-{hi:<6.1f} {p.pred.mbit:>8.1f} "
            f"{p.pred.region:>12} {p.flow.mbit / p.pred.mbit:>6.2f}  {text}")


def print_header(cc: str, mtu: int) -> None:
    """What is measured, the model, and the table's column names."""
    print(f"loss fidelity: one TCP flow srv -> w1 (iperf3), apn, rate {RATE}, MTU {mtu} "
          f"(MSS {tcp_model.mss_bytes(mtu)}), cc {cc}, loss on both directions")
    print(f"model: {tcp_model.MODELS.get(cc, '?')} at the configured RTT")
    print(f"{'km':>5} {'RTT ms':>7} {'loss %':>6} {'s':>4} {'events':>6} "
          f"{'wire loss %':>11} {'srtt ms':>7} {'cpu %':>5} {'retr':>6} {'tlp':>4} "
          f"{'rto':>3} {'Mbit/s':>8} {'95% CI':>13} {'model':>8} {'region':>12} "
          f"{'ratio':>6}  note")


def print_closing(ratios: list[float], excluded: list[str]) -> None:
    """How many points were compared and the RATIO line over them."""
    inside = sum(GOAL[0] <= r <= GOAL[1] for r in ratios)
    print(f"{len(ratios)} points compared ({inside} within {GOAL[0]}-{GOAL[1]}); excluded: "
          f"{', '.join(excluded) or 'none'}")
    if ratios:
        print(f"RATIO min={min(ratios):.2f} max={max(ratios):.2f}")
    else:
        print("RATIO min=nan max=nan")


def main() -> int:
    """Measure every distance and loss, print each against the model and the range."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=100, help="loss events to aim for per point")
    ap.add_argument("--max-seconds", type=float, default=120.0)
    ap.add_argument("--distances", type=float, nargs="*", default=DISTANCES_KM)
    ap.add_argument("--losses", type=float, nargs="*", default=LOSSES_PCT)
    args = ap.parse_args()
    topo = topology.build("apn", {"workers": 1, "distance_km": max(args.distances),
                                  "rate": RATE, "loss_pct": max(args.losses)})
    with Network(topo) as net:  # buffers sized for the longest span: built there
        cc = net.tcp.read_sysctl("srv", "net.ipv4.tcp_congestion_control")
        mtu = net.fibre_links()[("srv", "s1")].mtu
        print_header(cc, mtu)
        ratios: list[float] = []
        excluded: list[str] = []
        for km in args.distances:
            for loss in args.losses:
                p = measure(net, cc, mtu, km, loss, args)
                text, compared = note(p, cc)
                if compared:
                    ratios.append(p.flow.mbit / p.pred.mbit)
                if "excluded" in text:
                    excluded.append(f"{km:g} km {loss:g} %")
                print(row(p, text), flush=True)
        print_closing(ratios, excluded)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
