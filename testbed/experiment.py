"""Experiments: a TOML file -> a sweep over distance and mount settings on one running
testbed, with the co-located point (0 km) as the baseline of the same run.

File layout (see experiments/demo.toml):
    name, topology ("apn"), repetitions, au_bar
    [topology_params]  workers, rate, loss_pct ...        (fixed for the run)
    [sweep]            distance_km = [...], mount = ["default", "tuned", ...]
    [mounts.NAME]      MountSpec fields (vers, rsize, nconnect, read_ahead_kb, ...)
    [dataset]          files, file_kib, format
    [workload]         WorkloadSpec fields (batch, compute_ms, steps, readers, ...)

One network and one nfsd serve the whole run; each point sets the fibre's distance live,
drops the client caches, mounts fresh on every worker (cold reads), runs one loader per
worker concurrently, unmounts, and appends its rows to results.csv at once.
"""

from __future__ import annotations

import itertools
import math
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from testbed import results, topology, workload
from testbed.errors import SpecError
from testbed.network.engine import Network
from testbed.services.nfs import NfsMount, NfsServer
from testbed.spec import MountSpec

REPO = Path(__file__).resolve().parent.parent
DEMO_FILE = REPO / "experiments" / "demo.toml"
SWEEP_KEYS = ("distance_km", "mount")


