"""SIGKILL a run at every phase, then `testbed clean`: within 30 s nothing of the dead
run is left (namespace, mount, nfsd thread, mountd/rpcbind/cachefilesd/nfsdcld process, run
folder, registry), and a second run that is still alive is not touched.

The runner records what it is doing in its run registry (phase), so each case waits for
its phase there and kills the runner's own PID, as a crash would."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runs import STATE, comm_pids, registry_of

pytestmark = pytest.mark.system

NETNS = Path("/run/netns")
DAEMONS = ("rpc.mountd", "rpcbind", "cachefilesd", "nfsd", "nfsdcld")

EXPERIMENT = """
name = "crash"
[fixed]
workers = 1
rate = "100mbit"
distance_km = 3000
{extra}
[dataset]
files = 24
file_kib = 2048
[workload]
batch = 2
compute_ms = 50
measure_s = 5
measure_max_s = 10
warmup_max_s = 2
min_steps = 4
readers = 2
"""

# phase name -> (extra TOML, registry phase to wait for, seconds to wait after it)
PHASES = {
    "namespaces up": ("", "network", 0.0),
    "nfsd running": ("", "nfsd", 1.0),
    "mounts live": ('data_path = "staged"', "mounts", 1.5),
    "loader mid-read": ("", "loader", 1.5),
    "capture running": ("[capture]\nseconds = 60", "loader", 1.5),
}


def _wait_phase(proc, phase, deadline_s=120):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        assert proc.poll() is None, proc.stderr.read()
        st = registry_of(proc.pid)
        if st and st.get("phase") == phase and st.get("namespaces"):
            if phase != "mounts" or st.get("mounts"):
                return st
        time.sleep(0.02)
    raise AssertionError(f"run never reached phase {phase}")


@pytest.fixture
def live_run():
    """A second run (`testbed up local`) that stays alive through the clean."""
    up = subprocess.Popen([sys.executable, "-m", "testbed.cli", "up", "local",
                           "-p", "workers=1"], stdout=subprocess.PIPE, text=True)
    for line in up.stdout:
        if "Ctrl-C" in line:
            break
    st = registry_of(up.pid)
    assert st is not None
    yield st
    up.send_signal(signal.SIGINT)
    up.wait(timeout=60)


# One phase on every kernel; the others test the runner's own bookkeeping (marked runner).
@pytest.mark.parametrize("phase", [pytest.param(p, marks=() if p == "loader mid-read" else
                                                pytest.mark.runner) for p in PHASES])
def test_clean_after_sigkill(phase, live_run, tmp_path):
    extra, wait_for, settle = PHASES[phase]
    f = tmp_path / "crash.toml"
    f.write_text(EXPERIMENT.format(extra=extra))
    before = comm_pids(DAEMONS)
    proc = subprocess.Popen([sys.executable, "-m", "testbed.cli", "run", str(f), "--out",
                             str(tmp_path / "out")], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    st = _wait_phase(proc, wait_for)
    time.sleep(settle)
    prefix = st["prefix"]
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert any(n.startswith(prefix) for n in os.listdir(NETNS))  # a crash leaves them

    t0 = time.monotonic()
    clean = subprocess.run([sys.executable, "-m", "testbed.cli", "clean"],
                           capture_output=True, text=True, timeout=60)
    elapsed = time.monotonic() - t0
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert elapsed < 30, elapsed
    assert live_run["prefix"] in clean.stdout  # reported as left alone

    assert not [n for n in os.listdir(NETNS) if n.startswith(prefix)]
    assert prefix not in Path("/proc/mounts").read_text()
    left = sorted(map(str, (STATE / prefix).rglob("*"))) if (STATE / prefix).exists() else []
    assert not (STATE / prefix).exists(), (left, clean.stdout)
    assert not (STATE / f"{prefix}.json").exists()
    assert set(comm_pids(DAEMONS)) <= set(before), comm_pids(DAEMONS)
    # The live run is untouched: its namespaces and registry are still there.
    for ns in live_run["namespaces"]:
        assert (NETNS / ns).exists()
    assert (STATE / f"{live_run['prefix']}.json").exists()


@pytest.mark.runner
def test_clean_puts_back_the_tcp_mem_a_killed_run_raised(tmp_path):
    """256 MiB TCP buffers on two hosts need more than a lab kernel's tcp_mem: the run
    raises it (recording what it found first); killed, `testbed clean` writes it back."""
    tcp_mem = Path("/proc/sys/net/ipv4/tcp_mem")
    found = tcp_mem.read_text().split()
    f = tmp_path / "crash.toml"
    f.write_text(EXPERIMENT.format(extra='mount = "big"\n[mounts.big]\ntcp_buffer_mib = 256'))
    proc = subprocess.Popen([sys.executable, "-m", "testbed.cli", "run", str(f), "--out",
                             str(tmp_path / "out")], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    end = time.monotonic() + 120
    while not (registry_of(proc.pid) or {}).get("tcp_mem_set"):
        assert proc.poll() is None and time.monotonic() < end, proc.stderr.read()
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert tcp_mem.read_text().split() != found  # left raised by the kill
    clean = subprocess.run([sys.executable, "-m", "testbed.cli", "clean"],
                           capture_output=True, text=True, timeout=60)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert tcp_mem.read_text().split() == found, clean.stdout
    assert f"tcp_mem put back to {' '.join(found)}" in clean.stdout


@pytest.mark.runner
def test_a_run_that_ends_puts_tcp_mem_back_and_leaves_no_registry(tmp_path):
    """The same raise on a run that ends normally: tcp_mem as it was, and no registry
    file left behind (the put-back is recorded before the registry goes, not after)."""
    from testbed.experiment import run_file
    tcp_mem = Path("/proc/sys/net/ipv4/tcp_mem")
    found, registries = tcp_mem.read_text().split(), set(STATE.glob("tb*.json"))
    f = tmp_path / "ends.toml"
    f.write_text(EXPERIMENT.format(extra='mount = "big"\n[mounts.big]\ntcp_buffer_mib = 256'))
    run_file(f, tmp_path / "out")
    assert tcp_mem.read_text().split() == found
    assert set(STATE.glob("tb*.json")) == registries
