"""Benchmark (host side): do the demo's figures survive a rerun, and a slower machine?

    sudo .venv/bin/python -m benchmarks.rerun_agreement [--plain N] [--quota 0.5]
        [--neighbour] [--spread] [--out DIR] [-p KNOB=VALUE ...]

Runs `testbed demo` in the lab kernel three times: twice as it is (--plain), once with
the lab kernel held to `quota` of one CPU by a host cgroup (cgroup v1 cpu.cfs_quota_us,
or v2 cpu.max; the lab kernel joins it before it starts and the cgroup is removed after;
--quota 0 leaves that run out). Over the points all runs measured (the grid; search
probes may differ) it prints AU per run and mark, the largest AU difference between any
two runs over the points no run marked emulator-limited, how many points any run marked,
each search setting's crossing per run, then a closing line

    AGREEMENT au_points=<x> marked=<n> all_points=<x over every point, marked or not>
        steal_max=<the most steal over any point of any run, %>

--spread prints the rerun spread by kind of point over the plain runs, the figures of
testbed/experiment/record/reruns.py's RERUN_SD.

--neighbour adds a fourth run beside a busy neighbour: another lab kernel (on the host's
clock) spinning on its CPU for the whole run, as a second user's job would. LAB_CLOCK is
passed on: LAB_CLOCK=virtual compares the runs on the virtual clock (docs/virtual-clock.md).

Goal: au_points <= 2, i.e. a figure either does not depend on the machine or says so.
-p passes knobs to every demo (`testbed demo -p`), to try a variant of the demo with
the same comparison; the closing line is the demo's as it is only without them.
Each run's line also says what the machine took from its lab kernel (lab/run's meter):
its wait for a host CPU and the hypervisor's steal (past testbed.experiment.record.marks'
HOST_WAIT_PCT / STEAL_PCT a point is marked "host" / "steal"), and how many
measurements were set aside for it.
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


def machine(out: Path) -> str:
    """What the machine took from the run's lab kernel (lab/run's meter over each point):
    its wait for a host CPU and the hypervisor's steal, median and largest share of a
    point's time, and the measurements set aside and measured again because of it."""
    r = pd.read_csv(out / "results.csv")
    parts = []
    for column, name in (("host_wait_pct", "host wait"), ("host_steal_pct", "steal")):
        w = r[column].dropna() if column in r else pd.Series(dtype=float)
        parts.append(f"{name}: not metered" if w.empty else
                     f"{name}: median {w.median():.1f} %, max {w.max():.1f} %")
    again = int(r["remeasured"].fillna(0).sum()) if "remeasured" in r else 0
    return "; ".join(parts) + f" of a point's time; {again} measurement(s) set aside"


def steal_max(out: Path) -> float:
    """The most steal over any point of a run (NaN: not metered)."""
    r = pd.read_csv(out / "results.csv")
    return float(r["host_steal_pct"].max()) if "host_steal_pct" in r else float("nan")


def crossings(base: Path, runs: dict[str, float | None]) -> None:
    """Each search setting's crossing per run (search.csv) and how far apart they are:
    the answer a user reads, which one disturbed probe used to move by hundreds of km."""
    found = {n: pd.read_csv(base / n / "search.csv").set_index("setting")
             for n in runs if (base / n / "search.csv").exists()}
    if not found:
        return
    for setting in next(iter(found.values())).index:
        got = [(n, f[["crossing", "uncertainty"]].loc[setting]) for n, f in found.items()
               if setting in f.index]
        xs = [float(c["crossing"]) for _, c in got]
        text = ", ".join(f"{n} {float(c['crossing']):g} ± {float(c['uncertainty']):g}"
                         for n, c in got)
        print(f"CROSSINGS {setting}: {text}; apart {max(xs) - min(xs):g}")


def _unmarked(out: Path, run: str) -> pd.DataFrame:
    """A run's measured rows no mark excused, with point_id and slowdown (and their own
    intervals: batch means over each point's steps)."""
    from testbed.experiment.record import summary
    r = summary.with_slowdown(pd.read_csv(out / "results.csv"))
    keep = (r["status"] == "ok") & ~r["emulator_limited"].astype(str).str.lower().eq("true")
    return r[keep].assign(run=run)


def spread(base: Path, plain: list[str]) -> None:
    """The rerun spread by kind of point (reruns.RERUN_SD's figures) over the plain runs:
    per point measured unmarked in every run, the variance between runs beyond the runs'
    own (batch means) variance, pooled by limited_by; printed as the table to keep."""
    df = pd.concat([_unmarked(base / n, n) for n in plain])
    df = df.groupby("point_id").filter(lambda g: g["run"].nunique() == len(plain))
    for metric, own in (("au_pct", "au_ci_pct"), ("slowdown_pct", "slowdown_ci_pct")):
        per = df.assign(se2=(df[own] / 1.96) ** 2).groupby("point_id").agg(
            kind=("limited_by", "first"), var=(metric, "var"), se2=("se2", "mean"))
        extra = (per["var"] - per["se2"]).groupby(per["kind"]).mean().clip(lower=0.0)
        table = {k: round(float(v) ** 0.5, 2) for k, v in extra.items()}
        print(f"SPREAD {metric} over {len(plain)} runs: {table} (points per kind: "
              f"{per.groupby('kind').size().to_dict()})")


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
        print(f"run {name}: {took:.0f} s; {machine(base / name)}", flush=True)


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
    steal = max(steal_max(base / n) for n in runs)
    print(f"AGREEMENT au_points={worst_gap(df[~marked], runs):.2f} marked={int(marked.sum())} "
          f"all_points={worst_gap(df, runs):.2f} steal_max={steal:.1f}")


def main() -> int:
    """Run the demos (three, four with --neighbour) and print the comparison."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plain", type=int, default=2, help="runs as the demo is (default 2)")
    ap.add_argument("--quota", type=float, default=0.5,
                    help="CPU share of one more run held to it (0: no such run)")
    ap.add_argument("--spread", action="store_true",
                    help="print the rerun spread by kind of point over the plain runs")
    ap.add_argument("--neighbour", action="store_true",
                    help="a fourth run beside another, busy lab kernel")
    ap.add_argument("--out", default=str(RESULTS / "rerun-agreement"))
    ap.add_argument("-p", "--param", action="append", default=[], metavar="KNOB=VALUE",
                    help="a knob for every demo (testbed demo -p)")
    args = ap.parse_args()
    plain = [chr(ord("a") + i) for i in range(args.plain)]
    runs: dict[str, float | None] = {n: None for n in plain}
    if args.quota:
        runs[f"cpu{args.quota:g}"] = args.quota
    if args.neighbour:
        runs["busy"] = None
    run_all(Path(args.out), runs, args.param)
    compare(Path(args.out), runs, args.param)
    crossings(Path(args.out), runs)
    if args.spread:
        spread(Path(args.out), plain)
    return 0


if __name__ == "__main__":
    sys.exit(main())
