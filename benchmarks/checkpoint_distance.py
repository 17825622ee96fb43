"""Benchmark (lab kernel): llama3_8b's checkpoint written across the fibre and read back,
co-located (0 km, the same run's baseline) against 3,000 km, with the kernel's default
write path and a tuned one.

    LAB_MEM=2G lab/run .venv/bin/python -m benchmarks.checkpoint_distance \
        [--km 0,1000,3000] [--ranks 2] [--size-mib 64] [--rate 1gbit] \
        [--writes 3] [--reads 3] [--warmup 1] [--interval-s 5]

Scale. MLPerf Storage v2.0's llama3_8b (testbed/workload/mlperf/llama3_8b.yaml) runs 8
ranks under ZeRO-3; DLIO sizes each rank's share at ~13 GiB in two files
(zero_pp_rank_<r>_mp_rank_0_{model,optim}_states.pt, 1 : 6). The lab kernel holds the
export in its RAM, so here --ranks ranks (default 2, each on its own GPU worker with its
own mount) write --size-mib MiB each (default 64): DLIO's ranks 0..n-1 with their names
and proportions, scaled with checkpoint_size.scaled. The header prints both sizes.

The rate. The scenario is 100 Gbit/s; one user-mode Linux CPU moves ~1 Gbit/s of NFS, so
the fibre runs at --rate (default 1 Gbit/s) and the printout says what the emulator moved
(bytes through the fibre's qdiscs each way, their rate while checkpoints were written,
drops) and how busy the guest's CPU was: a row the CPU held says nothing about the fibre.

Settings (each with fresh mounts, NFSv4.2, one worker per rank):
  default  the kernel's: MountSpec() (rsize/wsize 1 MiB, as the kernel negotiates with
           nfsd anyway; one connection; read-ahead 128 KiB) and every host's TCP buffer
           maximum 6 MiB (Linux's tcp_rmem maximum; TcpPolicy sets tcp_wmem's to the same,
           Linux's own being 4 MiB).
  tuned    wsize/rsize 1 MiB, nconnect 4, read-ahead 16 MiB, TCP buffers 32 MiB (>= 8 x
           the BDP at 3,000 km and 1 Gbit/s).

For each (distance, setting): checkpoint_core's DLIO loop (ranks as processes) --writes
times {sleep --interval-s (the training's compute); barrier; write each file in 1 MiB
writes, fsync}, every rank's files dropped from its client's page cache, --reads times
{sleep; barrier; read back comparing every byte}; then nfsd's copy of every checkpoint is
compared byte for byte on the server too (untimed). The first --warmup (default 1)
checkpoints written and read are left out of the figures (printed apart): fresh mounts'
connections start with small receive windows that later checkpoints no longer pay. The connections idle --interval-s
between checkpoints, as in training: each checkpoint starts from a restarted slow start.

Table, per row (means over checkpoints with 95 % intervals, each checkpoint's time that
of its slowest rank, as MLPerf reports it): write s (write + fsync: what training waits
for), fsync s (the slowest rank's), read s, MB/s of the whole checkpoint (all ranks) over
those times, training time lost = write / (interval + write), x0 = this row's write time
over the 0 km row's of the same setting, and the write-path bound: all ranks' bytes at the
line rate plus the round trips a rank cannot overlap -- the checkpoint folder's mkdir
(one) and per file its OPEN before the first WRITE and the COMMIT of fsync after the last
byte (two; tests/system/test_checkpoint.py's WRITE_RTTS). The bound leaves out slow start,
TCP windows, the client's and nfsd's CPU and the 128 KiB htb may pass above the rate.

`limited` is best-effort: the write time split into the line time (bytes / rate), the lab
kernel's own excess at 0 km (the same setting's 0 km time over its line time: CPU, NFS
client), the round trips above, and the rest (beyond all three at this distance: TCP's
ramp and windows); the largest share names the row, the shares are printed below the table.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import common
from testbed import procfs, topology
from testbed.network.engine import Network
from testbed.results import environment
from testbed.services.nfs import NfsMount, NfsServer, mount_rpc_stats
from testbed.spec import MountSpec, parse_rate
from testbed.stats import mean_ci
from testbed.workload import checkpoint as ck
from testbed.workload import checkpoint_size as cs
from testbed.workload import presets

MODEL = Path(presets.MLPERF_DIR) / "llama3_8b.yaml"
MLPERF_RANKS = 8  # llama3_8b's rank count in MLPerf Storage v2.0
MIB = 1 << 20
# Round trips a rank cannot overlap (tests/system/test_checkpoint.py): the checkpoint
# folder's mkdir once; per written file OPEN and COMMIT; per file read back its first READ.
MKDIR_RTTS, WRITE_RTTS = 1, 2


@dataclass(frozen=True)
class Setting:
    """A mount and the hosts' TCP buffer maximum."""

    name: str
    mount: MountSpec
    tcp_buffer_bytes: int


