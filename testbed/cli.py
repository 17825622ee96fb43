"""The `testbed` command. Composes the layers; the only place that prints or sets up logging.

    testbed topo list
    testbed topo show NAME [-p KEY=VALUE ...] [--json]
    testbed up NAME [-p KEY=VALUE ...]          build, print, hold until Ctrl-C, tear down
    testbed clean                               remove leftovers of crashed runs (only ours)
    testbed run FILE [--out DIR] [--resume]     run an experiment (TOML)
    testbed demo [--out DIR]                    the small default experiment
    testbed probe NAME [-p KEY=VALUE ...] | --run PREFIX  [--src H] [--dst H] [--count N]
                                                timestamped scapy probes: RTT, loss, reordering
    testbed analyse PCAP [--rate R] [--rtt-ms T] [--png F]   NFS READs and in-flight vs BDP

Any TestbedError becomes one line on stderr and exit status 2; Ctrl-C exits 130 after
teardown.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from typing import Any, Sequence

from rich.console import Console
from rich.table import Table

from testbed.errors import TestbedError

log = logging.getLogger("testbed")
out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


def _need_root(what: str) -> None:
    if os.geteuid() != 0:
        raise TestbedError(f"{what} needs root (network namespaces); run it with sudo or in "
                           "the lab kernel: lab/run .venv/bin/testbed ...")


def cmd_topo_list(args: argparse.Namespace) -> int:
    from testbed.topology import load_topologies
    table = Table("topology", "parameters (defaults)", "description", box=None)
    for name, entry in sorted(load_topologies().items()):
        params = ", ".join(f"{k}={p.default}" for k, p in entry.params.items())
        table.add_row(name, params, entry.doc)
    out.print(table)
    return 0


def cmd_topo_show(args: argparse.Namespace) -> int:
    from testbed import topology
    topo = topology.build(args.name, topology.parse_params(args.param))
    desc = topology.describe(topo)
    if args.json:
        print(json.dumps(desc, indent=2))
        return 0
    _print_description(desc)
    return 0


def _print_description(desc: dict[str, Any]) -> None:
    out.print(f"[bold]{desc['name']}[/bold] "
              + " ".join(f"{k}={v}" for k, v in desc["params"].items()))
    hosts = Table("host", "role", "address", box=None)
    for h in desc["hosts"]:
        hosts.add_row(h["name"], h["role"], h["ip"] or "")
    out.print(hosts)
    links = Table("link", "kind", "km", "delay ms", "RTT ms", "loss %", "rate Mbit/s",
                  "limit pkts", box=None)
    for l in desc["links"]:
        links.add_row(f"{l['a_intf']} <-> {l['b_intf']}", l["kind"], f"{l['distance_km']:g}",
                      f"{l['delay_ms']:.3f}", f"{l['rtt_ms']:.3f}", f"{l['loss_pct']:g}",
                      "" if l["rate_mbit"] is None else f"{l['rate_mbit']:g}",
                      "" if l["limit_pkts"] is None else str(l["limit_pkts"]))
    out.print(links)


def cmd_up(args: argparse.Namespace) -> int:
    from testbed import topology
    from testbed.network.engine import Network
    topo = topology.build(args.name, topology.parse_params(args.param))
    _need_root("testbed up")
    desc = topology.describe(topo)
    with Network(topo) as net:
        _print_description(desc)
        out.print(f"run prefix [bold]{net.prefix}[/bold]; namespaces: "
                  + ", ".join(net.namespace(n) for n in net.hosts))
        out.print("e.g. nsenter --net=/run/netns/" + net.namespace(net.hosts[-1])
                  + f" ping {net.address(net.hosts[0])}")
        out.print("up; press Ctrl-C to tear down", style="green")
        sys.stdout.flush()
        try:
            while True:
                signal.pause()
        except KeyboardInterrupt:
            out.print("tearing down")
    return 0


def cmd_clean(args: argparse.Namespace) -> int:
    _need_root("testbed clean")
    from testbed.cleanup import clean
    report = clean()
    if report.empty():
        out.print("nothing to clean")
    for what, items in (("runs", report.runs), ("killed PIDs", report.killed),
                        ("unmounted", report.unmounted), ("namespaces", report.namespaces),
                        ("folders", report.dirs)):
        if items:
            out.print(f"removed {what}: {', '.join(map(str, items))}")
    if report.skipped_live:
        out.print(f"left alone (still running): {', '.join(report.skipped_live)}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from testbed.experiment import run_file
    _need_root("testbed run")
    run_file(args.file, out_dir=args.out, resume=args.resume, console=out)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from testbed.experiment import DEMO_FILE, run_file
    _need_root("testbed demo")
    run_file(DEMO_FILE, out_dir=args.out, resume=False, console=out)
    return 0


def cmd_probe(args: argparse.Namespace) -> int:
    from testbed.packets import probe
    if args.count < 1 or not 0 <= args.interval_ms <= 10_000:
        raise TestbedError("probe: --count must be >= 1 and --interval-ms 0..10000")
    _need_root("testbed probe")
    kwargs = {"count": args.count, "interval_s": args.interval_ms / 1000.0,
              "src": args.src, "dst": args.dst}
    if args.run:
        if args.name or args.param:
            raise TestbedError("probe: give a topology NAME or --run PREFIX, not both")
        from testbed.network.engine import namespace_name
        src_ns, dst_ns = namespace_name(args.run, args.src), namespace_name(args.run, args.dst)
        report = probe.probe(src_ns, dst_ns, probe.address_in(dst_ns), **kwargs)
    else:
        if not args.name:
            raise TestbedError("probe: give a topology NAME (built for the probe) or "
                               "--run PREFIX (one held by `testbed up`)")
        from testbed import topology
        from testbed.network.engine import Network
        topo = topology.build(args.name, topology.parse_params(args.param))
        with Network(topo) as net:
            report = probe.probe(net.namespace(args.src), net.namespace(args.dst),
                                 net.address(args.dst), **kwargs)
    if args.json:
        print(json.dumps(report.as_dict(), indent=1))
    else:
        out.print(report.render())
    return 0


def cmd_analyse(args: argparse.Namespace) -> int:
    from testbed.packets import nfs_rpc
    from testbed.spec import parse_rate
    if args.rtt_ms < 0:
        raise TestbedError("analyse: --rtt-ms must be >= 0")
    bps = parse_rate(args.rate) * 1e6 if args.rate else 0.0
    a = nfs_rpc.analyse(args.pcap, rate_bps=bps, rtt_s=args.rtt_ms / 1000.0)
    for k, v in a.summary.items():
        out.print(f"{k:>26}  {v:.4g}" if isinstance(v, float) else f"{k:>26}  {v}")
    if args.png:
        out.print(f"plot: {nfs_rpc.plot(a, args.png)}")
    if args.csv:
        a.rpcs.to_csv(args.csv, index=False)
        out.print(f"RPCs: {args.csv}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="testbed", description=__doc__.split("\n\n")[0])
    p.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv debug)")
    sub = p.add_subparsers(dest="command", required=True)

    topo = sub.add_parser("topo", help="list or show topologies")
    tsub = topo.add_subparsers(dest="topo_command", required=True)
    tsub.add_parser("list", help="list topologies").set_defaults(func=cmd_topo_list)
    show = tsub.add_parser("show", help="show a topology's hosts and links")
    show.add_argument("name")
    show.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE")
    show.add_argument("--json", action="store_true", help="machine-readable output")
    show.set_defaults(func=cmd_topo_show)

    up = sub.add_parser("up", help="build a topology and hold it until Ctrl-C")
    up.add_argument("name")
    up.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE")
    up.set_defaults(func=cmd_up)

    sub.add_parser("clean", help="remove leftovers of crashed runs (only ours)").set_defaults(
        func=cmd_clean)

    run = sub.add_parser("run", help="run an experiment file (TOML)")
    run.add_argument("file")
    run.add_argument("--out", default=None, help="output folder (default results/<name>)")
    run.add_argument("--resume", action="store_true", help="skip points already done in --out")
    run.set_defaults(func=cmd_run)

    demo = sub.add_parser("demo", help="a small experiment that finishes in a few minutes")
    demo.add_argument("--out", default=None)
    demo.set_defaults(func=cmd_demo)

    pr = sub.add_parser("probe", help="probe a link with timestamped packets (scapy): RTT "
                        "min/median/p99, one-way loss with its 95 % interval, reordering")
    pr.add_argument("name", nargs="?", help="topology to build for the probe")
    pr.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE")
    pr.add_argument("--run", metavar="PREFIX", help="probe a topology held by `testbed up`")
    pr.add_argument("--src", default="w1", help="sending host (default w1)")
    pr.add_argument("--dst", default="srv", help="destination host (default srv)")
    pr.add_argument("--count", type=int, default=2000, help="probes (default 2000)")
    pr.add_argument("--interval-ms", type=float, default=1.0, help="gap between probes")
    pr.add_argument("--json", action="store_true", help="machine-readable output")
    pr.set_defaults(func=cmd_probe)

    an = sub.add_parser("analyse", help="dissect the NFS/RPC traffic of a capture (pcap): "
                        "READ sizes, RPCs and bytes in flight vs the BDP, retransmissions")
    an.add_argument("pcap")
    an.add_argument("--rate", default="", help="path rate for the BDP, e.g. 1gbit")
    an.add_argument("--rtt-ms", type=float, default=0.0, help="path RTT for the BDP")
    an.add_argument("--png", default="", help="write the in-flight plot here")
    an.add_argument("--csv", default="", help="write one row per RPC here")
    an.set_defaults(func=cmd_analyse)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = logging.WARNING - 10 * args.verbose
    logging.basicConfig(level=max(level, logging.DEBUG),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    main_pid = os.getpid()

    def on_term(signum: int, _frame: object) -> None:
        if os.getpid() != main_pid:  # a forked helper (pyroute2 forks): die as by default
            os._exit(128 + signum)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)
    try:
        return int(args.func(args) or 0)
    except TestbedError as exc:
        err.print(f"testbed: error: {exc}", soft_wrap=True)
        return 2
    except KeyboardInterrupt:
        err.print("testbed: interrupted")
        return 130
    except BrokenPipeError:
        return 141


if __name__ == "__main__":
    sys.exit(main())
