"""The `testbed` command. Composes the layers; the only place that prints or sets up logging.

    testbed topo list
    testbed topo show NAME [-p KEY=VALUE ...] [--json]
    testbed up NAME [-p KEY=VALUE ...]          build, print, hold until Ctrl-C, tear down
    testbed clean                               remove leftovers of crashed runs (only ours)
    testbed knobs                               every knob experiments can set
    testbed run FILE [--out DIR] [--resume] [--check] [-p KNOB=VALUE ...]
                [--parallel N|auto] [--scheduler tcp://HOST:PORT]
    testbed demo [--out DIR] [--check] [...]    the small default experiment
    testbed advise (--workload W | --dlio F.yaml | --checkpoint F.yaml | --trace F |
                    --experiment F.toml) --distance-km D
                (--slowdown-pct G | --au-pct G | --lost-pct G | --write-s G)
                [--checkpoint-interval-s S] [--rate R] [--workers N] [--allow KNOB,...]
                [--model-only] [--out DIR]      which settings buy the distance back
                [--servers A-B [--gpus G] [--fibres M]] --model-only
                                                how many G-GPU servers the line feeds
    testbed probe NAME [-p KEY=VALUE ...] | --run PREFIX  [--src H] [--dst H] [--count N]
    testbed analyse PCAP [--rate R] [--rtt-ms T] [--png F] [--csv F]
    testbed report DIR --markdown [--by-event]  a results folder's table as GitHub markdown
    testbed docs [--check] [--tests]            regenerate (check) README/docs result tables
    testbed trace record [--root DIR] [--out FILE] [--timeout S] -- CMD...
                                                record a job's file I/O (strace)
    testbed trace show FILE                     what a recorded trace holds

Exit status: 0 done; 1 a runtime failure (or a point of an experiment failed); 2 bad input
(one line naming the file/key/value and what is allowed; nothing created in the kernel);
130 interrupted (after teardown).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence

from rich.console import Console
from rich.progress import Progress, TaskID
from rich.table import Table
from rich.text import Text

from testbed import atomic, userfiles
from testbed.errors import SpecError, TestbedError

log = logging.getLogger("testbed")
out = Console(highlight=False, markup=False, width=None if sys.stdout.isatty() else 160)

EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 1, 2, 130


def fail_line(message: str) -> None:
    """Print one error line on stderr, exactly as given (no markup, no wrapping)."""
    sys.stderr.write("testbed: error: " + " ".join(str(message).split()) + "\n")
    sys.stderr.flush()


def _need_root(what: str) -> None:
    if os.geteuid() != 0:
        raise TestbedError(f"{what} needs root (network namespaces); run it with sudo or in "
                           "the lab kernel: lab/run .venv/bin/testbed ...")


def _params(pairs: list[str]) -> dict[str, str]:
    from testbed.topology import parse_params
    return parse_params(pairs)


def cmd_topo_list(args: argparse.Namespace) -> int:
    """Print every topology with its parameters."""
    from testbed.topology import load_topologies
    table = Table("topology", "parameters (defaults)", "description", box=None)
    for name, entry in sorted(load_topologies().items()):
        params = ", ".join(f"{k}={p.default}" for k, p in entry.params.items())
        table.add_row(name, params, entry.doc)
    out.print(table)
    return 0


def cmd_topo_show(args: argparse.Namespace) -> int:
    """Print a topology's hosts and links (or JSON)."""
    from testbed import topology
    topo = topology.build(args.name, _params(args.param))
    desc = topology.describe(topo)
    if args.json:
        print(json.dumps(desc, indent=2))
        return 0
    _print_description(desc)
    return 0


def _print_description(desc: dict[str, Any]) -> None:
    out.print(f"[bold]{desc['name']}[/bold] "
              + " ".join(f"{k}={v}" for k, v in desc["params"].items()), markup=True)
    hosts = Table("host", "role", "address", box=None)
    for h in desc["hosts"]:
        hosts.add_row(h["name"], h["role"], h["ip"] or "")
    out.print(hosts)
    links = Table("link", "fibre", "kind", "km", "delay ms", "RTT ms", "loss %", "rate Mbit/s",
                  "limit pkts", box=None)
    for l in desc["links"]:
        links.add_row(f"{l['a_intf']} <-> {l['b_intf']}", l.get("name", ""), l["kind"],
                      f"{l['distance_km']:g}", f"{l['delay_ms']:.3f}", f"{l['rtt_ms']:.3f}",
                      f"{l['loss_pct']:g}",
                      "" if l["rate_mbit"] is None else f"{l['rate_mbit']:g}",
                      "" if l["limit_pkts"] is None else str(l["limit_pkts"]))
    out.print(links)


