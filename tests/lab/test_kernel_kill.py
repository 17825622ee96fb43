"""A lab kernel SIGKILLed from the host in the middle of a point, on the single-kernel path
(`testbed run --parallel 1`: lab kernels this host starts itself, no Dask; test_dask.py
covers a killed Dask worker, whose kernel dies with it).

The kernel (the linux.uml process lab/run started for the job, found by PID below the
`testbed run` we started) is killed while it measures the sweep's second point, and
again while it measures that point once more: by design (testbed.experiment.run.ledger) a
run whose kernel died is measured again, and recorded as failed the second time. The
run must end with one error line and no traceback, the point the kernels never got to
must still be measured, `--resume` must measure the failed point, every point must
appear exactly once as ok, and nothing may be left on the host: no lab kernel or lab/run
process, no lab/run folder, no job folder."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from lab_processes import processes_mentioning
from testbed.experiment.run import job_host
from testbed.labkernel import REPO, UML

SWEEP = """
name = "kernel-kill"
[fixed]
workers = 1
rate = "1gbit"
[sweep]
distance_km = [0, 1000, 2000]
[dataset]
files = 12
file_kib = 1024
[workload]
batch = 2
compute_ms = 20
measure_s = 2
measure_max_s = 4
warmup_max_s = 2
min_steps = 4
readers = 1
"""
VICTIM = "distance_km=1000|rep=0"
SETTLE_S = 1.5  # after the point started and its testbed is up: mounting or reading


def wait_for(pred, timeout, what, proc=None):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = pred()
        if value:
            return value
        assert proc is None or proc.poll() is None, f"the run ended waiting for {what}"
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def children(pid):
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if int((p / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(p.name))
            except (OSError, IndexError, ValueError):
                pass
    return out


def descendants(pid):
    todo, found = [pid], []
    while todo:
        kids = children(todo.pop())
        found += kids
        todo += kids
    return found


def exe(pid):
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


def cmdline(pid):
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def kernel_of(client_pid, jobdir):
    """The lab kernel of a job, below our `testbed run`: the linux.uml (its own process
    group leader) started by the lab/run whose command names the job's folder; with
    lab/run's run folder (the kernel's cwd)."""
    for lab_run in descendants(client_pid):
        if str(jobdir) in cmdline(lab_run) and exe(lab_run) != str(UML):
            for pid in children(lab_run):
                if exe(pid) == str(UML) and os.getpgid(pid) == pid:
                    return pid, Path(os.readlink(f"/proc/{pid}/cwd"))
    return None


def job_measuring(client_pid, run, skip):
    """The job folder (not in skip) of our run whose kernel has started `run` and not
    finished it, once its testbed is up (its console says nfsd listens; one testbed per
    kernel)."""
    for d in job_host.JOBS.glob("*") if job_host.JOBS.is_dir() else []:
        if d in skip:
            continue
        try:
            owner = json.loads((d / "owner.json").read_text())
            events = [json.loads(line) for line in (d / "events.jsonl").read_text()
                      .splitlines() if line.strip()]
            console = (d / "console.log").read_text(errors="replace")
        except (OSError, ValueError):
            continue
        if owner["pid"] != client_pid:
            continue
        started = [e for e in events if e["run"] == run and e.get("started")]
        finished = [e for e in events if e["run"] == run and "rows" in e]
        if started and not finished and "listening" in console:
            return d
    return None


def kill_kernel_measuring(client, run, skip):
    """SIGKILL, by PID, the lab kernel of a job (not in skip) measuring `run`; (its PID,
    lab/run's folder, the job's folder)."""
    jobdir = wait_for(lambda: job_measuring(client.pid, run, skip), 240,
                      f"a kernel to measure {run}", client)
    pid, run_dir = wait_for(lambda: kernel_of(client.pid, jobdir), 10,
                            "the lab kernel's PID")
    assert run_dir.name.startswith("apn-lab-"), run_dir
    time.sleep(SETTLE_S)
    events = (jobdir / "events.jsonl").read_text()
    assert f'"run": "{run}", "rows"' not in events, "too late: the run has ended"
    os.kill(pid, signal.SIGKILL)
    return pid, run_dir, jobdir


def test_a_killed_lab_kernel_fails_its_point_once_and_resume_measures_it(tmp_path):
    sweep, out = tmp_path / "sweep.toml", tmp_path / "out"
    sweep.write_text(SWEEP)
    argv = [sys.executable, "-m", "testbed.cli", "run", str(sweep), "--parallel", "1",
            "--out", str(out)]
    t0 = time.monotonic()
    client = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True, start_new_session=True, cwd=REPO)
    try:
        killed = []
        for _ in range(2):
            killed.append(kill_kernel_measuring(client, VICTIM, {j for *_, j in killed}))
        _, stderr = client.communicate(timeout=600)
    finally:
        if client.poll() is None:
            os.killpg(client.pid, signal.SIGKILL)
            client.wait(timeout=30)
    took = time.monotonic() - t0

    assert client.returncode == 1, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("testbed: error:")]
    assert errors == ["testbed: error: 1 of 3 point run(s) failed: see the reason column "
                      "of results.csv"], stderr[-3000:]
    assert stderr.strip().splitlines()[-1] == errors[0]
    df = pd.read_csv(out / "results.csv")
    by_status = {s: sorted(g["point"]) for s, g in df.groupby("status")}
    assert by_status == {"failed": [VICTIM],
                         "ok": ["distance_km=0|rep=0", "distance_km=2000|rep=0"]}, \
        df[["point", "status", "reason"]]
    reason = df.loc[df.status == "failed", "reason"].iloc[0]
    assert reason.startswith("lost twice: ") and "killed by SIGKILL" in reason, reason

    # Nothing of the killed kernels (nor of the others) is left on the host.
    assert not processes_mentioning(str(UML)), "a lab kernel outlived the run"
    assert not processes_mentioning(str(job_host.JOBS)), "a lab/run outlived the run"
    for pid, run_dir, jobdir in killed:
        assert not Path(f"/proc/{pid}").exists()
        assert not run_dir.exists() and not jobdir.exists(), (run_dir, jobdir)
    assert not list(job_host.JOBS.glob("*")) if job_host.JOBS.is_dir() else True
    for f in Path("/run/apn-testbed").glob("*.json"):  # no run registry of ours
        assert json.loads(f.read_text()).get("owner_pid") != client.pid, f

    again = subprocess.run(argv + ["--resume"], capture_output=True, text=True,
                           timeout=600, cwd=REPO)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Traceback" not in again.stderr
    df = pd.read_csv(out / "results.csv")
    ok = df[df.status == "ok"]
    assert sorted(ok["point"]) == sorted(f"distance_km={km}|rep=0" for km in (0, 1000, 2000))
    assert ok["point"].is_unique and ok["au_pct"].notna().all()
    assert list(df["point"]).count(VICTIM) == 2  # its failure, then its measurement
    assert not processes_mentioning(str(UML))
    assert not list(job_host.JOBS.glob("*")) if job_host.JOBS.is_dir() else True
    print(f"killed lab kernels {[k[0] for k in killed]}; run {took:.0f} s; "
          f"reason: {reason[:160]}")