SETTINGS = (
    Setting("default", MountSpec(), 6 * MIB),
    Setting("tuned", MountSpec(rsize=MIB, wsize=MIB, nconnect=4, read_ahead_kb=16384), 32 * MIB),
)


@dataclass
class Row:
    """One (distance, setting): the per-checkpoint figures and what the run saw."""

    setting: str
    km: float
    rtt_s: float
    ckpt_bytes: int
    files: int
    write_s: list[float]
    fsync_s: list[float]
    read_s: list[float]
    verified: bool
    reason: str
    cpu_pct: float
    moved: dict[str, float]
    rpcs: dict[str, int]
    warm_write_s: list[float]
    warm_read_s: list[float]

    def line_s(self, rate_bps: float) -> float:
        """All ranks' bytes at the line rate."""
        return self.ckpt_bytes * 8 / rate_bps

    def rtts_s(self) -> float:
        """The round trips one rank cannot overlap (see the module docstring)."""
        return (MKDIR_RTTS + WRITE_RTTS * self.files) * self.rtt_s


def layouts(ranks: int, rank_bytes: int) -> tuple[tuple[cs.ShardFile, ...], ...]:
    """DLIO's files of llama3_8b's ranks 0..ranks-1 (of MLPERF_RANKS), scaled to
    rank_bytes each."""
    shape = cs.load(MODEL)
    return tuple(cs.scaled(cs.rank_checkpoint(shape, MLPERF_RANKS, r).files, rank_bytes)
                 for r in range(ranks))


def yaml_interval_s() -> float:
    """llama3_8b's checkpoint.time_between_checkpoints (s), from its MLPerf YAML."""
    import yaml
    return float(yaml.safe_load(MODEL.read_text())["checkpoint"]["time_between_checkpoints"])


def fibre_counters(net: Network) -> dict[str, float]:
    """Bytes and drops through the fibre's qdiscs so far, each way."""
    down, up = net.read_fibre("srv", "s1")  # srv->s1 carries reads, s1->srv writes
    return {"down_bytes": down.sent_bytes, "up_bytes": up.sent_bytes,
            "drops": down.netem_drops + up.netem_drops + down.htb_drops + up.htb_drops,
            "overlimits": down.htb_overlimits + up.htb_overlimits}


def rpc_totals(mounts: list[NfsMount]) -> dict[str, int]:
    """OPEN, WRITE, COMMIT and READ calls of every mount, summed."""
    out: dict[str, int] = {}
    for m in mounts:
        for op, c in mount_rpc_stats(m.path).items():
            if op in ("OPEN", "WRITE", "COMMIT", "READ"):
                out[op] = out.get(op, 0) + c["ops"]
    return out


def slowest(run: ck.CheckpointRun, phase: str, n: int) -> list[ck.CheckpointResult]:
    """Per checkpoint 1..n of a phase, its slowest rank's result (failed ones skipped)."""
    out = []
    for i in range(1, n + 1):
        shares = run.of(phase, i)
        if shares and all(r.ok for r in shares):
            out.append(max(shares, key=lambda r: r.seconds))
    return out


def server_check(export: Path, plan: ck.CheckpointPlan, writes: int) -> str | None:
    """None when nfsd's copy of every checkpoint is what each rank wrote; else why not."""
    for rank, lay in enumerate(plan.layouts):
        for i in range(1, writes + 1):
            got = ck.read_back(export, *plan.args(rank), index=i, files=lay)
            if got.problem:
                return f"on the server: {got.problem}"
    return None


def verdict(run: ck.CheckpointRun, plan: ck.CheckpointPlan, writes: list[Any],
            reads: list[Any], on_server: Path) -> str:
    """Why the point's checkpoints do not count ("" when every one was written, read back
    and found whole on the server too)."""
    if run.error:
        return run.error
    if (len(writes), len(reads)) != (plan.num_write, plan.num_read):
        return f"{len(writes)} of {plan.num_write} writes, {len(reads)} of " \
            f"{plan.num_read} reads"
    return server_check(on_server, plan, plan.num_write) or ""