def cmd_up(args: argparse.Namespace) -> int:
    """Build a topology, print it, hold it until Ctrl-C, tear it down."""
    from testbed import topology
    from testbed.network.engine import Network
    topo = topology.build(args.name, _params(args.param))
    _need_root("testbed up")
    desc = topology.describe(topo)
    with Network(topo) as net:
        _print_description(desc)
        out.print(f"run prefix {net.prefix}; namespaces: "
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


def cmd_knobs(args: argparse.Namespace) -> int:
    """Print every knob an experiment can fix, sweep or search (the dimension table)."""
    from testbed.experiment.plan.dimensions import DIMENSIONS
    table = Table("knob", "unit", "values", "table", "changes", "baseline", "what",
                  box=None)
    for d in DIMENSIONS:
        name = f"{d.name} (fibre.LINK.{d.name})" if d.per_link else d.name
        where = f"[{d.section}] {d.section_key}" if d.section else ""
        cells = [name, d.unit, d.describe_range(), where, "live" if d.live else "new testbed",
                 "" if d.baseline is None else str(d.baseline), d.help]
        table.add_row(*(Text(c) for c in cells))  # literal: "[server]" is not markup
    out.print(table)
    out.print(_sources_table(DIMENSIONS))
    out.print(_host_profiles_table())
    return 0


def _sources_table(dims: Sequence[Any]) -> Table:
    """Where the knobs' defaults come from (the rows that say: docs/hosts.md)."""
    table = Table("knob", "default", "source", box=None,
                  title="where the defaults come from (docs/hosts.md)", title_justify="left")
    for d in dims:
        if d.source:
            table.add_row(*(Text(c) for c in (d.name, _shown(d.default), d.source)))
    return table


def _host_profiles_table() -> Table:
    """The host profiles the `host` knob names besides [hosts.NAME]: their values."""
    from testbed.schema import HOST_PROFILES
    table = Table("host", "what", "values (the rest: the defaults)", "source", box=None,
                  title="host profiles (host = NAME)", title_justify="left")
    for p in HOST_PROFILES.values():
        values = ", ".join(f"{k}={_shown(v)}" for k, v in p.values.items())
        table.add_row(*(Text(c) for c in (p.name, p.what, values or "-", p.source)))
    return table


def _shown(value: Any) -> str:
    """A default as `testbed knobs` shows it ("none" for no limit, 400000 for 400000.0)."""
    from testbed.schema import NO_LIMIT, number
    if isinstance(value, float):
        return NO_LIMIT if value == float("inf") else number(value)
    return str(value)


def cmd_clean(args: argparse.Namespace) -> int:
    """Remove what crashed runs left behind (never a live run's objects)."""
    _need_root("testbed clean")
    from testbed.clean import clean
    report = clean()
    if report.empty():
        out.print("nothing to clean")
    for what, items in (("runs", report.runs), ("killed PIDs", report.killed),
                        ("unmounted", report.unmounted), ("namespaces", report.namespaces),
                        ("folders", report.dirs)):
        if items:
            out.print(f"removed {what}: {', '.join(map(str, items))}")
    for line in report.restored:
        out.print(f"kernel: {line}")
    for line in report.problems:
        out.print(f"not removed: {line}")
    if report.skipped_live:
        out.print(f"left alone (still running): {', '.join(report.skipped_live)}")
    return 0 if not report.problems else EXIT_FAILED


class ProgressListener:
    """Draws a progress bar on a terminal, one line per finished point otherwise."""

    def __init__(self, console: Console) -> None:
        """A bar on `console` when it is a terminal; counts start at zero."""
        self.console = console
        self.progress = Progress(console=console, refresh_per_second=2,
                                 disable=not console.is_terminal)
        self.task: TaskID | None = None
        self.total = 0
        self.count = 0

    def planned(self, total: int, done: int) -> None:
        """Start the bar (total may include a search's most probes)."""
        self.total, self.count = total, done
        self.progress.start()
        self.task = self.progress.add_task("points", total=total, completed=done)

    def started(self, run_id: str) -> None:
        """Show which point runs."""
        if self.task is not None:
            self.progress.update(self.task, description=run_id)

    def finished(self, run_id: str, rows: list[dict[str, Any]], seconds: float) -> None:
        """Advance; without a terminal print one line per point."""
        self.count += 1
        if self.task is not None:
            self.progress.advance(self.task)
        if not self.console.is_terminal:
            au = [r["au_pct"] for r in rows if r["status"] == "ok"]
            what = f"AU {sum(au) / len(au):.1f} %" if au else f"FAILED: {rows[0]['reason']}"
            if rows[0].get("emulator_limited") is True:
                what += f", emulator ({rows[0].get('emulator_reason', '')})"
            again = rows[0].get("remeasured") or 0
            what += f", measured {again + 1} times" if again else ""
            print(f"[{self.count}] {run_id}: {what} ({seconds:.1f} s)", flush=True)

    def stop(self) -> None:
        """Remove the bar."""
        self.progress.stop()


def _run_experiment(path: Path, args: argparse.Namespace) -> int:
    """Load an experiment; --check: the plan resolved at a typical lab kernel, as a table
    and an estimate; else measure it (here, or in lab kernels from the host) and report."""
    from testbed.experiment import run_plan
    from testbed.experiment.run import estimate
    from testbed.experiment.plan import plan as plan_mod
    from testbed.experiment.resolve import resolve
    plan = plan_mod.load(path, _params(args.param))
    if args.check:
        table, lines = estimate.describe(resolve.nominal(plan))
        out.print(table)
        for line in lines:
            out.print(line, markup=False)
        return 0
    outdir = Path(args.out) if args.out else Path("results") / plan.name
    on_host = _on_lab_kernels(args)
    if not on_host:
        _need_root("testbed run")
    listener = ProgressListener(out)
    try:
        if on_host:
            outcome = _run_distributed(plan, outdir, args, listener)
        else:
            plan, outcome = run_plan(plan, outdir, resume=args.resume, listener=listener)
    finally:
        listener.stop()
    return _report(plan, outdir, outcome)


def _on_lab_kernels(args: argparse.Namespace) -> bool:
    """Whether to measure in lab kernels started from here: asked for (--parallel,
    --scheduler), or this kernel cannot measure (no netem/nfsd: a build host)."""
    from testbed import labkernel
    asked = args.parallel is not None or args.scheduler is not None
    if os.environ.get("APN_LAB_KERNEL"):
        if asked:
            raise SpecError("--parallel and --scheduler start lab kernels from the host: "
                            "run `testbed run` outside lab/run")
        return False
    return asked or not labkernel.can_measure_here()


def _run_distributed(plan: Any, outdir: Path, args: argparse.Namespace,
                     listener: ProgressListener) -> Any:
    """Measure the plan in lab kernels started from here (--parallel) or on Dask
    workers (--scheduler); print how the runs were spread."""
    from testbed.experiment.run import distribute, pools
    if args.scheduler is not None:
        pools.check_address(args.scheduler)
    opts = distribute.Options(parallel=args.parallel or "auto", scheduler=args.scheduler,
                              overrides=tuple(_params(args.param).items()))
    outcome = distribute.run(plan, outdir, opts, resume=args.resume, listener=listener)
    listener.stop()
    execution = distribute.read_execution(outdir)
    if execution:
        out.print(execution, markup=False)
    return outcome


def _report(plan: Any, outdir: Path, outcome: Any) -> int:
    """Build and print the report of a results folder; the exit status (EXIT_FAILED
    when a point failed)."""
    from testbed.experiment.report import report
    rep = report.build(outdir, plan)
    out.print(rep.table)
    for line in rep.lines:
        out.print(line, markup=False)
    out.print("results: " + "  ".join(str(f) for f in rep.files), markup=False)
    if outcome.failed:
        fail_line(f"{len(outcome.failed)} of {outcome.measured + len(outcome.failed)} point "
                  "run(s) failed: see the reason column of results.csv")
        return EXIT_FAILED
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """Run (or --check) an experiment file; --dlio puts a DLIO workload config in its
    workload's place (without a file: experiments/dlio.toml, 0-3,000 km)."""
    from testbed.experiment import DLIO_FILE
    if args.file is None and args.dlio is None:
        raise SpecError("run: give an experiment file, or --dlio FILE.yaml to run a DLIO "
                         "workload config in experiments/dlio.toml")
    if args.dlio is not None:  # absolute: the lab kernels read it from another folder
        args.param = [*args.param, f"dlio={Path(args.dlio).absolute()}"]
    return _run_experiment(Path(args.file) if args.file else DLIO_FILE, args)


def cmd_demo(args: argparse.Namespace) -> int:
    """Run (or --check) the demo experiment."""
    from testbed.experiment import DEMO_FILE
    return _run_experiment(DEMO_FILE, args)


JOB_FLAGS = ("workload", "dlio", "checkpoint", "trace", "experiment")  # advise's job
GOAL_FLAGS = ("slowdown_pct", "au_pct", "lost_pct", "write_s")


def _advise_question(args: argparse.Namespace) -> tuple[Any, Any]:
    """The scenario and the goal the command line asks about: the job (a preset, or a
    file read here: a malformed one is one line before anything is written), the fibre
    (an experiment file's farthest point where the line leaves it out) and the goal."""
    from testbed.experiment.advise import advise as adv
    from testbed.experiment.advise import job
    flag = next(f for f in JOB_FLAGS if getattr(args, f) is not None)
    kind = "preset" if flag == "workload" else flag
    source, label, figures = "", args.workload, {}
    if kind != "preset":
        path = Path(getattr(args, flag)).absolute()
        job.kind_of_file(kind, path)
        source, label = str(path), path.name
        if kind == "experiment":
            figures = job.experiment_tables(source)[1]
    if args.distance_km is None and "distance_km" not in figures:
        raise SpecError("advise: --distance-km is needed (an experiment file gives its "
                        "farthest point's)")
    if args.checkpoint_interval_s is not None and not (
            kind == "checkpoint" or figures.get("kind") == "checkpoint"):
        raise SpecError("advise: --checkpoint-interval-s is for a checkpoint job "
                        "(--checkpoint FILE.yaml)")
    for name, value in (("distance_km", args.distance_km),
                        ("checkpoint_interval_s", args.checkpoint_interval_s)):
        _in_bounds(name, value)
    given = {k: getattr(args, k) for k in ("distance_km", "rate", "loss_pct", "workers",
                                           "topology", "host")
             if getattr(args, k) is not None}
    given.update(_servers_scenario(args))
    defaults = {"rate": "100gbit", "loss_pct": 0.0, "topology": "apn",
                "host": adv.default("host"),
                "workers": job.default_workers(kind, source) if source else 1}
    chosen = {**defaults, **{k: v for k, v in figures.items() if k != "kind"}, **given}
    s = adv.Scenario(workload=label, files=args.files, repetitions=args.repetitions,
                     kind=kind, source=source, interval_s=args.checkpoint_interval_s,
                     **chosen)
    metric = next(g for g in GOAL_FLAGS if getattr(args, g) is not None)
    return s, adv.Goal(metric, getattr(args, metric))


def _servers_scenario(args: argparse.Namespace) -> dict[str, Any]:
    """What --servers, --gpus and --fibres set of advise's scenario: for the question
    how many servers a line feeds, the cluster topology (unless --topology says)."""
    if args.servers is None:
        if (args.gpus, args.fibres) != (None, None):
            raise SpecError("advise: --gpus and --fibres size the servers of --servers")
        return {}
    if args.workers is not None:
        raise SpecError("advise: --servers counts servers of --gpus workers; --workers is "
                        "for a topology of workers (apn)")
    return {"topology": args.topology or "cluster",
            **{k: v for k, v in (("gpus", args.gpus), ("fibres", args.fibres))
               if v is not None}}


def _in_bounds(knob: str, value: float | None) -> None:
    """A flag's number within its knob's bounds (schema.py); SpecError naming the flag."""
    from testbed.experiment.plan.dimensions import BY_NAME
    d = BY_NAME[knob]
    if value is not None and not (d.lo or 0) <= value <= (d.hi or math.inf):
        raise SpecError(f"--{knob.replace('_', '-')}: {value:g} is out of range: "
                        f"{d.lo:g} .. {d.hi:g}{' ' + d.unit if d.unit else ''}")


def cmd_advise(args: argparse.Namespace) -> int:
    """The model's cheapest settings that meet the goal, then (unless --model-only) the
    best confirmed in emulation."""
    import time
    from testbed.experiment.advise import advice_grid, confirm
    from testbed.experiment.advise import advise as adv
    t0 = time.perf_counter()
    s, goal = _advise_question(args)
    allowed = tuple(k.strip() for k in args.allow.split(",") if k.strip())
    if args.servers is not None:
        return _advise_servers(args, s, goal, allowed, t0)
    folder = Path(args.out) if args.out else \
        Path("results") / f"advise-{Path(s.workload).stem}-{s.distance_km:g}km"
    with tempfile.TemporaryDirectory(prefix="testbed-advise-") as scratch:
        plan = confirm.load(s, (), Path(scratch), "start")  # checked before any is kept
        found = adv.advise(plan, goal, allowed)
    if not args.model_only:
        confirm.load(s, (), folder, "start")
    for shown in confirm.model_answer(found, time.perf_counter() - t0, s.host):
        out.print(shown)
    if args.model_only:
        if args.out:
            advice_grid.record(folder, s, found, [], time.perf_counter() - t0)
        return 0
    measured = confirm.confirm(s, found, folder, _advise_runner(args), args.confirm,
                               out.print)
    took = time.perf_counter() - t0
    advice_grid.record(folder, s, found, measured, took)
    out.print(f"advise took {took / 60:.1f} min", markup=False)
    return 0 if measured and measured[-1][1].confirmed else EXIT_FAILED


def _advise_servers(args: argparse.Namespace, s: Any, goal: Any, allowed: tuple[str, ...],
                    t0: float) -> int:
    """advise --servers: the model's answer for each count of servers (a table), and how
    many the line feeds."""
    import time
    from testbed.experiment.advise import confirm, servers
    counts = servers.parse_counts(args.servers)
    if not args.model_only:
        raise SpecError("advise --servers: the model's answer only (add --model-only); "
                        "measure counts with an experiment file on topology cluster "
                        "(experiments/cluster.toml)")
    with tempfile.TemporaryDirectory(prefix="testbed-advise-") as scratch:
        rows = servers.ask(s, goal, counts, allowed,
                           lambda sc: confirm.load(sc, (), Path(scratch), "start"))
    out.print(f"host profile: {s.host} ({confirm.host_text(s.host)}; docs/hosts.md)",
              markup=False)
    out.print(servers.table(rows, s))
    out.print(servers.answer(rows, s, goal), markup=False)
    out.print(f"model answered in {time.perf_counter() - t0:.2f} s", markup=False)
    return 0


def _advise_runner(args: argparse.Namespace) -> Callable[[Any, Path], Any]:
    """How advise measures a candidate: as `testbed run` does (here, or in lab kernels
    from the host), then its report written and its table printed."""
    from testbed.experiment import run_plan
    from testbed.experiment.report import report
    on_host = _on_lab_kernels(args)
    if not on_host:
        _need_root("testbed advise")

    def measure(p: Any, where: Path) -> Any:
        listener = ProgressListener(out)
        try:
            if on_host:
                outcome = _run_distributed(p, where, args, listener)
            else:
                outcome = run_plan(p, where, listener=listener)[1]
        finally:
            listener.stop()
        out.print(report.build(where, p).table)
        return outcome
    return measure


def cmd_probe(args: argparse.Namespace) -> int:
    """Probe a link with timestamped packets and print the report."""
    from testbed.packets import probe
    if args.count < 1 or args.count > 1_000_000 or not 0 <= args.interval_ms <= 10_000:
        raise SpecError("probe: --count must be 1..1000000 and --interval-ms 0..10000")
    params = _params(args.param)
    if args.run and (args.name or params):
        raise SpecError("probe: give a topology NAME or --run PREFIX, not both")
    if not args.run and not args.name:
        raise SpecError("probe: give a topology NAME (built for the probe) or --run PREFIX "
                        "(one held by `testbed up`)")
    if args.name:
        from testbed import topology
        topo = topology.build(args.name, params)
    _need_root("testbed probe")
    kwargs = {"count": args.count, "interval_s": args.interval_ms / 1000.0,
              "src": args.src, "dst": args.dst}
    if args.run:
        from testbed.network.namespace import namespace_name
        src_ns, dst_ns = namespace_name(args.run, args.src), namespace_name(args.run, args.dst)
        report = probe.probe(src_ns, dst_ns, probe.address_in(dst_ns), **kwargs)
    else:
        from testbed.network.engine import Network
        with Network(topo) as net:
            report = probe.probe(net.namespace(args.src), net.namespace(args.dst),
                                 net.address(args.dst), **kwargs)
    if args.json:
        print(json.dumps(report.as_dict(), indent=1))
    else:
        out.print(report.render(), markup=False)
    return 0


def cmd_analyse(args: argparse.Namespace) -> int:
    """Dissect a capture's NFS traffic and print its summary."""
    from testbed.packets import nfs_rpc
    from testbed.spec import parse_rate
    if not 0 <= args.rtt_ms <= 100_000:
        raise SpecError("analyse: --rtt-ms must be 0..100000")
    userfiles.check(args.pcap, "analyse: capture")
    for flag, path in (("--png", args.png), ("--csv", args.csv)):
        _writable(flag, path)
    bps = parse_rate(args.rate) * 1e6 if args.rate else 0.0
    a = nfs_rpc.analyse(args.pcap, rate_bps=bps, rtt_s=args.rtt_ms / 1000.0)
    for k, v in a.summary.items():
        out.print(f"{k:>26}  {v:.4g}" if isinstance(v, float) else f"{k:>26}  {v}",
                  markup=False)
    if args.png:
        out.print(f"plot: {nfs_rpc.plot(a, args.png)}", markup=False)
    if args.csv:
        with atomic.replacing(Path(args.csv)) as tmp:
            a.rpcs.to_csv(tmp, index=False)
        out.print(f"RPCs: {args.csv}", markup=False)
    return 0


def _writable(flag: str, path: str) -> None:
    """A file an option asks to write: a name in a folder that exists (checked before the
    work, so a typo costs nothing); SpecError naming the option otherwise."""
    if not path:
        return
    p = Path(path)
    if p.is_dir() or not p.name:
        raise SpecError(f"{flag} {path}: is a folder; give a file name")
    if not p.absolute().parent.is_dir():
        raise SpecError(f"{flag} {path}: no folder {p.absolute().parent} to write it in")


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit 2) instead of usage + error."""

    def error(self, message: str) -> NoReturn:
        """Print `testbed: error: ...` on one line and exit 2."""
        fail_line(f"{self.prog}: {message} (see {self.prog} --help)")
        raise SystemExit(EXIT_USAGE)


def _finite(text: str) -> float:
    import math
    try:
        value = float(text) if text.strip().isascii() else math.nan
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _count(text: str) -> int:
    if not (text.strip().isascii() and text.strip().isdigit()):
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
    return int(text)


def _parallel(text: str) -> int | str:
    """--parallel: auto, or a number of lab kernels from 1 to 64."""
    if text.strip() == "auto":
        return "auto"
    value = _count(text)
    if not 1 <= value <= 64:
        raise argparse.ArgumentTypeError(f"expected auto or 1..64, got {text!r}")
    return value


def _experiment_args(p: argparse.ArgumentParser) -> None:
    """The options `run` and `demo` share: where results go, resume, --check, -p, and
    where the points are measured."""
    p.add_argument("--out", default=None, help="output folder (default results/<name>)")
    p.add_argument("--resume", action="store_true", help="skip points already done in --out")
    p.add_argument("--check", action="store_true",
                   help="validate and print the plan and its estimated run time; touch nothing")
    p.add_argument("-p", "--param", action="append", default=[], metavar="KNOB=VALUE",
                   help="fix a knob (replacing its sweep), or repetitions / au_bar")
    p.add_argument("--parallel", type=_parallel, default=None, metavar="N|auto",
                   help="measure in N lab kernels at once on this host (default when this "
                   "kernel has no netem: auto = free CPUs and memory, backing off when "
                   "points come out emulator-limited)")
    p.add_argument("--scheduler", default=None, metavar="tcp://HOST:PORT",
                   help="send the points to the Dask workers of this scheduler (each runs "
                   "its own lab kernels); results are written here as they arrive")


def _topology_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE",
                   help="a topology parameter, e.g. workers=4 distance_km=3000")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command."""
    p = Parser(prog="testbed", description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv debug)")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)
    topo = sub.add_parser("topo", help="list or show topologies")
    tsub = topo.add_subparsers(dest="topo_command", required=True, parser_class=Parser)
    tsub.add_parser("list", help="list topologies").set_defaults(func=cmd_topo_list)
    show = tsub.add_parser("show", help="show a topology's hosts and links")
    show.add_argument("name")
    _topology_args(show)
    show.add_argument("--json", action="store_true", help="machine-readable output")
    show.set_defaults(func=cmd_topo_show)
    up = sub.add_parser("up", help="build a topology and hold it until Ctrl-C")
    up.add_argument("name")
    _topology_args(up)
    up.set_defaults(func=cmd_up)
    sub.add_parser("clean", help="remove leftovers of crashed runs (only ours)").set_defaults(
        func=cmd_clean)
    sub.add_parser("knobs", help="every knob an experiment can fix, sweep or search").set_defaults(
        func=cmd_knobs)
    run = sub.add_parser("run", help="run an experiment file (TOML)")
    run.add_argument("file", nargs="?", default=None,
                     help="the experiment file (default with --dlio: experiments/dlio.toml)")
    run.add_argument("--dlio", default=None, metavar="FILE.yaml",
                     help="a DLIO workload config (MLPerf Storage's as they are) in place "
                     "of the experiment's workload")
    _experiment_args(run)
    run.set_defaults(func=cmd_run)
    demo = sub.add_parser("demo", help="the demo experiment (a few minutes)")
    _experiment_args(demo)
    demo.set_defaults(func=cmd_demo)
    _advise_parser(sub)
    _probe_parser(sub)
    _analyse_parser(sub)
    _report_parsers(sub)
    _trace_parsers(sub)
    return p


