"""Benchmark (lab kernel): is a dilated figure the same figure? The same emulated
scenarios at k = 1, 2, 5 and 10 must give the same AU and emulated throughput.

    .venv/bin/python -m benchmarks.dilation_invariance [--ks 1,2,5,10] [--out DIR]
        [--parallel N] [--cc reno|cubic] [--delayed-ack on|off] [--loss-probe on|off]
        [--mounts M,..] [--losses L,..] [--with-marked]
        [--distances KM,..] [--repetitions R] [-p KNOB=VALUE ...]

--workload checkpoint writes checkpoints instead (CHECKPOINT_WORKLOAD: MLPerf Storage's
llama3_8b.yaml, 2 ranks, scaled): the invariance of writes across dilated time.

From the host it runs `testbed run` in lab kernels (--parallel, default auto: the points
are independent); inside a lab kernel (lab/run ...) in that one kernel.

Scenarios: one worker, 200 Mbit/s, 1,000 and 3,000 km, default and tuned mount (nconnect
4, 16 MiB read-ahead), 0 and 0.1 % loss; 4 MiB files, batch 2, two readers, prefetch 2,
400 ms of emulated compute per step (21 MB/s of demand). Runs them as one experiment
(time_scale is a knob like any other), then prints AU and emulated MB/s per k, and the
largest deviation from the k with the most headroom (the largest), closing with

    DRIFT au_points=<x> throughput_pct=<y>

Goal: au <= 3 points, throughput <= 5 %. Points any run marked emulator-limited are
listed and left out of the drift (they describe the machine; --with-marked counts them
too, to measure what a mark holds back; NaN when none is left). A line before it says how
far the largest deviation exceeds the two points' own 95 % intervals (lossy points are
noisy: a deviation inside them is not evidence of drift).

Congestion control: Reno by default (--cc reno). CUBIC grows its window on the kernel's
clock, which dilation does not slow, so lossy CUBIC points drift with k by design
(docs/time-dilation.md; measured 22 AU points at k = 10): the testbed marks them emulator-limited
(rule `clock`) and --cc cubic lists them so. Reno counts round trips.

Delayed ACKs: off by default (--delayed-ack off: route quickack on every host). Linux's
delayed-ACK timer has a 40 ms floor that no route metric or sysctl scales, so at k = 10
it is a tenth as long against the round trip, and a lossy point reads high: Reno, 1,000
km, 0.1 % loss, three repetitions at k = 1 and 10 (docs/time-dilation.md): +1.47 AU
points, +5.7 % with delayed ACKs, +0.55 and +2.2 % without. --delayed-ack on measures it.

Tail loss probes: off by default (--loss-probe off: tcp_early_retrans = 0). A probe fires
2 x srtt plus two jiffies (20 ms at HZ = 100) after the last send, an allowance nothing
scales, and each probe is an extra wire packet that shifts netem's seeded draw, so with
probes the k's meet different losses: DRIFT 1.83 / 6.96 % with them, 1.47 / 3.49 %
without (docs/time-dilation.md). --loss-probe on measures it.

Losses are seeded (netem's PRNG, from the seed knob and the repetition): every k meets
the same draw of losses, so a deviation is the time scale's, not the draw's.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

from benchmarks import common
from testbed.experiment.plan import plan as plan_mod
from testbed.experiment.report import report
from testbed.paths import RESULTS
from testbed.workload import presets

# The scenarios (head, [fixed] and [sweep]), then what each --workload does in them.
SCENARIOS = """
name = "dilation-invariance"
description = "The same emulated scenarios at several time scales"
repetitions = {reps}
[fixed]
workers = {workers}
rate = "200mbit"
congestion = "{cc}"
delayed_ack = {delayed_ack}
loss_probe = {loss_probe}
[sweep]
mount = [{mounts}]
loss_pct = [{losses}]
distance_km = [{distances}]
time_scale = [{ks}]
"""
LOADER_WORKLOAD = """[mounts.tuned]
nconnect = 4
read_ahead_kb = 16384
[dataset]
files = 32
file_kib = 4096
[workload]
batch = 2
compute_ms = 400
readers = 2
prefetch = 2
measure_s = 10
measure_max_s = 20
"""
# --workload checkpoint: the same scenarios writing llama3 8B's checkpoints (MLPerf
# Storage's config as it is) instead of reading: 2 of its 8 ranks on 2 workers sharing
# the line, each writing 1/1000 of its 13.1 GiB (13.4 MiB in DLIO's two files), 10
# checkpoints with fsync then read back, the time between them scaled alike (5 ms).
# AU is then the training's share of time not lost to checkpoint writes, MB/s a rank's
# write rate.
CHECKPOINT_WORKLOAD = """[mounts.tuned]
nconnect = 4
tcp_buffer_mib = "auto"
[workload]
dlio = "{dlio}"
scale = 0.001
"""
WORKLOADS = {"loader": (1, LOADER_WORKLOAD), "checkpoint": (2, CHECKPOINT_WORKLOAD)}
KEYS = ["mount", "loss_pct", "distance_km"]


def _kept(s: pd.DataFrame, with_marked: bool) -> pd.Series:
    """Which rows count towards the drift: the far points, those no rule marked
    emulator-limited unless `with_marked` (to measure what the marks hold back)."""
    far = s["distance_km"] > 0
    return far if with_marked else far & ~s["emulator_limited"]


def drift(s: pd.DataFrame, ref_k: float, with_marked: bool = False
          ) -> tuple[float, float, pd.DataFrame]:
    """(largest AU deviation, largest throughput deviation %, the table) over scenarios
    none of whose points was emulator-limited (all, `with_marked`), against k = ref_k;
    NaN when no scenario is left."""
    s = s[s["distance_km"] > 0]
    table = s.pivot_table(index=KEYS, columns="time_scale",
                          values=["au_pct", "throughput_MB_s"], aggfunc="mean")
    marked = s.groupby(KEYS)["emulator_limited"].any() & (not with_marked)
    clean = table[~marked.reindex(table.index).fillna(False).astype(bool)]
    if clean.empty or ref_k not in clean["au_pct"]:
        return math.nan, math.nan, table
    au = clean["au_pct"].sub(clean["au_pct"][ref_k], axis=0).abs().max().max()
    tp = clean["throughput_MB_s"].div(clean["throughput_MB_s"][ref_k], axis=0).sub(1).abs()
    return float(au), float(100 * tp.max().max()), table


def beyond_intervals(s: pd.DataFrame, ref_k: float, with_marked: bool = False) -> float:
    """The largest AU deviation from k = ref_k that the two points' own 95 % intervals
    do not cover (their half-widths combined in quadrature): 0 when every deviation is
    within what the points' noise allows; NaN when no point at ref_k is left."""
    s = s[_kept(s, with_marked)]
    au = s.pivot_table(index=KEYS, columns="time_scale", values="au_pct")
    ci = s.pivot_table(index=KEYS, columns="time_scale", values="au_pct_ci").fillna(0)
    if ref_k not in au:
        return math.nan
    dev = au.sub(au[ref_k], axis=0).abs()
    room = (ci.pow(2).add(ci[ref_k].pow(2), axis=0)).pow(0.5)
    return float((dev - room).clip(lower=0).max().max())


