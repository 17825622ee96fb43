"""Benchmark (lab kernel): our loader vs fio reading the same files, same block size and
concurrency, locally and over NFS through the fibre. Prints loader/fio (goal >= 0.9).

    lab/run .venv/bin/python benchmarks/loader_vs_fio.py [--files 32] [--mib 4] [--jobs 1]

Both read every file once, cold (page cache dropped; fresh mount for NFS), in 1 MiB
reads with --jobs concurrent readers (fio: --numjobs with the files split between jobs,
psync; loader: --jobs reader threads, no compute, prefetch 1). NFS: apn, one worker,
1 Gbit/s, tuned mount (nconnect 4, read-ahead 16 MiB), at 0 and 1,000 km.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testbed import topology, workload  # noqa: E402
from testbed.network.engine import Network  # noqa: E402
from testbed.services.nfs import NfsMount, NfsServer  # noqa: E402
from testbed.spec import MountSpec  # noqa: E402


def drop_caches() -> None:
    Path("/proc/sys/vm/drop_caches").write_text("3")


def fio_MB_s(root: Path, jobs: int) -> float:
    files = sorted(p.name for p in root.glob("sample_*"))
    argv = ["fio", "--output-format=json", "--ioengine=psync", "--rw=read", "--bs=1M",
            "--direct=0", "--invalidate=0", "--group_reporting", f"--directory={root}"]
    for j in range(jobs):  # each job reads its share of the files, once
        share = files[j::jobs]
        argv += [f"--name=j{j}", f"--filename={':'.join(share)}",
                 "--file_service_type=sequential"]
    drop_caches()
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=600)
    job = json.loads(out.stdout)["jobs"][0]
    return job["read"]["bw_bytes"] / 1e6


def loader_MB_s(root: Path, jobs: int, files: int) -> float:
    spec = workload.WorkloadSpec(batch=jobs, steps=files // jobs, warmup_steps=0,
                                 compute_ms=0, readers=jobs, prefetch=1, shuffle=False)
    drop_caches()
    run = workload.run_loader(root, spec)
    if run.error:
        raise SystemExit(f"loader: {run.error}")
    return workload.summarise(run, spec)["throughput_MB_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=32)
    ap.add_argument("--mib", type=int, default=4)
    ap.add_argument("--jobs", type=int, default=1)
    args = ap.parse_args()
    topo = topology.build("apn", {"workers": 1, "distance_km": 0, "rate": "1gbit"})
    print(f"{args.files} files x {args.mib} MiB, 1 MiB reads, {args.jobs} reader(s), cold")
    print(f"{'where':>14} {'fio MB/s':>9} {'loader MB/s':>11} {'loader/fio':>10}")
    with Network(topo) as net:
        data = net.run_dir / "data"
        net.state.add_dir(str(data))
        net.callback(lambda: subprocess.run(["rm", "-rf", str(data)], check=False))
        workload.generate(data, args.files, args.mib << 20, "raw")
        rows = [("local", data)]
        server = net.enter(NfsServer(net, "srv", data))
        for km in (0, 1000):
            rows.append((f"nfs {km} km", km))
        for name, where in rows:
            if isinstance(where, Path):
                f, lo = fio_MB_s(where, args.jobs), loader_MB_s(where, args.jobs, args.files)
            else:
                net.set_fibre("srv", "s1", distance_km=where)
                mspec = MountSpec(nconnect=4, read_ahead_kb=16384)
                with NfsMount(net, "w1", server, mspec) as m:
                    f = fio_MB_s(m.path, args.jobs)
                with NfsMount(net, "w1", server, mspec) as m:
                    lo = loader_MB_s(m.path, args.jobs, args.files)
            print(f"{name:>14} {f:>9.1f} {lo:>11.1f} {lo / f:>10.2f}", flush=True)


if __name__ == "__main__":
    main()