def _advise_parser(sub: Any) -> None:
    from testbed.experiment.advise import advise as adv
    ad = sub.add_parser("advise", help="which settings keep a job within a goal at a "
                        "distance: the model's cheapest, confirmed in emulation")
    _advise_job_args(ad)
    _advise_scenario_args(ad)
    _advise_goal_args(ad)
    ad.add_argument("--allow", default=",".join(adv.DEFAULT_ALLOWED), metavar="KNOB,...",
                    help="the knobs it may change (default: %(default)s)")
    ad.add_argument("--model-only", action="store_true",
                    help="the model's answer only (under a second; no kernel)")
    ad.add_argument("--confirm", type=_count, default=2, metavar="N",
                    help="confirm at most N candidates in emulation (default 2)")
    ad.add_argument("--repetitions", type=_count, default=3,
                    help="runs per confirmed point (its interval is over them; default 3)")
    ad.add_argument("--files", type=_count, default=8, help="files in the training set")
    ad.add_argument("--out", default=None, help="output folder (default "
                    "results/advise-WORKLOAD-Dkm)")
    ad.add_argument("--parallel", type=_parallel, default=None, metavar="N|auto",
                    help="measure in N lab kernels at once on this host")
    ad.add_argument("--scheduler", default=None, metavar="tcp://HOST:PORT",
                    help="send the points to this Dask scheduler's workers")
    ad.set_defaults(func=cmd_advise, param=[], resume=False)


