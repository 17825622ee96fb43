"""Benchmark (host side): what the join between two lab kernels carries, by layer, for
one set of UML vector-device options: ping RTT, a TCP stream and a UDP stream (iperf3)
between two user-mode kernels on the two ends of a host veth pair (--join tap: two host
taps on a host bridge).

    .venv/bin/python -m benchmarks.join_probe [--options gro=1,depth=128] [--seconds 3]

--options are the vector device's (`lab/run --link HOSTIF,KEY=VALUE,...`: vec=0, gro=0,
depth=, mtu=, qdisc_bypass=...); --offloads on leaves the host veth's offloads on. Closes
with

    JOIN options=<o> offloads=<on|off> rtt_ms=<avg> tcp_Mbit_s=<x> udp_Mbit_s=<y> udp_loss_pct=<z>

The join's host devices (apn2k-<pid>-*) and both kernels are gone on exit. This finds what stalls the
join (docs/multi-cpu.md, "two kernels"); benchmarks/two_kernels measures NFS over it.
"""

from __future__ import annotations

import argparse
import json
import re
import sys

from benchmarks import two_kernels
from testbed.paths import REPO

MARK = "JOIN_PROBE "

SERVER = r"""
ip link set vec0 up; ip addr add {server}/24 dev vec0
ip link set vec0 mtu {mtu} 2>/dev/null || true
iperf3 -s -D
ethtool -k vec0 2>/dev/null | grep -E '^(tcp-segmentation-offload|generic-receive-offload|tx-checksumming|rx-checksumming):' | tr '\n' ' '; echo
{python} -c "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('{server}', 9999)); s.settimeout(300); s.recv(1)"
"""

CLIENT = r"""
ip link set vec0 up; ip addr add {client}/24 dev vec0
ip link set vec0 mtu {mtu} 2>/dev/null || true
i=0; until ping -c 1 -W 1 {server} >/dev/null 2>&1; do i=$((i+1)); [ $i -lt 60 ] || exit 1; done
sleep 1
rtt=$(ping -c 20 -i 0.05 -q {server} | sed -n 's|.*= [0-9.]*/\([0-9.]*\)/.*|\1|p')
i=0; until tcp=$(iperf3 -c {server} -t {seconds} -J 2>/dev/null); do i=$((i+1)); [ $i -lt 20 ] || break; sleep 0.5; done
sleep 0.5
udp=$(iperf3 -c {server} -u -b {udp_rate} -l 1400 -t {seconds} -J 2>/dev/null)
{python} - "$rtt" <<PYEOF
import json, sys
tcp = json.loads('''$tcp''' or "{{}}")
udp = json.loads('''$udp''' or "{{}}")
t = tcp.get("end", {{}}).get("sum_received", {{}})
u = udp.get("end", {{}}).get("sum", {{}})
print("{mark}" + json.dumps({{"rtt_ms": float(sys.argv[1] or "nan"),
    "tcp_Mbit_s": t.get("bits_per_second", 0) / 1e6,
    "tcp_retransmits": tcp.get("end", {{}}).get("sum_sent", {{}}).get("retransmits"),
    "udp_Mbit_s": u.get("bits_per_second", 0) / 1e6,
    "udp_loss_pct": u.get("lost_percent")}}), flush=True)
PYEOF
echo "vec0 stats: $(ethtool -S vec0 2>/dev/null | tr -s ' \n' ' ')"
{python} -c "import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('{server}', 9999))"
"""


def parse_args() -> argparse.Namespace:
    """The probe's options."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--options", default="", help="vector device KEY=VALUE,... (lab/run --link)")
    ap.add_argument("--offloads", choices=("on", "off"), default="off")
    ap.add_argument("--join", choices=("veth", "tap"), default="veth",
                    help="veth: a host veth pair, raw sockets; tap: two host taps on a "
                         "host bridge (transport=tap)")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--mtu", type=int, default=1500)
    ap.add_argument("--udp-rate", default="2G")
    return ap.parse_args()


def main() -> None:
    """Two kernels, one probe run, the closing line."""
    args = parse_args()
    run = REPO / "results" / two_kernels.PREFIX
    run.mkdir(parents=True, exist_ok=True)
    fmt = dict(server=two_kernels.SERVER_IP, client=two_kernels.CLIENT_IP, mtu=args.mtu,
               seconds=args.seconds, udp_rate=args.udp_rate, mark=MARK,
               python=sys.executable)
    (run / "server.sh").write_text(SERVER.format(**fmt))
    (run / "client.sh").write_text(CLIENT.format(**fmt))
    suffix = f",{args.options}" if args.options else ""  # lab/run picks tap for a tap
    join = (two_kernels.tap_bridge() if args.join == "tap" else
            two_kernels.veth_pair(offloads=args.offloads == "on"))
    server, client, _ = two_kernels.boot_pair(join, suffix, run)
    found = re.search(f"^{MARK}(.*)$", client.out, re.M)
    if not found:
        sys.exit(f"join_probe: no result (server exit {server.rc}: {server.out[-400:]!r}; "
                 f"client exit {client.rc}: {client.out[-400:]!r})")
    res = json.loads(found.group(1))
    for line in (server.out + client.out).splitlines():
        if line.startswith(("vec0 stats:", "tcp-segmentation", "rx-checksumming")):
            print(line.strip())
    print(f"JOIN join={args.join} options={args.options or 'default'} "
          f"offloads={args.offloads} "
          f"rtt_ms={res['rtt_ms']:.3f} tcp_Mbit_s={res['tcp_Mbit_s']:.0f} "
          f"tcp_retransmits={res['tcp_retransmits']} udp_Mbit_s={res['udp_Mbit_s']:.0f} "
          f"udp_loss_pct={res['udp_loss_pct']}")


if __name__ == "__main__":
    main()