def load(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise SpecError(f"experiment file {p} not found")
    try:
        cfg = tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{p}: {exc}") from None
    unknown = set(cfg.get("sweep", {})) - set(SWEEP_KEYS)
    if unknown:
        raise SpecError(f"{p}: cannot sweep {sorted(unknown)[0]!r} yet; sweepable: "
                        f"{', '.join(SWEEP_KEYS)}")
    mounts = {name: MountSpec.from_dict(m) for name, m in cfg.get("mounts", {}).items()}
    mounts.setdefault("default", MountSpec())
    for m in cfg.get("sweep", {}).get("mount", ["default"]):
        if m not in mounts:
            raise SpecError(f"{p}: sweep names mount {m!r} but there is no [mounts.{m}]")
    try:
        wl = workload.WorkloadSpec(**cfg.get("workload", {}))
    except TypeError as exc:
        raise SpecError(f"{p}: [workload]: {exc}") from None
    cfg["_mounts"], cfg["_workload"] = mounts, wl
    cfg.setdefault("name", p.stem)
    return cfg


def _drop_caches() -> None:
    with open("/proc/sys/vm/drop_caches", "w") as fh:
        fh.write("3")


def run_file(path: str | Path, out_dir: str | Path | None = None, resume: bool = False,
             console: Console | None = None) -> Path:
    console = console or Console()
    cfg = load(path)
    out = Path(out_dir) if out_dir else REPO / "results" / cfg["name"]
    store = results.ResultStore(out)
    if store.csv.exists() and not resume:
        raise SpecError(f"{store.csv} exists: use --resume to continue it or --out elsewhere")
    done = store.done() if resume else set()
    wl: workload.WorkloadSpec = cfg["_workload"]
    mounts: dict[str, MountSpec] = cfg["_mounts"]
    sweep = cfg.get("sweep", {})
    distances = [float(d) for d in sweep.get("distance_km", [0.0])]
    if 0.0 not in distances:
        distances.insert(0, 0.0)  # the co-located baseline is always measured
    mount_names = list(sweep.get("mount", ["default"]))
    reps = int(cfg.get("repetitions", 1))
    bar = float(cfg.get("au_bar", wl.au_bar))
    ds = cfg.get("dataset", {})
    files, file_bytes = int(ds.get("files", 64)), int(ds.get("file_kib", 1024)) * 1024
    fmt = ds.get("format", "raw")
    params = dict(cfg.get("topology_params", {}))
    params["distance_km"] = 0
    topo = topology.build(cfg.get("topology", "apn"), params)
    workers = topology.worker_hosts(topo)
    points = [(m, d, r) for m, d, r in itertools.product(mount_names, distances, range(reps))]
    store.write_meta({"experiment": cfg["name"], "file": str(path), "config": {
        k: v for k, v in cfg.items() if not k.startswith("_")},
        "topology": topology.describe(topo), "environment": results.environment(),
        "baseline": "0 km on the same fibre and settings, same run",
        "cache": "cold client (fresh mount + drop_caches); server data in memory (tmpfs)"})

    with Network(topo) as net:
        data_dir = net.run_dir / "dataset"
        data_dir.mkdir(exist_ok=True)
        net.state.add_dir(str(data_dir))
        net.callback(_rmtree, data_dir)
        t0 = time.monotonic()
        workload.generate(data_dir, files, file_bytes, fmt)
        console.print(f"dataset: {files} x {file_bytes >> 10} KiB {fmt} files "
                      f"generated in {time.monotonic() - t0:.1f} s")
        server = net.enter(NfsServer(net, topology.storage_hosts(topo)[0], data_dir))
        (fibre_key,) = list(net.fibre_links())[:1] or [None]
        if fibre_key is None:
            raise SpecError("the experiment's topology has no fibre link to vary")
        baseline: dict[str, float] = {}
        with Progress(console=console, refresh_per_second=1) as progress:
            task = progress.add_task("points", total=len(points))
            for mname, dist, rep in points:
                key = f"{mname}|{dist:g}|{rep}"
                if key in done:
                    progress.advance(task)
                    continue
                spec = net.set_fibre(*fibre_key, distance_km=dist)
                mspec = mounts[mname]
                _drop_caches()
                ms = [NfsMount(net, w, server, mspec) for w in workers]
                try:
                    for m in ms:
                        m.mount()
                    with ThreadPoolExecutor(len(ms)) as pool:
                        runs = list(pool.map(lambda m: workload.run_loader(m.path, wl), ms))
                finally:
                    for m in ms:
                        m.unmount()
                rows = []
                for w, r in zip(workers, runs):
                    s = workload.summarise(r, wl)
                    rows.append({"point": key, "worker": w, "mount": mname, "distance_km": dist,
                                 "repetition": rep, "rtt_ms": spec.rtt_ms,
                                 "rate_mbit": spec.rate_mbit, "loss_pct": spec.loss_pct,
                                 "rsize": mspec.rsize, "nconnect": mspec.nconnect,
                                 "read_ahead_kb": mspec.read_ahead_kb or 128,
                                 "readers": wl.readers, "prefetch": wl.prefetch,
                                 "batch": wl.batch, "compute_ms": wl.compute_ms, **s,
                                 "window_bound_MB_s": results.window_bound_MB_s(
                                     wl.readers, mspec.rsize, mspec.read_ahead_kb,
                                     file_bytes, spec.rtt_ms),
                                 "link_MB_s": spec.rate_mbit / 8,
                                 "error": r.error or ""})
                for row in rows:
                    if dist == 0:
                        baseline[f"{mname}|{row['worker']}"] = row["wall_s"]
                    base = baseline.get(f"{mname}|{row['worker']}")
                    row["slowdown_pct"] = (100.0 * (row["wall_s"] / base - 1)
                                           if base else math.nan)
                    store.append(row)
                progress.advance(task)

    df = store.frame()
    store.write_parquet()
    table = Table(title=f"{cfg['name']}: median per point (cold reads over NFS)")
    for col in ("mount", "km", "RTT ms", "MB/s", "samples/s", "AU %", "slowdown %",
                "window bound MB/s"):
        table.add_column(col, justify="right")
    for _, r in results.summary(df).iterrows():
        table.add_row(str(r["mount"]), f"{r['distance_km']:g}", f"{r['rtt_ms']:.2f}",
                      f"{r['throughput_MB_s']:.1f}", f"{r['samples_per_s']:.1f}",
                      f"{r['au_pct']:.1f}", f"{r['slowdown_pct']:.1f}",
                      f"{r['window_bound_MB_s']:.0f}")
    console.print(table)
    for name, km in results.max_distance_meeting_bar(df, bar).items():
        console.print(f"largest distance with AU >= {bar:g}%: {name}: "
                      + ("none" if km is None else f"{km:g} km"))
    png = results.plot(df, out / "throughput_au_vs_distance.png", bar)
    console.print(f"results: {store.csv}  plot: {png}")
    return out


def _rmtree(path: Path) -> None:
    import shutil
    shutil.rmtree(path, ignore_errors=True)
