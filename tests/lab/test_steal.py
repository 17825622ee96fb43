"""A lab kernel that loses CPU to its machine mid-point is marked and measured again, never
silently low. The machine's loss is real, not simulated: the host puts lab/run and its
kernel in a cgroup and, while the first point measures, holds them to a tenth of a CPU
(cgroup v1 cpu.cfs_quota_us or v2 cpu.max), as a cloud's CPU quota or a busy
hypervisor does to a virtual machine: from inside, the kernel simply stops running part
of the time. The quota is lifted as soon as the run says it set the point aside. The
point must come back marked emulator (host) in its set-aside measurement, measured again
unmarked, with the figures it set aside in results.csv; the point after it must be
measured once."""

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from testbed.labkernel import REPO
from testbed.paths import RESULTS

CG1 = Path("/sys/fs/cgroup/cpu")
CG2 = Path("/sys/fs/cgroup")
PERIOD_US = 100_000
QUOTA = 0.1  # of one CPU, while the first point measures
EXPERIMENT = """
name = "quota"
[fixed]
workers = 1
rate = "1gbit"
[sweep]
distance_km = [0, 1000]
[dataset]
files = 24
file_kib = 1024
[workload]
batch = 2
compute_ms = 100
readers = 2
measure_s = 4
measure_max_s = 8
warmup_max_s = 2
min_steps = 10
"""
FIRST, SECOND = "distance_km=0|rep=0", "distance_km=1000|rep=0"


class Cgroup:
    """A fresh cpu cgroup (v1 or v2) with no quota until `hold` sets one."""

    def __init__(self) -> None:
        self.v1 = (CG1 / "cpu.cfs_quota_us").exists()
        self.path = (CG1 if self.v1 else CG2) / f"apn-steal-test-{os.getpid()}"
        self.path.mkdir()
        if self.v1:
            (self.path / "cpu.cfs_period_us").write_text(str(PERIOD_US))

    def hold(self, cpus: float | None) -> None:
        """Hold the members to `cpus` of one CPU (None: no limit)."""
        quota = int(cpus * PERIOD_US) if cpus else None
        if self.v1:
            (self.path / "cpu.cfs_quota_us").write_text(str(quota or -1))
        else:
            (self.path / "cpu.max").write_text(f"{quota or 'max'} {PERIOD_US}")

    @property
    def join(self) -> Path:
        """The file a shell writes its PID into to join."""
        return self.path / ("tasks" if self.v1 else "cgroup.procs")


def follow(proc: subprocess.Popen, cg: Cgroup, seen: list[str]) -> None:
    """Read the run's output: hold the kernel to QUOTA when the first point starts, lift
    it when the run sets that point aside."""
    assert proc.stdout is not None
    for line in proc.stdout:
        seen.append(line)
        if "set aside" in line:
            cg.hold(None)
        elif line.rstrip().endswith(f"run {FIRST}"):
            cg.hold(QUOTA)


@pytest.fixture
def folder():
    """A folder in the checkout, which the lab kernel sees (its /tmp is its own)."""
    path = RESULTS / f"lab-test-quota-{os.getpid()}"
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_kernel_held_to_a_cpu_quota_is_marked_and_measured_again(folder):
    (folder / "quota.toml").write_text(EXPERIMENT)
    out = folder / "out"
    cg = Cgroup()
    cmd = (f"echo $$ > {cg.join}; exec {REPO}/lab/run --timeout 900 .venv/bin/testbed -v run "
           f"{folder / 'quota.toml'} --out {out}")
    seen: list[str] = []
    try:
        proc = subprocess.Popen(["sh", "-c", cmd], cwd=REPO, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        reader = threading.Thread(target=follow, args=(proc, cg, seen), daemon=True)
        reader.start()
        rc = proc.wait(timeout=1200)
        reader.join(timeout=10)
    finally:
        cg.hold(None)
        for _ in range(50):  # the members are gone once lab/run has exited
            try:
                cg.path.rmdir()
                break
            except OSError:
                time.sleep(0.2)
    tail = "".join(seen[-30:])
    assert rc == 0, tail
    assert any("set aside" in line for line in seen), tail
    rows = pd.read_csv(out / "results.csv").set_index("point")
    first, second = rows.loc[FIRST], rows.loc[SECOND]
    assert first["remeasured"] >= 1, tail
    assert str(first["remeasured_why"]).startswith("emulator (host"), first["remeasured_why"]
    assert "host wait" in first["remeasured_why"] and "AU" in first["remeasured_why"]
    # kept: measured once the quota was lifted, not silently low
    assert not first["emulator_limited"] or "host" not in str(first["emulator_reason"]), \
        first[["au_pct", "emulator_reason", "host_wait_pct"]].to_dict()
    assert first["host_wait_pct"] < 10.0 and first["au_pct"] > 95.0, \
        first[["au_pct", "host_wait_pct", "host_steal_pct"]].to_dict()
    assert second["remeasured"] == 0 and second["host_steal_pct"] >= 0
