"""Benchmark (lab kernel): a soak of rigs. Does bringing a testbed up and down hundreds of
times in one kernel leave anything behind, or slow down?

    lab/run --timeout 5400 .venv/bin/python -m benchmarks.soak --points 500 > soak.log
    lab/run .venv/bin/python -m benchmarks.soak --short    # 20 points, ~1 min: a smoke run

Each point is its own rig, up -> measure -> down, built from the same pieces the runner
uses (testbed.experiment.measure.rig.Rig, measure.measure): namespaces, veths, a bridge, netem
fibre (10 km), the dataset on the storage host's tmpfs, kernel nfsd with mountd and
nfsdcld; then the worker's NFS mount and the loader for a 0.5 s window; then the mount,
nfsd and namespaces torn down. Consecutive points never share a rig: each point is a Rig
of its own, and they alternate nfsd_threads 2 and 3, a knob that needs a new testbed.

--warmup points (10) first load the kernel modules and Python's imports (one-time
costs, not leaks); the baseline is read after them. The runner's heap takes longer to
reach its working size: in a 500-point run (2026-12-06) RSS grew 5.3 MiB over the next
50 points, 0.2-1.4 MiB per 50 up to point 350, then not at all, while the Python-level
allocations tracemalloc sees stayed flat over 40 points. Then, before, every --every points and after, one
line of what a leak would grow (objects) and what would drift (memory, time):

  netns    /run/netns entries, `ip netns list` lines, and the kernel's live network
           namespaces (active net_namespace objects in /proc/slabinfo, the cache shrunk
           first: also those a leaked reference keeps alive after their name is gone;
           a leak only beyond the freed objects the cache may still park, cache_allowance)
  mounts   /proc/mounts lines of type nfs or nfs4, and lines under the run registry's folder
  fds      the runner's open file descriptors (/proc/self/fd); thr its threads
  procs    user processes in the kernel (mountd, nfsdcld, rpcbind, loaders ...)
  nfsd     nfsd kernel threads; state: entries in the run registry's folder
  memory   the kernel's used memory (MemTotal - MemAvailable) and Slab, read after
           dropping the caches, MemAvailable, and the runner's RSS (MiB), read after a
           full garbage collection: pyroute2 leaves ~2,300 reference cycles a point
           (netlink messages, caught errors' tracebacks) that Python frees only when a
           full collection comes, and until then RSS climbs (+8 MiB over 100 points)
  up_s     mean rig set-up seconds (network + dataset + nfsd ready) since the last line

Kernel objects die asynchronously (a namespace's cleanup is queued work): a reading above
the baseline is retried for up to --settle seconds before it counts.

Closing lines: each object's count after - baseline (a leak when it grew), set-up time
as the mean of the first 50 points vs the last 50 (fewer on a short run), memory drift
(the largest growth of used memory, Slab and RSS over the baseline, in %), and

    SOAK points=<n> failed=<n> leaked=<n> setup_first_s=<x> setup_last_s=<y> \
setup_drift_pct=<x> mem_drift_pct=<x> seconds=<t>

Goal: leaked = 0, no failed point, memory and set-up time flat within 10 % (drift <= 10).
Exit 0 when the goal is met, 1 otherwise.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import mean
from typing import Callable

from testbed.errors import TestbedError
from testbed.experiment.measure import measure as measure_mod
from testbed.experiment.plan import plan as plan_mod
from testbed.experiment.plan.datapaths import drop_caches
from testbed.experiment.plan.plan import Plan, Point
from testbed.experiment.measure.rig import Rig
from testbed.network.state import STATE_DIR

EXPERIMENT = """
name = "soak"
topology = "apn"
[fixed]
workers = 1
rate = "1gbit"
distance_km = 10
[sweep]
nfsd_threads = [2, 3]
[dataset]
files = 4
file_kib = 64
[workload]
batch = 1
compute_ms = 5
measure_s = 0.5
measure_max_s = 0.5
warmup_max_s = 0.5
min_steps = 2
readers = 1
"""
OBJECTS = ("netns", "ip_netns", "kernel_netns", "nfs_mounts", "our_mounts", "fds",
           "threads", "procs", "nfsd", "state")
SETTLING = ("kernel_netns", "nfsd", "procs")  # die asynchronously after a teardown
GOAL_PCT = 10.0
WINDOW = 50  # points per mean of set-up time, first vs last
NFS_TYPES = ("nfs", "nfs4")


def count_lines(path: str, keep: Callable[[list[str]], bool]) -> int:
    """Lines of a file whose whitespace-separated fields keep(fields) accepts."""
    with open(path) as fh:
        return sum(1 for line in fh if keep(line.split()))


def cache_allowance(cache: str = "net_namespace") -> int:
    """Freed objects a slab cache may still count as active after a shrink: a main and
    a spare per-CPU sheaf (kernels with sheaves; 0 without, where the count is exact).
    Measured on 7.2: 20 namespaces added and deleted leave 1 counted."""
    path = Path(f"/sys/kernel/slab/{cache}/sheaf_capacity")
    return 2 * int(path.read_text()) * (os.cpu_count() or 1) if path.exists() else 0


def kernel_netns() -> int:
    """Live network namespaces besides the initial one: active net_namespace objects,
    after flushing the cache's per-CPU slabs and sheaves (freed objects parked there
    count as active until then)."""
    shrink = Path("/sys/kernel/slab/net_namespace/shrink")
    if shrink.exists():
        shrink.write_text("1")
    with open("/proc/slabinfo") as fh:
        for line in fh:
            if line.startswith("net_namespace "):
                return int(line.split()[1])
    return -1  # a kernel whose slabinfo merges or hides the cache


def user_processes() -> int:
    """Processes with a command line (kernel threads have none), this one included."""
    n = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                n += bool(fh.read(1))
        except OSError:
            pass  # it ended meanwhile
    return n


def nfsd_threads() -> int:
    """nfsd kernel threads, in every namespace."""
    n = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            n += Path(f"/proc/{pid}/comm").read_text().strip() == "nfsd"
        except OSError:
            pass
    return n


def status_field(name: str) -> int:
    """A number field of /proc/self/status (VmRSS in kB, Threads)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1])
    raise KeyError(name)


