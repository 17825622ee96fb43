"""Benchmark (host side): how many AU points does a lab kernel lose per % of CPU its machine
takes from it? The figure behind testbed.experiment.record.marks.STEAL_PCT.

    sudo .venv/bin/python -m benchmarks.steal_sensitivity [--levels 0,1,2,5,10]
        [--period-ms 100] [--distances 1500,3000] [--mounts default,tuned] [--out DIR]

For each level L, runs README's demo workload (experiments/demo.toml without its search,
the given distances and mounts, with their 0 km baselines) in one lab kernel while this
script stops the kernel's host process (SIGSTOP, then SIGCONT, only the linux.uml the
lab/run it started runs) for L % of every period: from inside, the kernel simply does not
run part of the time, as when a hypervisor steals its virtual machine's CPU. Neither the
kernel nor lab/run's meter can see a stop (a stopped process neither runs nor waits, and
no steal is booked), so every point comes back unmarked: this measures what an unmarked
loss of that size does to the figures. Prints AU per point and level, then per point the
AU lost per % of CPU taken (a least-squares slope over the levels), and a closing line

    SENSITIVITY au_per_pct=<the largest slope over the points> at=<that point>
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

import pandas as pd
import tomli_w

from benchmarks import common
from testbed.paths import EXPERIMENTS, LAB, REPO, RESULTS


def experiment(distances: list[float], mounts: list[str]) -> dict:
    """The demo's experiment without its search, over `distances` (and 0 km) x mounts."""
    exp = tomllib.loads((EXPERIMENTS / "demo.toml").read_text())
    exp.pop("search", None)
    exp["name"] = "steal-sensitivity"
    exp["sweep"] = {"distance_km": sorted({0.0, *distances}), "mount": mounts}
    return exp


def kernels(pid: int) -> list[int]:
    """The user-mode kernel processes lab/run `pid` started (its children named
    linux.uml), found now. Only the kernel is stopped: the guest's own processes
    (uml-userspace) are ptraced by it, and stopping them too aborts the kernel."""
    found = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                stat = (p / "stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid and "(linux.uml)" in stat:
                found.append(int(p.name))
    return found


class Staller:
    """Stops the kernel of a lab/run for `share` of every `period_s`, until closed;
    always leaves it running."""

    def __init__(self, root: int, share: float, period_s: float) -> None:
        """A staller of the processes below `root` (not started yet)."""
        self.root, self.share, self.period_s = root, share, period_s
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def signal(self, pids: list[int], sig: int) -> None:
        """Send `sig` to each of `pids` that still exists."""
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def loop(self) -> None:
        """Stop and continue the tree each period until closed (the tree's PIDs read
        again every 2 s: lab/run starts its kernel after a while)."""
        pids, refreshed = kernels(self.root), time.monotonic()
        while not self.stop.is_set():
            if time.monotonic() - refreshed > 2.0:
                pids, refreshed = kernels(self.root), time.monotonic()
            self.signal(pids, signal.SIGSTOP)
            time.sleep(self.share * self.period_s)
            self.signal(pids, signal.SIGCONT)
            self.stop.wait((1 - self.share) * self.period_s)

    def __enter__(self) -> "Staller":
        """Start stalling (nothing to do at a share of 0)."""
        if self.share > 0:
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop stalling and leave every process of the tree running."""
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join(timeout=5)
        self.signal(kernels(self.root), signal.SIGCONT)


def run_level(exp: Path, out: Path, share: float, period_s: float) -> float:
    """One run of the experiment with its kernel stopped `share` of the time (into a
    fresh `out`); seconds."""
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.monotonic()
    proc = subprocess.Popen([str(LAB / "run"), ".venv/bin/testbed", "run", str(exp), "--out",
                             str(out)], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    with Staller(proc.pid, share, period_s):
        _, err = proc.communicate(timeout=3600)
    if common.run_failed(proc.returncode):
        sys.exit(f"steal_sensitivity: the run failed ({proc.returncode}): {err[-500:]}")
    return time.monotonic() - t0


def main() -> int:
    """Run the experiment at each level of stalling and print the AU lost per level."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--levels", default="0,1,2,5,10", help="% of each period stopped")
    ap.add_argument("--period-ms", type=float, default=100.0)
    ap.add_argument("--distances", default="1500,3000")
    ap.add_argument("--mounts", default="default,tuned")
    ap.add_argument("--out", default=str(RESULTS / "steal-sensitivity"))
    args = ap.parse_args()
    base = Path(args.out)
    base.mkdir(parents=True, exist_ok=True)
    exp = base / "experiment.toml"
    exp.write_text(tomli_w.dumps(experiment([float(d) for d in args.distances.split(",")],
                                            args.mounts.split(","))))
    levels = [float(x) for x in args.levels.split(",")]
    table = {}
    for level in levels:
        out = base / f"stop{level:g}"
        took = run_level(exp, out, level / 100, args.period_ms / 1000)
        s = common.read_summary(out).set_index("point_id")
        table[level] = s["au_pct"]
        marked = ", ".join(s.index[s["emulator_limited"]]) or "none"
        print(f"stopped {level:g} % of every {args.period_ms:g} ms: {took:.0f} s; marked: "
              f"{marked}", flush=True)
    df = pd.DataFrame(table)
    common.print_wide(df.round(1), 12)
    x = pd.Series(levels)
    slopes = {p: -float(((x - x.mean()) * (row.values - row.mean())).sum()
                        / ((x - x.mean()) ** 2).sum()) for p, row in df.iterrows()}
    for p, v in slopes.items():
        print(f"{p}: {v:.2f} AU points lost per % of CPU taken")
    worst = max(slopes, key=lambda p: slopes[p])
    print(f"SENSITIVITY au_per_pct={slopes[worst]:.2f} at={worst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