def run_point(net: Network, server: NfsServer, export: Path, km: float, setting: Setting,
              args: argparse.Namespace, lays: tuple[tuple[cs.ShardFile, ...], ...]) -> Row:
    """Checkpoints at km with one setting (fresh mounts); the folder is removed after."""
    spec = net.set_fibre("srv", "s1", distance_km=km)
    net.tcp.set_buffers(setting.tcp_buffer_bytes)
    name = f"ckpt-{setting.name}-{km:g}km"
    plan = ck.CheckpointPlan(lays, seed=int(km) * 10 + SETTINGS.index(setting),
                             transfer_size=MIB, num_write=args.warmup + args.writes,
                             num_read=args.warmup + args.reads,
                             interval_s=args.interval_s)
    workers = [f"w{r + 1}" for r in range(args.ranks)]
    mounts = [net.enter(NfsMount(net, w, server, setting.mount)) for w in workers]
    before, cpu0, t0 = fibre_counters(net), procfs.cpu_times(), time.monotonic()
    rpc0 = rpc_totals(mounts)
    run = ck.run_checkpoints([m.path / name for m in mounts], plan, args.rank_kind)
    cpu1, wall = procfs.cpu_times(), time.monotonic() - t0
    after, rpc1 = fibre_counters(net), rpc_totals(mounts)
    for m in mounts:
        m.unmount()
    writes, reads = slowest(run, "write", plan.num_write), slowest(run, "read", plan.num_read)
    reason = verdict(run, plan, writes, reads, export / name)
    warm = [r.seconds for r in writes[:args.warmup]], [r.seconds for r in reads[:args.warmup]]
    writes, reads = writes[args.warmup:], reads[args.warmup:]
    shutil.rmtree(export / name, ignore_errors=True)  # the export is the lab kernel's RAM
    # Guest CPU busy while checkpoints ran: busy seconds of the whole loop (its sleeps are
    # idle) over the seconds the checkpoints took (an over-estimate: digests are untimed).
    busy_s = (cpu1[0] - cpu0[0]) / os.sysconf("SC_CLK_TCK") / (os.cpu_count() or 1)
    io_s = sum(warm[0]) + sum(warm[1]) + sum(r.seconds for r in writes + reads)
    moved = {k: after[k] - before[k] for k in after}
    moved["write_s_total"] = sum(warm[0]) + sum(r.seconds for r in writes)
    moved["wall_s"] = wall
    return Row(setting.name, km, spec.rtt_ms / 1000.0, sum(sum(f.nbytes for f in lay)
                                                            for lay in lays),
               len(lays[0]), [r.seconds for r in writes], [r.fsync_s for r in writes],
               [r.seconds for r in reads], not reason, reason,
               min(100.0, 100.0 * busy_s / io_s) if io_s > 0 else math.nan, moved,
               {op: rpc1.get(op, 0) - rpc0.get(op, 0) for op in rpc1}, *warm)


def shares(row: Row, base: Row, rate_bps: float) -> dict[str, float]:
    """The row's mean write time split into line, lab, round trips and rest (seconds);
    base is the same setting's 0 km row (the row itself at 0 km)."""
    w = mean_ci(row.write_s)[0]
    line = row.line_s(rate_bps)
    lab = max(0.0, mean_ci(base.write_s)[0] - line)
    rtts = row.rtts_s()
    return {"line rate": line, "lab kernel": lab, "round trips": rtts,
            "TCP ramp/window": max(0.0, w - line - lab - rtts)}


def limited(sh: dict[str, float]) -> str:
    """The largest share of the write time, and the next one when it is >= 20 %."""
    total = sum(sh.values()) or 1.0
    top = sorted(sh, key=lambda k: -sh[k])
    out = f"{top[0]} {100 * sh[top[0]] / total:.0f}%"
    return out + (f", {top[1]} {100 * sh[top[1]] / total:.0f}%"
                  if sh[top[1]] >= 0.2 * total else "")


def fmt_ci(values: list[float], width: int) -> str:
    """mean±half-width (3 decimals) padded to width."""
    m, h = mean_ci(values)
    return f"{m:.3f}±{h:.3f}".rjust(width) if h == h else f"{m:.3f}".rjust(width)