def _advise_job_args(ad: Any) -> None:
    """advise's job: a preset or a file, one of them."""
    from testbed.workload.presets import PRESETS
    jobs = ad.add_mutually_exclusive_group(required=True)
    jobs.add_argument("--workload", choices=sorted(PRESETS), help="a workload preset")
    jobs.add_argument("--dlio", metavar="FILE.yaml", help="a DLIO training config "
                      "(MLPerf Storage's as they are, or your own)")
    jobs.add_argument("--checkpoint", metavar="FILE.yaml", help="a DLIO checkpoint config "
                      "(MLPerf Storage's llama3_*.yaml, or your own)")
    jobs.add_argument("--trace", metavar="FILE", help="a recorded trace (testbed trace "
                      "record): the model reads it as a loader, a confirmation replays it")
    jobs.add_argument("--experiment", metavar="FILE.toml", help="an experiment file: its "
                      "workload, dataset, mounts and topology at its farthest point")


def _advise_scenario_args(ad: Any) -> None:
    """advise's fibre, end hosts and checkpoint interval (None: the job's or default)."""
    from testbed import schema
    ad.add_argument("--distance-km", type=_finite, default=None,
                    help="fibre distance (--experiment: default its farthest)")
    ad.add_argument("--rate", default=None, help="line rate (default 100gbit)")
    ad.add_argument("--loss-pct", type=_finite, default=None,
                    help="random loss per packet (default 0)")
    ad.add_argument("--workers", type=_count, default=None, help="GPU workers per site "
                    "(default 1; a checkpoint job: its ranks on one 8-GPU host)")
    ad.add_argument("--topology", default=None, help="topology (default apn; with "
                    "--servers cluster)")
    ad.add_argument("--servers", default=None, metavar="N|A-B|A,B",
                    help="how many GPU servers the line feeds: the model's answer for "
                    "each count (topology cluster; with --model-only)")
    ad.add_argument("--gpus", type=_count, default=None,
                    help="GPUs per server, with --servers (default 8)")
    ad.add_argument("--fibres", type=_count, default=None,
                    help="fibre spans the servers share, with --servers (default 1)")
    ad.add_argument("--host", default=None,
                    choices=sorted(schema.HOST_PROFILES), help="the end hosts' profile "
                    f"assumed (default {schema.DEFAULT_HOST}; docs/hosts.md)")
    ad.add_argument("--checkpoint-interval-s", type=_finite, default=None, metavar="S",
                    help="a checkpoint job's training seconds between checkpoints "
                    "(default: the config's time_between_checkpoints)")