def figure(s: pd.DataFrame, out: Path, cc: str) -> Path:
    """AU against k per scenario (a colour each, points with their 95 % intervals): a
    flat row is an invariant scenario. Written to out/drift.png."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    s = s[s["distance_km"] > 0].sort_values("time_scale")
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for (mount, loss, km), g in s.groupby(KEYS):
        ax.errorbar(g["time_scale"], g["au_pct"], yerr=g["au_pct_ci"].fillna(0), fmt="o",
                    capsize=3, label=f"{mount} mount, {loss:g} % loss, {km:,.0f} km")
    ks = sorted(s["time_scale"].unique())
    ax.set_xscale("log")
    ax.set_xticks(ks, [f"{k:g}" for k in ks])
    ax.set(xlabel="time dilation k", ylabel="accelerator utilisation (%)", ylim=(0, 105),
           title=f"The same emulated scenario at k = {', '.join(f'{k:g}' for k in ks)} "
                 f"({cc}): flat is invariant")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    path = out / "drift.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def parse_args() -> argparse.Namespace:
    """The scenarios' options."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default="loader", choices=["loader", "checkpoint"],
                    help="read a training set (default) or write llama3 8B's checkpoints")
    ap.add_argument("--ks", default="1,2,5,10")
    ap.add_argument("--cc", default="reno", choices=["cubic", "reno"])
    ap.add_argument("--delayed-ack", default="off", choices=["on", "off"],
                    help="receivers delay ACKs (their 40 ms floor does not dilate)")
    ap.add_argument("--loss-probe", default="off", choices=["on", "off"],
                    help="senders send tail loss probes (their 2-jiffy allowance does not "
                         "dilate)")
    ap.add_argument("--mounts", default="default,tuned")
    ap.add_argument("--losses", default="0,0.1")
    ap.add_argument("--distances", default="1000,3000")
    ap.add_argument("--out", default=str(RESULTS / "dilation-invariance"))
    ap.add_argument("--parallel", default=None, help="lab kernels at once (host side)")
    ap.add_argument("--with-marked", action="store_true",
                    help="count emulator-limited points in the drift too (what the marks "
                         "hold back, e.g. CUBIC's `clock` under dilation)")
    ap.add_argument("--repetitions", type=int, default=1,
                    help="runs per point (each with its own seeded draw, the same at every k)")
    ap.add_argument("-p", "--param", action="append", default=[], metavar="KNOB=VALUE",
                    help="a knob for every point (testbed run -p), to try a variant")
    return ap.parse_args()


