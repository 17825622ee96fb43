"""Benchmark (host side): one sweep measured with `--parallel 1` and with `--parallel 2`.

    .venv/bin/python -m benchmarks.parallel_sweep [--rounds 1] [--out DIR]

Runs `testbed run` from this host on the sweep below (8 distances sharing one testbed,
one repetition; 1 MiB samples, one reader, 40 ms of compute: a demand of 26 MB/s, far
below what a lab kernel moves, so each kernel has headroom (its CPU 10-15 % busy at
0 km), while AU falls from ~99 % to ~50 % with distance (per-file round trips); a
measured window of 20 s, so that a point outweighs the ~20 s a fresh lab kernel costs),
first with one lab kernel, then with two at once (with --rounds 2, the second round in
the other order). It prints the machine's load and the
other lab kernels running beside it, each run's wall time, AU per point per run with its
emulator marks, the wall-time ratio (sum of --parallel 1 times / sum of --parallel 2
times) and the largest AU difference between --parallel 1 and --parallel 2 (per point,
the mean of each one's runs) over the points no run marked emulator-limited, and with
--rounds 2 how far runs at the same --parallel differ (the rerun noise), closing with

    PARALLEL speedup=<x> au_points=<y>

Goal: speedup >= 1.7 on 2 free cores, au_points within the rerun-agreement bound (2).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from benchmarks import common
from testbed.paths import REPO, RESULTS

SWEEP = """
name = "parallel-sweep"
topology = "apn"
description = "8 distances, headroom: the same sweep with one and with two lab kernels"
repetitions = 1

[fixed]
workers = 1
rate = "1gbit"

[sweep]
distance_km = [0, 500, 1000, 1500, 2000, 2500, 3000, 3500]

[dataset]
files = 32
file_kib = 1024

[workload]
batch = 1
compute_ms = 40
readers = 1
prefetch = 1
measure_s = 20
measure_max_s = 20
warmup_max_s = 5
"""


def others() -> str:
    """The machine's 1-minute load and the lab kernels / VMs of other checkouts running."""
    uml = qemu = 0
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        uml += cmd.endswith("linux.uml") and not cmd.startswith(str(REPO))
        qemu += "qemu-system" in cmd
    return (f"load {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; other lab kernels "
            f"running: {uml} user-mode Linux, {qemu} QEMU")


def run_sweep(sweep: Path, out: Path, parallel: int) -> float:
    """`testbed run SWEEP --parallel N --out OUT` from this host; its wall time in s."""
    shutil.rmtree(out, ignore_errors=True)
    log = out.with_suffix(".log")
    t0 = time.monotonic()
    with open(log, "wb") as fh:
        proc = common.run_testbed(["run", str(sweep), "--parallel", str(parallel),
                                   "--out", str(out)],
                                  stdout=fh, stderr=subprocess.STDOUT, timeout=3600)
    took = time.monotonic() - t0
    if common.run_failed(proc.returncode):
        sys.exit(f"parallel_sweep: --parallel {parallel} failed ({proc.returncode}); see {log}")
    return took


def load(out: Path, name: str) -> pd.DataFrame:
    """A run's AU and emulator mark per point."""
    s = common.read_summary(out)
    return s.set_index("point_id")[["au_pct", "emulator_limited"]].add_suffix(f"_{name}")


def run_rounds(sweep: Path, base: Path, rounds: int) -> dict[str, float]:
    """The sweep at --parallel 1 and 2 per round (every other round in reverse order):
    wall time per run, by run name pNrR."""
    took: dict[str, float] = {}
    for r in range(rounds):
        for n in common.alternate((1, 2), r):
            name = f"p{n}r{r}"
            took[name] = run_sweep(sweep, base / name, n)
            print(f"--parallel {n} (round {r}): {took[name]:.0f} s; now {others()}",
                  flush=True)
    return took


def compare(base: Path, took: dict[str, float], rounds: int) -> None:
    """AU per point per run, the wall times, the rerun spread and the PARALLEL line."""
    df = pd.concat([load(base / n, n) for n in took], axis=1, join="inner")
    marked = df[[f"emulator_limited_{n}" for n in took]].any(axis=1)
    clean = df[~marked]
    au = {n: clean[[f"au_pct_{k}" for k in took if k.startswith(f"p{n}")]] for n in (1, 2)}
    worst = float((au[1].mean(axis=1) - au[2].mean(axis=1)).abs().max())
    spread = max(float((a.max(axis=1) - a.min(axis=1)).max()) for a in au.values())
    common.print_wide(df.round(1), 20)
    p1 = sum(v for k, v in took.items() if k.startswith("p1"))
    p2 = sum(v for k, v in took.items() if k.startswith("p2"))
    print(f"wall time: --parallel 1 {p1:.0f} s, --parallel 2 {p2:.0f} s; "
          f"{int(marked.sum())} of {len(df)} points marked emulator-limited in some run")
    if rounds > 1:
        print(f"reruns at the same --parallel differ by up to {spread:.2f} AU points")
    print(f"PARALLEL speedup={p1 / p2:.2f} au_points={worst:.2f}")


def main() -> int:
    """Run the sweep at --parallel 1 and 2 (per round) and print the comparison."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=1, help="rounds (the 2nd in reverse order)")
    ap.add_argument("--out", default=str(RESULTS / "parallel-sweep"))
    args = ap.parse_args()
    base = Path(args.out)
    base.mkdir(parents=True, exist_ok=True)
    sweep = base / "sweep.toml"
    sweep.write_text(SWEEP)
    print(f"before: {others()}", flush=True)
    took = run_rounds(sweep, base, args.rounds)
    compare(base, took, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