def _advise_goal_args(ad: Any) -> None:
    """advise's goal, one of them."""
    goal = ad.add_mutually_exclusive_group(required=True)
    goal.add_argument("--slowdown-pct", type=_finite, help="at most this slowdown against "
                      "co-located (e.g. 1)")
    goal.add_argument("--au-pct", type=_finite, help="at least this AU (e.g. 90)")
    goal.add_argument("--lost-pct", type=_finite, help="a checkpoint job: at most this "
                      "share of training time lost to checkpoints (e.g. 1)")
    goal.add_argument("--write-s", type=_finite, help="a checkpoint job: at most this many "
                      "seconds per checkpoint")


def _probe_parser(sub: Any) -> None:
    pr = sub.add_parser("probe", help="probe a link with timestamped packets (scapy): RTT "
                        "min/median/p99, one-way loss with its 95 %% interval, reordering")
    pr.add_argument("name", nargs="?", help="topology to build for the probe")
    _topology_args(pr)
    pr.add_argument("--run", metavar="PREFIX", help="probe a topology held by `testbed up`")
    pr.add_argument("--src", default="w1", help="sending host (default w1)")
    pr.add_argument("--dst", default="srv", help="destination host (default srv)")
    pr.add_argument("--count", type=_count, default=2000, help="probes (default 2000)")
    pr.add_argument("--interval-ms", type=_finite, default=1.0, help="gap between probes")
    pr.add_argument("--json", action="store_true", help="machine-readable output")
    pr.set_defaults(func=cmd_probe)