def write_experiment(args: argparse.Namespace, out: Path) -> Path:
    """The experiment file for these options, beside the results folder (`testbed run`
    owns the folder itself)."""
    f = out.parent / f"{out.name}.toml"
    workers, workload = WORKLOADS[args.workload]
    text = SCENARIOS + workload
    f.write_text(text.format(ks=args.ks, cc=args.cc, losses=args.losses, workers=workers,
                             reps=args.repetitions, distances=args.distances,
                             delayed_ack=str(args.delayed_ack == "on").lower(),
                             loss_probe=str(args.loss_probe == "on").lower(),
                             mounts=", ".join(f'"{m}"' for m in args.mounts.split(",")),
                             dlio=Path(presets.MLPERF_DIR) / "llama3_8b.yaml"))
    return f


def run(args: argparse.Namespace, f: Path, out: Path) -> None:
    """`testbed run` of the experiment into out (resumed if it has results already)."""
    cmd = ["run", str(f), "--out", str(out)]
    cmd += ["--resume"] if (out / "results.csv").exists() else []
    cmd += ["--parallel", args.parallel] if args.parallel else []
    cmd += [a for p in args.param for a in ("-p", p)]
    proc = common.run_testbed(cmd)
    if common.run_failed(proc.returncode):  # 1: some point failed; its row says why
        sys.exit(f"dilation_invariance: testbed run failed ({proc.returncode})")


def print_report(s: pd.DataFrame, args: argparse.Namespace, out: Path) -> None:
    """The table per k, the points left out, the figure and the closing DRIFT line."""
    ks = sorted(float(k) for k in args.ks.split(","))
    au, tp, table = drift(s, ks[-1], args.with_marked)
    common.print_wide(table.round(1), 30)
    marked = s[s["emulator_limited"]]
    for _, r in marked.iterrows():
        print(f"emulator-limited: {r['point_id']} ({r['emulator_reason']})")
    print(f"figure: {figure(s, out, args.cc)}")
    print(f"congestion control: {args.cc}; delayed ACKs: {args.delayed_ack}; "
          f"loss probes: {args.loss_probe}")
    print(f"largest AU deviation beyond the points' own 95 % intervals: "
          f"{beyond_intervals(s, ks[-1], args.with_marked):.2f} points")
    print(f"DRIFT au_points={au:.2f} throughput_pct={tp:.2f}"
          + (" (marked points included)" if args.with_marked else ""))


def main() -> int:
    """Run the scenarios at every k, print the table and the drift."""
    args = parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    f = write_experiment(args, out)
    plan = plan_mod.load(f)
    run(args, f, out)
    report.build(out, plan)
    print_report(common.read_summary(out), args, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
