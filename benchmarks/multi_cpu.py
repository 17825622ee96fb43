"""Benchmark (host side): what a lab kernel with N CPUs carries, side by side with one CPU.

    .venv/bin/python -m benchmarks.multi_cpu [--cpus 1,2] [--skip-points] [--out DIR]

Needs the multi-CPU kernel (lab/build-uml --smp) for every N > 1. For each N, in turn
(never two kernels at once: each has the machine to itself):

1. calibration: the read testbed's `time_scale = "auto"` calibrates with (cold NFS reads
   at 0 km, testbed/experiment/resolve/dilation.py) in `lab/run --cpus N`: the rate
   reached, the CPU it cost and the capacity `auto` takes from them;
2. the k `auto` would choose at that capacity for unet3d-h100 over 3,000 km of 100 Gbit/s
   fibre on 1 GPU and on 8 (computed on the host from the calibration);
3. unless --skip-points, two points measured in `lab/run --cpus N`: a demo point (1 Gbit/s,
   1,500 km, the kernel's default mount, with its 0 km baseline) and a 100 Gbit/s point
   (unet3d-h100 at 3,000 km, 1 GPU, the mount advise confirmed, time_scale auto).

Prints one line per N and closes with

    SIDE_BY_SIDE cpus=1,2 capacity_ratio=<N's capacity / 1's> demo_au_delta=<AU points>
        gbit100_mb_delta_pct=<% of 1's MB/s> gbit100_au_delta=<AU points>

(the deltas of the last N against the first). The host's steal and wait during each run
are in each results folder (host_steal_pct, host_wait_pct): a figure measured while the
machine was busy says so there.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import tomli_w

from benchmarks import common
from testbed.paths import EXPERIMENTS, LAB, REPO, RESULTS

PYTHON = str(REPO / ".venv" / "bin" / "python")
MARK = "CALIBRATION "
UNET_8 = {"workers": 8, "host_gpus": 8}


def demo_point() -> dict[str, Any]:
    """README's demo experiment at one far point (1,500 km, default mount)."""
    exp = tomllib.loads((EXPERIMENTS / "demo.toml").read_text())
    exp.pop("search", None)
    exp["name"] = "multi-cpu-demo"
    exp["sweep"] = {"distance_km": [0, 1500]}
    exp["fixed"]["mount"] = "default"
    return exp


def gbit100_point(workers: int = 1) -> dict[str, Any]:
    """unet3d-h100 over 3,000 km of 100 Gbit/s fibre, the mount advise confirmed
    (experiments/fibre-events.toml without its events), time_scale auto."""
    exp = tomllib.loads((EXPERIMENTS / "fibre-events.toml").read_text())
    exp["name"] = "multi-cpu-100gbit"
    exp.pop("sweep", None)
    exp["fixed"] = {k: v for k, v in exp["fixed"].items() if not k.startswith("event")}
    exp["fixed"]["workers"] = workers
    exp.pop("cache", None)
    return exp


def calibrate_here() -> None:
    """Inside a lab kernel: one calibration, printed as a JSON line after MARK."""
    from testbed.experiment.resolve import dilation

    c = dilation.measure()
    print(MARK + json.dumps({"rate_MB_s": c.rate_MB_s, "cpu_per_s": c.cpu_per_s,
                             "cpus": c.cpus, "capacity_MB_s": c.capacity_MB_s}), flush=True)


