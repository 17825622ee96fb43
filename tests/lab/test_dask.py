"""A sweep on Dask: a real scheduler and two workers as separate processes on this machine
(loopback only), each running its jobs in its own lab kernels; one worker is killed with
SIGKILL in the middle of a job. Every point must come back exactly once, none lost, and
the killed worker's lab kernel must not outlive it. The sweep asks for time_scale "auto":
one calibration job decides k for every point, and every row carries that k."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from lab_processes import processes_mentioning
from testbed.experiment.run import job_host
from testbed.labkernel import REPO, UML

SWEEP = """
name = "dask-loopback"
[fixed]
workers = 1
rate = "1gbit"
time_scale = "auto"
[sweep]
distance_km = [0, 1000, 2000, 3000]
[dataset]
files = 12
file_kib = 1024
[workload]
batch = 2
compute_ms = 20
measure_s = 1
measure_max_s = 2
warmup_max_s = 2
min_steps = 4
readers = 1
"""
DASK = str(Path(sys.executable).with_name("dask"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = pred()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def listening(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def stop(proc):
    """Stop a process group we started: SIGTERM, then SIGKILL."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)


@pytest.fixture
def cluster(tmp_path):
    """A scheduler and two single-thread workers (no nanny: a killed worker stays dead)."""
    port, procs = free_port(), {}
    logs = tmp_path / "logs"
    logs.mkdir()

    def start(name, argv):
        # the checkout under test on the path: its tasks import from it
        procs[name] = subprocess.Popen(argv, stdout=open(logs / f"{name}.log", "wb"),
                                       stderr=subprocess.STDOUT, start_new_session=True,
                                       cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))

    start("scheduler", [DASK, "scheduler", "--host", "127.0.0.1", "--port", str(port),
                        "--no-dashboard"])
    wait_for(lambda: listening(port), 60, "the scheduler")
    address = f"tcp://127.0.0.1:{port}"
    for name in ("wa", "wb"):
        start(name, [DASK, "worker", address, "--nthreads", "1", "--no-nanny", "--name", name,
                     "--host", "127.0.0.1", "--no-dashboard",
                     "--local-directory", str(tmp_path / name)])
    from distributed import Client
    with Client(address, timeout="30s") as c:  # both in, so that each gets a job
        c.wait_for_workers(2, timeout=60)
    yield address, procs, logs
    for proc in procs.values():
        stop(proc)


def job_of(pid):
    """The job folder a worker process owns, once its lab kernel has finished one run."""
    for d in job_host.JOBS.glob("*") if job_host.JOBS.is_dir() else []:
        try:
            owner = json.loads((d / "owner.json").read_text())
        except (OSError, ValueError):
            continue
        events = d / "events.jsonl"
        if owner["pid"] == pid and events.exists() and '"rows"' in events.read_text():
            return d
    return None


def test_a_killed_worker_loses_no_point_and_writes_none_twice(cluster, tmp_path):
    address, procs, logs = cluster
    sweep, out = tmp_path / "sweep.toml", tmp_path / "out"
    sweep.write_text(SWEEP)
    t0 = time.monotonic()
    client = subprocess.Popen([sys.executable, "-m", "testbed.cli", "run", str(sweep),
                               "--scheduler", address, "--parallel", "2",
                               "--out", str(out)],
                              stdout=open(logs / "client.log", "wb"),
                              stderr=subprocess.STDOUT, start_new_session=True, cwd=REPO)
    procs["client"] = client
    victim = procs["wa"]
    job = wait_for(lambda: job_of(victim.pid), 240, "worker wa to finish a run")
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(timeout=10)
    killed_at = time.monotonic() - t0
    # its lab kernel dies with it: lab/run (whose command line names the job) goes
    wait_for(lambda: not processes_mentioning(str(job)), 30, "wa's lab kernel to stop")
    assert client.wait(timeout=420) == 0, (logs / "client.log").read_text()[-2000:]
    took = time.monotonic() - t0
    df = pd.read_csv(out / "results.csv")
    assert sorted(df["point"]) == sorted(f"distance_km={km}|rep=0" for km in
                                         (0, 1000, 2000, 3000)), df["point"].tolist()
    assert (df["status"] == "ok").all()
    scale = json.loads((out / "meta.json").read_text())["time_scale"]
    assert scale["auto"] and scale["calibrated_MB_s"] > 0
    assert {r.point.rsplit("|", 1)[0]: r.time_scale_k for r in df.itertuples()} == \
        scale["per_point"]
    meta = json.loads((out / "meta.json").read_text())["execution"]
    assert meta["where"] == f"dask {address}" and meta["parallel_start"] == 2
    assert {k["kernel_kind"] for k in meta["lab_kernels"]} == {"uml"}
    steps = pd.read_csv(out / "steps.csv")
    assert set(steps["point"]) == set(df["point"])
    assert steps.groupby(["point", "step"]).size().max() == 1  # steps once, too
    assert not processes_mentioning(str(UML)), "a lab kernel outlived the sweep"
    print(f"killed wa at {killed_at:.0f} s; sweep done in {took:.0f} s")
