"""Benchmark (lab kernel): our loader vs fio reading the same files, same block size and
concurrency, locally and over NFS through the fibre. Prints loader/fio (goal >= 0.9).

    lab/run .venv/bin/python -m benchmarks.loader_vs_fio [--files 64] [--mib 4] [--jobs 1]
                                                         [--reps 3]

Both read every file once, cold (page cache dropped; a fresh mount for every NFS read),
in 1 MiB reads with --jobs concurrent readers: fio --numjobs with the files split
between jobs, psync, --openfiles=1 (by default fio opens all its files before its clock
starts, which hides one OPEN round trip per file at a distance); the loader with --jobs reader threads, batch --jobs, prefetch 2
(torch's default), no compute. NFS: apn, one worker, 1 Gbit/s, tuned mount (nconnect 4,
read-ahead 16 MiB), at 0 and 1,000 km. Each figure is the median of --reps reads, fio
and loader alternating which goes first, after one unmeasured read that warms nfsd.

"local" is the files in the worker's own file system; in the lab kernel that is tmpfs,
so it is a memory-speed read that measures the per-read CPU cost of each reader.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from collections.abc import Callable
from pathlib import Path

from benchmarks import common
from testbed import topology, workload
from testbed.network.engine import Network
from testbed.services.nfs import NfsMount, NfsServer
from testbed.spec import MountSpec

TUNED = MountSpec(nconnect=4, read_ahead_kb=16384)


def fio_MB_s(root: Path, jobs: int) -> float:
    """fio's read rate (MB/s) over every sample file in root once, cold, the files split
    between `jobs` jobs."""
    files = sorted(p.name for p in root.glob("sample_*"))
    argv = ["fio", "--output-format=json", "--ioengine=psync", "--rw=read", "--bs=1M",
            "--direct=0", "--invalidate=0", "--group_reporting", f"--directory={root}",
            "--openfiles=1"]  # open each file when it is read, inside the timed run
    for j in range(jobs):  # each job reads its share of the files, once
        share = files[j::jobs]
        argv += [f"--name=j{j}", f"--filename={':'.join(share)}",
                 "--file_service_type=sequential"]
    common.drop_caches()
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=600)
    job = json.loads(out.stdout)["jobs"][0]
    return float(job["read"]["bw_bytes"]) / 1e6


def loader_MB_s(root: Path, jobs: int) -> float:
    """The loader's read rate over its first pass through the files (every file once,
    cold, as fio reads them): bytes of the first files/jobs steps over the time from the
    loader's start to the end of the last of them. The loader itself goes on until its
    measured window of at least files/jobs more steps is complete; those are not counted."""
    files = len(list(root.glob("sample_*")))
    steps = files // jobs
    spec = workload.WorkloadSpec(batch=jobs, compute_ms=0, readers=jobs, prefetch=2,
                                 shuffle=False, measure_s=0.5, measure_max_s=0.5,
                                 warmup_max_s=0.5, min_steps=max(2, steps))
    common.drop_caches()
    run = workload.run_loader(root, spec)
    if run.error:
        raise SystemExit(f"loader: {run.error}")
    if len(run.steps) < steps:
        raise SystemExit(f"loader: {len(run.steps)} steps, expected at least {steps}")
    first = run.steps[:steps]
    return sum(s.bytes for s in first) / first[-1].end_s / 1e6


def measure(read: Callable[[Callable[[Path, int], float]], float], reps: int
            ) -> tuple[list[float], list[float]]:
    """fio and loader figures, alternating which goes first (order effects cancel)."""
    fio: list[float] = []
    ours: list[float] = []
    for rep in range(reps):
        for out, tool in common.alternate([(fio, fio_MB_s), (ours, loader_MB_s)], rep):
            out.append(read(tool))
    return fio, ours


def main() -> None:
    """Read the files locally and over NFS at each distance with both tools."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--files", type=int, default=64)
    ap.add_argument("--mib", type=int, default=4)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    topo = topology.build("apn", {"workers": 1, "distance_km": 0, "rate": "1gbit"})
    print(f"{args.files} files x {args.mib} MiB, 1 MiB reads, {args.jobs} reader(s), cold, "
          f"median of {args.reps}")
    print(f"{'where':>12} {'fio MB/s':>9} {'loader MB/s':>11} {'loader/fio':>10}  "
          "(fio | loader reps)")
    with Network(topo) as net:
        data = net.run_dir / "data"
        net.state.add_dir(str(data))
        net.callback(lambda: subprocess.run(["rm", "-rf", str(data)], check=False))
        workload.generate(data, args.files, args.mib << 20, "raw")
        server = net.enter(NfsServer(net, "srv", data))

        def over_nfs(tool: Callable[[Path, int], float]) -> float:
            """The tool's read rate through a fresh tuned mount of the data."""
            with NfsMount(net, "w1", server, TUNED) as m:
                return tool(m.path, args.jobs)

        over_nfs(fio_MB_s)  # warm nfsd: the first read of a new server runs ~20 % slow
        where: list[tuple[str, Callable[[Callable[[Path, int], float]], float]]] = [
            ("local", lambda tool: tool(data, args.jobs))]
        for km in (0, 1000):
            where.append((f"nfs {km} km", over_nfs))
        for name, read in where:
            if name.startswith("nfs"):
                net.set_fibre("srv", "s1", distance_km=int(name.split()[1]))
            fio, ours = measure(read, args.reps)
            f, lo = statistics.median(fio), statistics.median(ours)
            reps = " ".join(f"{x:.0f}" for x in fio) + " | " + " ".join(f"{x:.0f}" for x in ours)
            print(f"{name:>12} {f:>9.1f} {lo:>11.1f} {lo / f:>10.2f}  ({reps})", flush=True)


if __name__ == "__main__":
    main()