def _analyse_parser(sub: Any) -> None:
    an = sub.add_parser("analyse", help="dissect the NFS/RPC traffic of a capture (pcap): "
                        "READ sizes, RPCs and bytes in flight vs the BDP, retransmissions")
    an.add_argument("pcap")
    an.add_argument("--rate", default="", help="path rate for the BDP, e.g. 1gbit")
    an.add_argument("--rtt-ms", type=_finite, default=0.0, help="path RTT for the BDP")
    an.add_argument("--png", default="", help="write the in-flight plot here")
    an.add_argument("--csv", default="", help="write one row per RPC here")
    an.set_defaults(func=cmd_analyse)


def cmd_report(args: argparse.Namespace) -> int:
    """Print a results folder's per-point table and search lines as GitHub markdown."""
    from testbed.experiment.report import markdown
    sys.stdout.write(markdown.render(Path(args.dir), by_event=args.by_event))
    return 0


def cmd_docs(args: argparse.Namespace) -> int:
    """Rewrite (or --check) the generated result tables of README.md and docs/*.md."""
    from testbed import docs, suite
    if args.tests:
        from testbed.paths import REPO
        sys.stdout.write(suite.render(REPO))
        return 0
    blocks = docs.update(check=args.check)
    stale = [f"{b.file}: {b.command}" for b in blocks if b.stale]
    for line in stale:
        out.print(("stale: " if args.check else "regenerated: ") + line, markup=False)
    out.print(f"{len(blocks)} generated block(s), {len(stale)} stale", markup=False)
    return EXIT_FAILED if args.check and stale else 0