def objects() -> dict[str, int]:
    """Every object count a leak would grow (see the module docstring)."""
    ip = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                        timeout=30, check=True)
    state = str(STATE_DIR)
    return {"netns": len(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else 0,
            "ip_netns": len(ip.stdout.splitlines()), "kernel_netns": kernel_netns(),
            "nfs_mounts": count_lines("/proc/mounts", lambda f: f[2] in NFS_TYPES),
            "our_mounts": count_lines("/proc/mounts", lambda f: f[1].startswith(state)),
            "fds": len(os.listdir("/proc/self/fd")), "threads": status_field("Threads"),
            "procs": user_processes(), "nfsd": nfsd_threads(),
            "state": len(os.listdir(STATE_DIR)) if STATE_DIR.is_dir() else 0}


def allowances() -> dict[str, int]:
    """What each object count may exceed its baseline by without a leak."""
    return {"kernel_netns": cache_allowance()}


def settled_objects(base: dict[str, int] | None, settle_s: float) -> dict[str, int]:
    """objects(), read again for up to settle_s while a count that dies asynchronously
    is above the baseline (beyond its allowance; a real leak stays)."""
    deadline = time.monotonic() + settle_s
    now = objects()
    allow = allowances()
    while base is not None and time.monotonic() < deadline \
            and any(leaks(base, now, allow)[k] for k in SETTLING):
        time.sleep(0.5)
        now = objects()
    return now


def memory() -> dict[str, float]:
    """The kernel's used memory, MemAvailable and Slab after dropping its caches, and the
    runner's RSS after a full garbage collection, in MiB."""
    gc.collect()
    drop_caches()
    info = {line.split(":")[0]: int(line.split()[1])
            for line in Path("/proc/meminfo").read_text().splitlines()}
    return {"used": (info["MemTotal"] - info["MemAvailable"]) / 1024,
            "avail": info["MemAvailable"] / 1024, "slab": info["Slab"] / 1024,
            "rss": status_field("VmRSS") / 1024}


@dataclass
class Sample:
    """One reading: after how many points, when, object counts and memory."""

    points: int
    seconds: float
    objects: dict[str, int]
    memory: dict[str, float]


def leaks(base: dict[str, int], end: dict[str, int],
          allow: dict[str, int] | None = None) -> dict[str, int]:
    """Per object, how many more there are at the end than at the baseline, beyond what
    `allow` tolerates for it (0 if not more)."""
    allow = allow or {}
    return {k: max(0, end[k] - base[k] - allow.get(k, 0)) for k in base}


def drift_pct(before: float, after: float) -> float:
    """How much `after` grew over `before`, in % of `before` (negative: it shrank)."""
    return 100.0 * (after - before) / before if before else 0.0


def first_last(values: list[float], window: int = WINDOW) -> tuple[float, float]:
    """Mean of the first and of the last `window` values (half of them each when there
    are fewer than 2 x window)."""
    if not values:
        return float("nan"), float("nan")
    n = max(1, min(window, len(values) // 2))
    return mean(values[:n]), mean(values[-n:])


def mem_drift_pct(base: dict[str, float], end: dict[str, float]) -> float:
    """The largest growth, in %, of the kernel's used memory, its Slab and the runner's
    RSS from the baseline to the end."""
    return max(drift_pct(base[k], end[k]) for k in ("used", "slab", "rss"))


def goal_failures(leaked: int, failed: int, setup_drift: float, mem_drift: float,
                  goal_pct: float = GOAL_PCT) -> list[str]:
    """What keeps the soak from its goal (none: met)."""
    out = [f"{leaked} leaked object(s)"] if leaked else []
    out += [f"{failed} failed point(s)"] if failed else []
    out += [f"set-up time drifted {setup_drift:+.1f} %"] if not setup_drift <= goal_pct else []
    out += [f"memory drifted {mem_drift:+.1f} %"] if not mem_drift <= goal_pct else []
    return out


def load_points(folder: Path) -> tuple[Plan, list[Point]]:
    """The soak's plan and its two points (nfsd_threads 2 and 3; not their baselines)."""
    path = folder / "soak.toml"
    path.write_text(EXPERIMENT)
    plan = plan_mod.load(path)
    return plan, [p for p in plan.points if not p.is_baseline]


def run_point(plan: Plan, point: Point, rep: int, out: Path) -> tuple[float, str]:
    """One point on a rig of its own: up, measure, down. (set-up seconds, the error or
    "")."""
    t0 = time.monotonic()
    up_s, error = float("nan"), ""
    try:
        with Rig(point) as rig:
            up_s = time.monotonic() - t0
            measure_mod.measure(plan, rig, point, rep, out)
    except (TestbedError, OSError) as exc:
        error = f"{type(exc).__name__}: {exc}"
    (out / "steps.csv").unlink(missing_ok=True)  # the soak's own files must not grow
    return up_s, error


HEADER = (f"{'points':>6} {'s':>6} " + " ".join(f"{k:>{max(4, len(k))}}" for k in OBJECTS)
          + f" {'used':>6} {'avail':>6} {'slab':>5} {'rss':>5} {'up_s':>5}")


def line(s: Sample, up: list[float]) -> str:
    """A sample as one table row (up: set-up seconds of the points since the last)."""
    counts = " ".join(f"{s.objects[k]:>{max(4, len(k))}}" for k in OBJECTS)
    m = s.memory
    ups = f"{mean(up):5.2f}" if up else f"{'-':>5}"
    return (f"{s.points:>6} {s.seconds:>6.0f} {counts} {m['used']:>6.1f} {m['avail']:>6.0f} "
            f"{m['slab']:>5.1f} {m['rss']:>5.1f} {ups}")


def sample(points: int, t0: float, base: dict[str, int] | None, settle_s: float) -> Sample:
    """A reading now (object counts settled against base, then memory)."""
    objs = settled_objects(base, settle_s)
    return Sample(points, time.monotonic() - t0, objs, memory())


def soak(args: argparse.Namespace, out: Path) -> tuple[list[Sample], list[float], list[str]]:
    """The warm-up points, the baseline, then args.points points with a sample every
    args.every: (samples: boot, baseline, ..., end; set-up seconds; errors)."""
    plan, points = load_points(out)
    t0 = time.monotonic()
    boot = sample(0, t0, None, 0)
    for i in range(args.warmup):  # modules, imports, the heap's working size
        _, error = run_point(plan, points[i % 2], i, out)
        if error:
            sys.exit(f"soak: warm-up point {i + 1} failed: {error}")
    samples = [boot, sample(0, t0, boot.objects, args.settle)]
    print(HEADER, "\n" + line(boot, []) + "  boot\n" + line(samples[1], []) + "  baseline",
          flush=True)
    ups: list[float] = []
    errors: list[str] = []
    for i in range(args.points):
        up_s, error = run_point(plan, points[i % 2], args.warmup + i, out)
        ups.append(up_s)
        if error:
            errors.append(f"point {i + 1}: {error}")
            print(f"point {i + 1} failed: {error}", flush=True)
        if (i + 1) % args.every == 0 or i + 1 == args.points:
            samples.append(sample(i + 1, t0, samples[1].objects, args.settle))
            print(line(samples[-1], ups[-args.every:]), flush=True)
    return samples, ups, errors


def report(samples: list[Sample], ups: list[float], errors: list[str], seconds: float) -> int:
    """The closing lines (see the module docstring); the exit status."""
    base, end = samples[1], samples[-1]
    allow = allowances()
    leaked = leaks(base.objects, end.objects, allow)
    print("leaks (end - baseline): " + ", ".join(f"{k} {v}" for k, v in leaked.items())
          + f" (kernel_netns beyond the slab cache's {allow['kernel_netns']} parked objects;"
          f" it read {min(x.objects['kernel_netns'] for x in samples[1:])}-"
          f"{max(x.objects['kernel_netns'] for x in samples[1:])} along the way)")
    valid = [u for u in ups if u == u]  # failed set-ups have no time
    first, last = first_last(valid)
    setup_drift = drift_pct(first, last)
    mem = mem_drift_pct(base.memory, end.memory)
    n = max(1, min(WINDOW, len(valid) // 2))
    print(f"set-up: first {n} points {first:.3f} s, last {n} {last:.3f} s ({setup_drift:+.1f} %)")
    print("memory (baseline -> end, MiB): " + ", ".join(
        f"{k} {base.memory[k]:.1f} -> {end.memory[k]:.1f} "
        f"({drift_pct(base.memory[k], end.memory[k]):+.1f} %)" for k in base.memory))
    misses = goal_failures(sum(leaked.values()), len(errors), setup_drift, mem)
    print("GOAL " + ("met: 0 leaked objects, memory and set-up time flat within "
                     f"{GOAL_PCT:g} %" if not misses else "not met: " + "; ".join(misses)))
    print(f"SOAK points={len(ups)} failed={len(errors)} leaked={sum(leaked.values())} "
          f"setup_first_s={first:.3f} setup_last_s={last:.3f} "
          f"setup_drift_pct={setup_drift:.1f} mem_drift_pct={mem:.1f} seconds={seconds:.0f}",
          flush=True)
    return 1 if misses else 0


def main() -> int:
    """Parse the options, soak, report."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--points", type=int, default=500, help="points after the warm-up")
    ap.add_argument("--warmup", type=int, default=10, help="points before the baseline")
    ap.add_argument("--every", type=int, default=50, help="a sample every N points")
    ap.add_argument("--short", action="store_true", help="a smoke run: 20 points, every 5")
    ap.add_argument("--settle", type=float, default=10.0,
                    help="seconds a count above the baseline may take to fall back")
    args = ap.parse_args()
    if args.short:
        args.points, args.every, args.warmup = 20, 5, 2
    if args.points < 2 or args.every < 1 or args.warmup < 1:
        ap.error("--points must be >= 2, --every and --warmup >= 1")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    print(f"soak: {args.points} points, one rig each, in kernel {os.uname().release} "
          f"({os.environ.get('APN_LAB_KERNEL', 'not a lab kernel')}); memory in MiB",
          flush=True)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="apn-soak-") as tmp:
        samples, ups, errors = soak(args, Path(tmp))
    return report(samples, ups, errors, time.monotonic() - t0)


if __name__ == "__main__":
    sys.exit(main())