def parse_args() -> argparse.Namespace:
    """The command line (--interval-s filled from the YAML when not given)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--km", default="0,1000,3000",
                    help="distances, 0 first (default 0,1000,3000)")
    ap.add_argument("--ranks", type=int, default=2, help="ranks = GPU workers (default 2)")
    ap.add_argument("--size-mib", type=int, default=64, help="MiB per rank (default 64)")
    ap.add_argument("--rate", default="1gbit", help="fibre rate (default 1gbit)")
    ap.add_argument("--writes", type=int, default=3, help="num_checkpoints_write (3)")
    ap.add_argument("--reads", type=int, default=3, help="num_checkpoints_read (3)")
    ap.add_argument("--warmup", type=int, default=1,
                    help="checkpoints written and read first and left out (default 1)")
    ap.add_argument("--interval-s", type=float, default=None,
                    help="time_between_checkpoints (default: the YAML's)")
    ap.add_argument("--rank-kind", default="process", choices=ck.RANK_KINDS)
    args = ap.parse_args()
    if float(args.km.split(",")[0]) != 0:
        raise SystemExit("--km: the first distance must be 0 (the same run's baseline)")
    if args.interval_s is None:
        args.interval_s = yaml_interval_s()
    return args


def print_header(args: argparse.Namespace, lays: tuple[tuple[cs.ShardFile, ...], ...]) -> None:
    """Where it runs, and the scenario at MLPerf's scale and at the lab's."""
    full = cs.checkpoint(cs.load(MODEL), MLPERF_RANKS)
    env = environment()
    print(f"checkpoint_distance: {env['kernel']} ({env['kernel_kind']}, clock "
          f"{env['clock']}), {env['cpus']} CPU {env['cpu_model']}"
          f"{' on host ' + env['host_cpu'] if env['host_cpu'] else ''}, "
          f"{env['started_utc']}, git {env['git_commit'][:7]}")
    print(f"llama3_8b in MLPerf: {MLPERF_RANKS} ranks x {full[0].file_bytes / 2**30:.2f} GiB "
          f"= {sum(r.file_bytes for r in full) / 2**30:.1f} GiB; here {args.ranks} ranks x "
          f"{args.size_mib} MiB in DLIO's files ("
          + ", ".join(f"{f.name} {f.nbytes / MIB:.1f} MiB" for f in lays[0]) + "); "
          f"fibre {args.rate}, {args.writes} writes + {args.reads} reads after "
          f"{args.warmup} of each left out (warm-up), interval "
          f"{args.interval_s:g} s, ranks as {args.rank_kind}es")
    print(f"the scenario's 100 Gbit/s is beyond one user-mode Linux CPU (~1 Gbit/s of NFS): "
          f"the fibre runs at {args.rate}; what it carried is printed below the table")


def run_all(args: argparse.Namespace,
            lays: tuple[tuple[cs.ShardFile, ...], ...]) -> list[Row]:
    """Every (distance, setting) on one testbed with a writable export, settings
    alternating in order from one distance to the next."""
    rows: list[Row] = []
    topo = topology.build("apn", {"workers": args.ranks, "distance_km": 0, "rate": args.rate})
    with Network(topo) as net:
        export = net.scratch("export")
        server = net.enter(NfsServer(net, "srv", export, writable=True))
        for km in [float(k) for k in args.km.split(",")]:
            for setting in common.alternate(SETTINGS, len(rows) // len(SETTINGS)):
                row = run_point(net, server, export, km, setting, args, lays)
                rows.append(row)
                print(f"  done {setting.name} {km:g} km in {row.moved['wall_s']:.0f} s"
                      f"{'' if row.verified else ': FAILED ' + row.reason}", flush=True)
    return rows


def main() -> None:
    """Run every (distance, setting) and print the table and one CHECKPOINT line each."""
    args = parse_args()
    rate_bps = parse_rate(args.rate) * 1e6
    lays = layouts(args.ranks, args.size_mib * MIB)
    print_header(args, lays)
    wall0 = time.monotonic()
    rows = run_all(args, lays)
    print_table(rows, rate_bps, args)
    print_details(rows, rate_bps, args)
    print(f"wall time {time.monotonic() - wall0:.0f} s")
    base = {r.setting: r for r in rows if r.km == 0}
    for r in rows:
        w, b = mean_ci(r.write_s)[0], base[r.setting]
        print(f"CHECKPOINT setting={r.setting} km={r.km:g} write_s={w:.3f} "
              f"read_s={mean_ci(r.read_s)[0]:.3f} "
              f"lost_pct={ck.training_time_lost_pct(w, args.interval_s):.1f} "
              f"slowdown={w / mean_ci(b.write_s)[0]:.2f} verified={str(r.verified).lower()}")


def print_table(rows: list[Row], rate_bps: float, args: argparse.Namespace) -> None:
    """The table: per row its times with intervals, rates, training time lost, slowdown
    against 0 km, the bound and what limited it."""
    base = {r.setting: r for r in rows if r.km == 0}
    print(f"{'setting':>8} {'km':>5} {'RTT ms':>6} {'write s':>13} {'fsync s':>6} "
          f"{'read s':>13} {'wMB/s':>6} {'rMB/s':>6} {'lost %':>6} {'x0 w':>5} {'x0 r':>5} "
          f"{'bound s':>7} {'cpu~%':>5}  limited")
    for r in rows:
        b = base.get(r.setting)
        w, rd = mean_ci(r.write_s)[0], mean_ci(r.read_s)[0]
        mb = r.ckpt_bytes / 1e6
        sh = shares(r, b, rate_bps) if r.verified and b and b.verified else {}
        label = limited(sh) if sh else "FAILED"
        print(f"{r.setting:>8} {r.km:>5g} {r.rtt_s * 1000:>6.1f} {fmt_ci(r.write_s, 13)} "
              f"{mean_ci(r.fsync_s)[0]:>6.3f} {fmt_ci(r.read_s, 13)} "
              f"{mean_ci([mb / x for x in r.write_s])[0]:>6.1f} "
              f"{mean_ci([mb / x for x in r.read_s])[0]:>6.1f} "
              f"{ck.training_time_lost_pct(w, args.interval_s):>6.1f} "
              f"{w / mean_ci(b.write_s)[0] if b else math.nan:>5.2f} "
              f"{rd / mean_ci(b.read_s)[0] if b else math.nan:>5.2f} "
              f"{r.line_s(rate_bps) + r.rtts_s():>7.3f} {r.cpu_pct:>5.0f}  {label}")
    print(f"checkpoint = {rows[0].ckpt_bytes / 1e6:.1f} MB over {args.ranks} ranks; line "
          f"time {rows[0].line_s(rate_bps):.3f} s at {rate_bps / 1e9:g} Gbit/s; bound = "
          f"line time + ({MKDIR_RTTS} + {WRITE_RTTS} x {rows[0].files} files) RTT")


def print_details(rows: list[Row], rate_bps: float, args: argparse.Namespace) -> None:
    """Per row what the emulator moved, the RPCs per file, the time shares and every
    checkpoint's time."""
    base = {r.setting: r for r in rows if r.km == 0}
    for r in rows:
        m = r.moved
        files = args.ranks * r.files * (args.writes + args.warmup)
        b = base.get(r.setting)
        sh = shares(r, b, rate_bps) if b else {}
        print(f"{r.setting:>8} {r.km:>5g} km: fibre carried {m['up_bytes'] / 1e6:.0f} MB "
              f"up (writes), {m['down_bytes'] / 1e6:.0f} MB down (reads), up at "
              f"{m['up_bytes'] * 8 / m['write_s_total'] / 1e6:.0f} Mbit/s while writing, "
              f"drops {m['drops']:.0f}, overlimits {m['overlimits']:.0f}; per file written "
              f"OPEN {r.rpcs.get('OPEN', 0) / files:.1f} (reads' too) COMMIT "
              f"{r.rpcs.get('COMMIT', 0) / files:.1f} WRITE {r.rpcs.get('WRITE', 0) / files:.1f}"
              f"; shares of write s: "
              + ", ".join(f"{k} {v:.3f}" for k, v in sh.items()))
        print(f"{'':>14}    write s per checkpoint "
              + " ".join(f"{x:.3f}" for x in r.write_s) + "; read s "
              + " ".join(f"{x:.3f}" for x in r.read_s) + "; warm-up write s "
              + " ".join(f"{x:.3f}" for x in r.warm_write_s) + ", read s "
              + " ".join(f"{x:.3f}" for x in r.warm_read_s)
              + ("" if r.verified else f"; FAILED: {r.reason}"))


if __name__ == "__main__":
    main()