def _report_parsers(sub: Any) -> None:
    rp = sub.add_parser("report", help="a results folder's per-point table as markdown")
    rp.add_argument("dir", help="a results folder (with summary.csv)")
    rp.add_argument("--markdown", action="store_true", required=True,
                    help="GitHub markdown (the only format)")
    rp.add_argument("--by-event", action="store_true",
                    help="fibre events as a grid: a row per setting, a column per event, "
                         "each cell the training seconds it cost (and the model's)")
    rp.set_defaults(func=cmd_report)
    dp = sub.add_parser("docs", help="regenerate the generated result tables of README.md "
                        "and docs/*.md from their results folders")
    dp.add_argument("--check", action="store_true", help="change nothing; exit 1 if stale")
    dp.add_argument("--tests", action="store_true",
                    help="print the suite's test counts (pytest --collect-only per folder)")
    dp.set_defaults(func=cmd_docs)


def cmd_trace_record(args: argparse.Namespace) -> int:
    """Run a command under strace and write its file I/O under --root as a trace."""
    import time
    from testbed.workload import trace
    argv = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not argv:
        raise SpecError("trace record: give the command to record after --, e.g. "
                        "testbed trace record --root DATA -- python job.py")
    if args.root is not None and not Path(args.root).is_dir():
        raise SpecError(f"trace record: --root {args.root}: not a folder")
    if not 0 < args.timeout <= 7 * 86400:
        raise SpecError("trace record: --timeout must be 0..604800 s")
    dest = args.out or f"{Path(argv[0]).name}-{time.strftime('%Y%m%d-%H%M%S')}.trace"
    _writable("--out", dest)
    recorded = trace.record(argv, dest, args.root, timeout_s=args.timeout)
    out.print(f"trace: {dest} ({len(recorded.events)} events, {len(recorded.files)} files)",
              markup=False)
    return 0


