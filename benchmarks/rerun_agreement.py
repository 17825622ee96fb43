"""Benchmark (host side): do the demo's figures survive a rerun, and a slower machine?

    sudo .venv/bin/python -m benchmarks.rerun_agreement [--quota 0.5] [--neighbour]
        [--out DIR] [-p KNOB=VALUE ...]

Runs `testbed demo` in the lab kernel three times: twice as it is, once with the lab
kernel held to `quota` of one CPU by a host cgroup (cgroup v1 cpu.cfs_quota_us, or v2
cpu.max; the lab kernel joins it before it starts and the cgroup is removed after). Over
the points all three runs measured (the grid; search probes may differ) it prints AU per
run and mark, the largest AU difference between any two runs over the points no run
marked emulator-limited, and how many points any run marked, then a closing line

    AGREEMENT au_points=<x> marked=<n> all_points=<x over every point, marked or not>

--neighbour adds a fourth run beside a busy neighbour: another lab kernel (on the host's
clock) spinning on its CPU for the whole run, as a second user's job would. LAB_CLOCK is
passed on: LAB_CLOCK=virtual compares the runs on the virtual clock (docs/virtual-clock.md).

Goal: au_points <= 2, i.e. a figure either does not depend on the machine or says so.
-p passes knobs to every demo (`testbed demo -p`), to try a variant of the demo with
the same comparison; the closing line is the demo's as it is only without them.
Each run's line also says how long its lab kernel waited for a host CPU (lab/run's meter;
a point that waited >= 10 % of its time is marked emulator-limited, reason "host").
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pandas as pd

from benchmarks import common
from testbed.paths import LAB, REPO, RESULTS

CG1 = Path("/sys/fs/cgroup/cpu")
CG2 = Path("/sys/fs/cgroup")
PERIOD_US = 100_000


def make_cgroup(quota: float) -> Path:
    """A fresh cpu cgroup holding its members to `quota` of one CPU."""
    name = f"apn-bench-{os.getpid()}"
    if (CG1 / "cpu.cfs_quota_us").exists():
        cg = CG1 / name
        cg.mkdir()
        (cg / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        (cg / "cpu.cfs_quota_us").write_text(str(int(quota * PERIOD_US)))
        return cg
    cg = CG2 / name
    cg.mkdir()
    (cg / "cpu.max").write_text(f"{int(quota * PERIOD_US)} {PERIOD_US}")
    return cg


def run_demo(out: Path, cgroup: Path | None, params: list[str]) -> float:
    """`lab/run testbed demo --out out [-p ...]` (inside cgroup if given); seconds taken.
    The demo's printed report is kept in out/report.txt."""
    shutil.rmtree(out, ignore_errors=True)
    extra = "".join(f" -p {shlex.quote(p)}" for p in params)
    cmd = f"exec {LAB}/run .venv/bin/testbed demo --out {out}{extra}"
    if cgroup is not None:
        tasks = cgroup / ("tasks" if (cgroup / "tasks").exists() else "cgroup.procs")
        cmd = f"echo $$ > {tasks}; " + cmd
    t0 = time.monotonic()
    proc = subprocess.run(["sh", "-c", cmd], cwd=REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=3600)
    if out.is_dir():  # the demo's own report, as README's first command prints it
        (out / "report.txt").write_text(proc.stdout)
    if common.run_failed(proc.returncode):
        sys.exit(f"rerun_agreement: demo failed ({proc.returncode}): {proc.stderr[-500:]}")
    return time.monotonic() - t0


def load(out: Path, run: str) -> pd.DataFrame:
    """A run's per-point summary, indexed by (point, site)."""
    s = common.read_summary(out)
    return s.set_index(["point_id", "site"])[["au_pct", "au_pct_ci", "emulator_limited",
                                              "limited_by"]].add_suffix(f"_{run}")


def host_wait(out: Path) -> str:
    """How long the run's lab kernel waited for a host CPU (lab/run's meter), over its
    points: median and largest share of each point's wall time."""
    r = pd.read_csv(out / "results.csv")
    w = r["host_wait_pct"].dropna() if "host_wait_pct" in r else pd.Series(dtype=float)
    if w.empty:
        return "host wait: not metered"
    return f"host wait: median {w.median():.1f} %, max {w.max():.1f} % of a point's time"


@contextlib.contextmanager
def busy_neighbour() -> Iterator[None]:
    """Another lab kernel, on the host's clock, spinning on its CPU until the block ends
    (stopped by the PID started here; lab/run removes its kernel on SIGTERM)."""
    env = dict(os.environ, LAB_CLOCK="real")
    proc = subprocess.Popen([str(LAB / "run"), "sh", "-c", "while :; do :; done"],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        time.sleep(3)  # booted and spinning before the measured run starts
        yield
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def run_all(base: Path, runs: dict[str, float | None], params: list[str]) -> None:
    """Each demo run in turn (the quota'd one in its cgroup, removed after; the one
    named `busy` beside a busy neighbour), with a line per run: its wall time and how
    long its lab kernel waited for a host CPU."""
    for name, quota in runs.items():
        cg = make_cgroup(quota) if quota else None
        beside = busy_neighbour() if name == "busy" else contextlib.nullcontext()
        try:
            with beside:
                took = run_demo(base / name, cg, params)
        finally:
            if cg is not None:
                cg.rmdir()
        print(f"run {name}: {took:.0f} s; {host_wait(base / name)}", flush=True)


def worst_gap(df: pd.DataFrame, runs: dict[str, float | None]) -> float:
    """The largest AU difference between any two runs over the rows of df."""
    return max((float((df[f"au_pct_{a}"] - df[f"au_pct_{b}"]).abs().max())
                for a, b in itertools.combinations(runs, 2)), default=float("nan"))


def compare(base: Path, runs: dict[str, float | None], params: list[str]) -> None:
    """AU per run and mark over the points all runs measured, then the AGREEMENT line:
    the largest AU difference between two runs over the points no run marked, and over
    all of them (what the marks hold back; the only figure left when one run is marked
    throughout, as the quota'd run is on the virtual clock)."""
    df = pd.concat([load(base / n, n) for n in runs], axis=1, join="inner")
    marked = df[[f"emulator_limited_{n}" for n in runs]].any(axis=1)
    common.print_wide(df[[c for n in runs for c in (f"au_pct_{n}", f"limited_by_{n}")]]
                      .round(1), 20)
    if params:
        print(f"demo with: {' '.join(params)}")
    print(f"AGREEMENT au_points={worst_gap(df[~marked], runs):.2f} marked={int(marked.sum())} "
          f"all_points={worst_gap(df, runs):.2f}")


def main() -> int:
    """Run the demos (three, four with --neighbour) and print the comparison."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quota", type=float, default=0.5, help="CPU share of the third run")
    ap.add_argument("--neighbour", action="store_true",
                    help="a fourth run beside another, busy lab kernel")
    ap.add_argument("--out", default=str(RESULTS / "rerun-agreement"))
    ap.add_argument("-p", "--param", action="append", default=[], metavar="KNOB=VALUE",
                    help="a knob for every demo (testbed demo -p)")
    args = ap.parse_args()
    runs: dict[str, float | None] = {"a": None, "b": None, f"cpu{args.quota:g}": args.quota}
    if args.neighbour:
        runs["busy"] = None
    run_all(Path(args.out), runs, args.param)
    compare(Path(args.out), runs, args.param)
    return 0


if __name__ == "__main__":
    sys.exit(main())