def lab(cpus: int, *cmd: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    """`lab/run --cpus N CMD` from the checkout."""
    return subprocess.run([str(LAB / "run"), "--cpus", str(cpus), *cmd], cwd=REPO,
                          text=True, **kw)


def calibration(cpus: int) -> dict[str, Any]:
    """The calibration read in a kernel of `cpus` CPUs."""
    proc = lab(cpus, PYTHON, "-m", "benchmarks.multi_cpu", "--calibrate-here",
               capture_output=True)
    for line in proc.stdout.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
    sys.exit(f"multi_cpu: the calibration in a {cpus}-CPU kernel failed: "
             f"{(proc.stdout + proc.stderr).strip().splitlines()[-1:]}")


def k_auto(capacity_MB_s: float, out: Path) -> dict[str, float]:
    """The k time_scale auto picks at this capacity for unet3d-h100 at 3,000 km, 1 and 8
    GPUs."""
    from testbed.experiment.plan import plan as plan_mod
    from testbed.experiment.resolve import resolve

    ks = {}
    for gpus, extra in (("1 GPU", {}), ("8 GPUs", UNET_8)):
        exp = gbit100_point()
        exp["fixed"].update(extra)
        path = out / f"k-{gpus.split()[0]}.toml"
        path.write_text(tomli_w.dumps(exp))
        p = plan_mod.load(path)
        k_for = resolve.choose(p, capacity_MB_s)
        ks[gpus] = max(k_for(pt) for pt in p.points)
    return ks


def point(cpus: int, exp: dict[str, Any], out: Path) -> dict[str, float]:
    """A point's MB/s and AU (the far point's, not its baseline's) measured in a kernel of
    `cpus` CPUs, and the wall time."""
    path = out / f"{exp['name']}.toml"
    path.write_text(tomli_w.dumps(exp))
    folder = out / f"{exp['name']}-{cpus}cpu"
    start = time.monotonic()
    proc = lab(cpus, ".venv/bin/testbed", "run", str(path), "--out", str(folder),
               env={**os.environ, "LAB_MEM": "6G"})
    wall = time.monotonic() - start
    if common.run_failed(proc.returncode):
        sys.exit(f"multi_cpu: {exp['name']} in a {cpus}-CPU kernel failed "
                 f"(exit {proc.returncode}; see {folder})")
    s = common.read_summary(folder)
    far = s.sort_values("distance_km").iloc[-1]
    return {"MB_s": float(far["throughput_MB_s"]), "au_pct": float(far["au_pct"]),
            "k": float(far["time_scale_k"]), "wall_s": wall,
            "limited_by": str(far["limited_by"]),
            "host_wait_pct": float(far["host_wait_pct"]),
            "host_steal_pct": float(far["host_steal_pct"])}


def measure_cpus(n: int, args: argparse.Namespace) -> dict[str, Any]:
    """Everything for a kernel of n CPUs: calibration, auto's k and (unless
    --skip-points) the two points, each printed as it comes."""
    start = time.monotonic()
    cal = calibration(n)
    row = {"cal": cal, "cal_wall_s": time.monotonic() - start,
           "k": k_auto(cal["capacity_MB_s"], args.out)}
    print(f"cpus={n}: calibration {cal['rate_MB_s']:.0f} MB/s at "
          f"{cal['cpu_per_s']:.2f} CPU-s/s -> capacity {cal['capacity_MB_s']:.0f} MB/s "
          f"({row['cal_wall_s']:.0f} s); k auto for unet3d-h100 at 3,000 km: "
          + ", ".join(f"{g} {k:g}" for g, k in row["k"].items()), flush=True)
    if not args.skip_points:
        for name, exp in (("demo", demo_point()), ("gbit100", gbit100_point())):
            row[name] = got = point(n, exp, args.out)
            print(f"cpus={n}: {name}: {got['MB_s']:.1f} MB/s, AU {got['au_pct']:.1f} %, "
                  f"k {got['k']:g}, {got['limited_by']}; host wait "
                  f"{got['host_wait_pct']:.1f} %, steal {got['host_steal_pct']:.1f} % "
                  f"({got['wall_s']:.0f} s)", flush=True)
    return row


def side_by_side(rows: dict[int, dict[str, Any]], counts: list[int], points: bool) -> str:
    """The closing line: the last CPU count against the first."""
    first, last = rows[counts[0]], rows[counts[-1]]
    line = (f"SIDE_BY_SIDE cpus={','.join(map(str, counts))} capacity_ratio="
            f"{last['cal']['capacity_MB_s'] / first['cal']['capacity_MB_s']:.2f}")
    if points:
        line += (f" demo_au_delta={last['demo']['au_pct'] - first['demo']['au_pct']:+.2f}"
                 f" gbit100_mb_delta_pct="
                 f"{100 * (last['gbit100']['MB_s'] / first['gbit100']['MB_s'] - 1):+.2f}"
                 f" gbit100_au_delta="
                 f"{last['gbit100']['au_pct'] - first['gbit100']['au_pct']:+.2f}")
    return line


def main() -> None:
    """Every N in turn, then the side-by-side line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpus", default="1,2", help="kernel CPU counts, the first the reference")
    ap.add_argument("--skip-points", action="store_true", help="calibrate only")
    ap.add_argument("--out", type=Path, default=RESULTS / "multi-cpu")
    ap.add_argument("--calibrate-here", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.calibrate_here:
        calibrate_here()
        return
    counts = [int(c) for c in args.cpus.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    rows = {n: measure_cpus(n, args) for n in counts}
    (args.out / "multi_cpu.json").write_text(json.dumps(rows, indent=1))
    print(side_by_side(rows, counts, not args.skip_points))


if __name__ == "__main__":
    main()