def cmd_trace_show(args: argparse.Namespace) -> int:
    """Print what a trace holds: files, bytes, reads, streams, compute gaps, duration."""
    from testbed.workload import trace
    for k, v in trace.summary(trace.load(args.file)).items():
        out.print(f"{k:>14}  {v}", markup=False)
    return 0


def _trace_parsers(sub: Any) -> None:
    tr = sub.add_parser("trace", help="record a job's file I/O (strace) or show a trace")
    tsub = tr.add_subparsers(dest="trace_command", required=True, parser_class=Parser)
    rec = tsub.add_parser("record", help="run CMD under strace; write its reads of files "
                          "under --root as a trace")
    rec.add_argument("--root", default=None, metavar="DIR",
                     help="the job's data folder (default: this folder); only files "
                     "under it are recorded")
    rec.add_argument("--out", default=None, metavar="FILE",
                     help="the trace file (default CMD-DATE-TIME.trace here)")
    rec.add_argument("--timeout", type=_finite, default=3600.0, metavar="S",
                     help="stop the job after S seconds (default 3600)")
    rec.add_argument("cmd", nargs=argparse.REMAINDER, help="-- the command and its arguments")
    rec.set_defaults(func=cmd_trace_record)
    sh = tsub.add_parser("show", help="files, bytes, reads, read sizes, streams, compute "
                         "gaps and duration of a trace")
    sh.add_argument("file", help="a trace file (testbed trace record writes them)")
    sh.set_defaults(func=cmd_trace_show)


def _signals() -> None:
    main_pid = os.getpid()

    def on_term(signum: int, _frame: object) -> None:
        if os.getpid() != main_pid:  # a forked helper (pyroute2 forks): die as by default
            os._exit(128 + signum)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: parse, run the command, turn errors into one line and an exit code."""
    args = build_parser().parse_args(argv)
    level = logging.WARNING - 10 * args.verbose
    logging.basicConfig(level=max(level, logging.DEBUG),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    _signals()
    try:
        return int(args.func(args) or 0)
    except SpecError as exc:
        fail_line(str(exc))
        return EXIT_USAGE
    except TestbedError as exc:
        fail_line(str(exc))
        return EXIT_FAILED
    except KeyboardInterrupt:
        fail_line("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 141


if __name__ == "__main__":
    sys.exit(main())
