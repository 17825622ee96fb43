"""Lab kernels started from the host: `lab/run CMD` as a child process that dies with us,
and how many of them this machine can run at once.

LabKernel         one `lab/run CMD` (a user-mode Linux guest of LAB_CPUS CPUs, 1 unless
                  set): started in its own session under `setpriv --pdeathsig TERM`, so
                  that when the process that
                  started it dies (a killed Dask worker, a SIGKILLed `testbed run`) lab/run
                  gets SIGTERM and kills its kernel; stopped by its PID on exit; its
                  console goes to a log file.
can_measure_here  whether this kernel itself has netem and nfsd (inside lab/run, a lab VM)
Machine           what the host offers: CPUs (affinity and cgroup quota), their load,
                  memory and /dev/shm (where a guest keeps its RAM)
auto_parallel     lab kernels at once: LAB_CPUS free CPUs and LAB_MEM of memory each; 1
                  when unsure
CpuMeter          what the machine did to a lab kernel: the CPU time its processes got,
                  the time they waited, runnable, for a CPU (/proc/PID/task/*/schedstat;
                  a cgroup's CPU quota shows here too: a throttled task waits runnable),
                  and the time the hypervisor took from this machine's CPUs (steal,
                  /proc/stat: a virtual machine's vCPU that is not running does not count
                  as waiting inside it). The guest sees neither (its clock runs on while
                  it is not); they are the signs that the machine, not the scenario, set
                  a figure.
HostMeter         lab/run's side of that meter for every lab kernel, however started:
                  the running totals of its process tree and the machine's steal,
                  written twice a second to a file the guest reads (APN_HOST_METER);
                  host_sample() is the guest's side, host_share() the shares between two
                  samples.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Sequence

from testbed import launch, procfs
from testbed.errors import SpecError
from testbed.paths import LAB_STATE, REPO  # REPO stays importable from here

log = logging.getLogger(__name__)

# lab/run's code, as the lab/run script runs it: a module, from the repository root (cwd)
LAB_RUN = ("-m", "lab.run")
UML = LAB_STATE / "uml" / "linux.uml"
DEFAULT_MEM = "1536M"     # lab/run's default guest memory (LAB_MEM)
MEM_MARGIN = 1.15         # a guest's RAM file plus its host-side helpers
LOAD_SLACK = 0.25         # a CPU counts as free when less than this much of it is busy
MAX_PARALLEL = 64


def can_measure_here() -> bool:
    """True when points can be measured in this kernel directly: inside a lab kernel
    (lab/run sets APN_LAB_KERNEL), or on a full kernel with netem (a lab VM)."""
    if os.environ.get("APN_LAB_KERNEL"):
        return True
    if Path("/sys/module/sch_netem").is_dir():
        return True
    if shutil.which("modprobe") is None:
        return False
    proc = launch.run(["modprobe", "-q", "-n", "sch_netem"], timeout=10, what="modprobe",
                      check=False)
    return proc.returncode == 0


def lab_ready() -> None:
    """SpecError (one line) when this checkout cannot start lab kernels."""
    if not UML.is_file():
        raise SpecError(f"no lab kernel in {UML.parent}: run lab/provision --host first "
                        "(it unpacks the user-mode Linux kernel)")
    if shutil.which("setpriv") is None:
        raise SpecError("setpriv (util-linux) not found: lab/provision --host installs it")


def cpus(text: str | None = None) -> int:
    """A guest's CPUs from LAB_CPUS (lab/run --cpus): 1 when unset. SpecError on a value
    lab/run would reject."""
    text = (text if text is not None else os.environ.get("LAB_CPUS") or "1").strip()
    if not text.isdigit() or int(text) < 1:
        raise SpecError(f"LAB_CPUS={text!r} is not a number of CPUs (1 or more)")
    return int(text)


def mem_mb(text: str | None = None) -> int:
    """A guest's memory in MiB from LAB_MEM's syntax (1536M, 2G, 1024); lab/run's default
    when unset. SpecError on a value lab/run would reject."""
    text = (text if text is not None else os.environ.get("LAB_MEM", DEFAULT_MEM)).strip()
    mult = {"K": 1 / 1024, "M": 1, "G": 1024}.get(text[-1:].upper())
    try:
        value = float(text[:-1]) * mult if mult else float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise SpecError(f"LAB_MEM={text!r} is not a size like 1536M or 2G")
    return int(value)


@dataclass(frozen=True)
class Machine:
    """What this host offers lab kernels (None: could not be read)."""

    cpus: float | None
    load: float | None
    mem_available_mb: float | None
    shm_free_mb: float | None


def _cgroup_cpus() -> float | None:
    """The CPU quota of this process's cgroup in CPUs (v2 cpu.max or v1 cfs), if any."""
    v2 = Path("/sys/fs/cgroup/cpu.max")
    if v2.exists():
        quota, period = v2.read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    v1 = Path("/sys/fs/cgroup/cpu")
    if (v1 / "cpu.cfs_quota_us").exists():
        us = int((v1 / "cpu.cfs_quota_us").read_text())
        return None if us <= 0 else us / int((v1 / "cpu.cfs_period_us").read_text())
    return None


def _meminfo_mb(name: str) -> float | None:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1]) / 1024
    return None


def machine() -> Machine:
    """This host's CPUs (affinity, capped by a cgroup quota), 1-minute load, available
    memory and free /dev/shm; a figure that cannot be read is None."""
    def read(fn: Any) -> Any:
        """fn(), or None when the figure cannot be read."""
        try:
            return fn()
        except (OSError, ValueError, IndexError):
            return None
    cpus = read(lambda: float(len(os.sched_getaffinity(0))))
    quota = read(_cgroup_cpus)
    if cpus is not None and quota is not None:
        cpus = min(cpus, quota)
    return Machine(cpus, read(lambda: os.getloadavg()[0]), read(lambda: _meminfo_mb(
        "MemAvailable")), read(lambda: shutil.disk_usage("/dev/shm").free / 2**20))


def auto_parallel(m: Machine, kernel_mb: int, kernel_cpus: int = 1) -> tuple[int, str]:
    """How many lab kernels to run at once, and why: kernel_cpus CPUs each that nothing
    else is using (the emulator's headroom: a guest that shares its CPU misses its
    timers), and kernel_mb of memory and of /dev/shm each. 1 when any figure is unknown."""
    if None in (m.cpus, m.load, m.mem_available_mb, m.shm_free_mb):
        return 1, "1 (could not read this machine's CPUs, load or memory)"
    assert m.cpus is not None and m.load is not None
    assert m.mem_available_mb is not None and m.shm_free_mb is not None
    by_cpu = math.floor((m.cpus - m.load + LOAD_SLACK) / kernel_cpus)
    need = kernel_mb * MEM_MARGIN
    by_mem = math.floor(min(m.mem_available_mb, m.shm_free_mb) / need)
    n = max(1, min(by_cpu, by_mem, MAX_PARALLEL))
    per = f"kernels of {kernel_cpus} CPUs" if kernel_cpus > 1 else "free"
    return n, (f"{n} ({m.cpus:g} CPUs with a load of {m.load:.2f}: {max(by_cpu, 0)} {per}; "
               f"memory for {by_mem} kernels of {kernel_mb} MiB)")


class LabKernel:
    """`lab/run --timeout T CMD` on this host, as a context manager (see the module
    docstring); exit stops it (SIGTERM to its process group: lab/run then kills its
    kernel by PID)."""

    def __init__(self, cmd: Sequence[str], *, console: Path, timeout_s: int,
                 env: dict[str, str] | None = None) -> None:
        self.argv = ["setpriv", "--pdeathsig", "TERM", sys.executable, *LAB_RUN,
                     "--timeout", str(int(timeout_s)), *cmd]
        self.console = console
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[Any] | None = None
        self._log: IO[bytes] | None = None

    def __enter__(self) -> LabKernel:
        self._log = open(self.console, "wb")
        self.proc = launch.start(self.argv, stdin=subprocess.DEVNULL, stdout=self._log,
                                 stderr=subprocess.STDOUT, cwd=REPO, env=self.env)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def meter(self) -> CpuMeter:
        """A CpuMeter of lab/run and its kernel."""
        assert self.proc is not None
        return CpuMeter(self.proc.pid)

    def poll(self) -> int | None:
        """lab/run's exit code (the command's), or None while it runs."""
        assert self.proc is not None
        return self.proc.poll()

    def stop(self) -> None:
        """Stop lab/run and its kernel if still running; close the console log."""
        if self.proc is not None:
            launch.stop(self.proc, grace_s=15.0)
        if self._log is not None:
            self._log.close()
            self._log = None

    def verdict(self) -> str:
        """lab/run's own lines in the console (how the kernel ended, when it did not end
        well: a timeout, a kill), without the log tails it indents under them."""
        try:
            text = self.console.read_text(errors="replace")
        except OSError:
            return ""
        return " ".join(line.strip() for line in text.splitlines()
                        if line.startswith("lab/run: ") and not line.startswith("lab/run:  "))

    def tail(self, lines: int = 8) -> str:
        """The console's last lines, for error messages."""
        try:
            text = self.console.read_text(errors="replace")
        except OSError:
            return ""
        return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


def _children() -> dict[int, list[int]]:
    """Every process's children (from /proc/*/stat)."""
    kids: dict[int, list[int]] = {}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(p.name))
    return kids


def _schedstat(pid: int) -> tuple[int, int] | None:
    """(on-CPU ns, runnable-but-waiting ns) summed over a process's threads."""
    cpu = wait = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            fields = (task / "schedstat").read_text().split()
            cpu, wait = cpu + int(fields[0]), wait + int(fields[1])
    except (OSError, IndexError, ValueError):
        return None
    return cpu, wait


class CpuMeter:
    """CPU time and run-queue wait of a process and all its descendants (a lab/run and
    its kernel's host processes), accumulated over samples: a process that exits keeps
    what it had at its last sample; and the machine's steal (procfs.steal_s) beside them."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.seen: dict[int, tuple[int, int]] = {}

    def sample(self) -> tuple[float, float, float]:
        """Seconds on a CPU, seconds waiting for one, and seconds stolen from each of
        the machine's CPUs by its hypervisor, so far."""
        kids, todo = _children(), [self.root]
        while todo:
            pid = todo.pop()
            stat = _schedstat(pid)
            if stat is not None:
                self.seen[pid] = stat
            todo += kids.get(pid, [])
        return (sum(c for c, _ in self.seen.values()) / 1e9,
                sum(w for _, w in self.seen.values()) / 1e9, procfs.steal_s())


HOST_METER_ENV = "APN_HOST_METER"
HOST_METER_FILE = "host-meter.json"
HOST_METER_PERIOD_S = 0.5


class HostMeter:
    """Writes, every HOST_METER_PERIOD_S until closed, {"t": host monotonic seconds,
    "cpu_s", "wait_s", "steal_s"} of a process tree (lab/run's own: its lab kernel) and
    its machine to `path`, atomically (the guest may read it at any moment)."""

    def __init__(self, root: int, path: Path) -> None:
        self.meter, self.path = CpuMeter(root), path
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="host-meter", daemon=True)

    def __enter__(self) -> HostMeter:
        self.write()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def write(self) -> None:
        """One sample into the file (write, then rename over the old one)."""
        cpu, wait, steal = self.meter.sample()
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps({"t": time.monotonic(), "cpu_s": cpu, "wait_s": wait,
                                   "steal_s": steal}))
        tmp.replace(self.path)

    def _loop(self) -> None:
        while not self._stop.wait(HOST_METER_PERIOD_S):
            try:
                self.write()
            except OSError:  # the run folder is being removed: lab/run is ending
                return


HostSample = tuple[float, float, float, float]  # host seconds, CPU, wait, steal seconds


def host_sample() -> HostSample | None:
    """(host seconds, CPU seconds, wait seconds, steal seconds per CPU) of this lab
    kernel and its machine as lab/run last wrote them (at most HOST_METER_PERIOD_S old);
    None outside lab/run or unreadable."""
    path = os.environ.get(HOST_METER_ENV)
    if not path:
        return None
    try:
        d = json.loads(Path(path).read_text())
        return float(d["t"]), float(d["cpu_s"]), float(d["wait_s"]), float(d["steal_s"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def meter_sample() -> HostSample:
    """What the machine has done so far, for a measurement to difference: lab/run's meter
    inside a lab kernel (host_sample); elsewhere (the testbed running directly on a
    virtual machine, e.g. the Vagrant box) that machine's own steal, its CPU and wait
    figures unknown (NaN)."""
    return host_sample() or (time.monotonic(), math.nan, math.nan, procfs.steal_s())


def host_share(before: HostSample, after: HostSample) -> dict[str, float]:
    """Between two (wall, cpu, wait, steal) samples of a lab kernel: the share of the
    wall time its processes ran on a CPU, the share they waited for one, and the share
    of it the hypervisor took from the machine's CPUs, in %."""
    wall = max(after[0] - before[0], 1e-9)
    return {"host_cpu_pct": round(100 * (after[1] - before[1]) / wall, 2),
            "host_wait_pct": round(100 * (after[2] - before[2]) / wall, 2),
            "host_steal_pct": round(100 * (after[3] - before[3]) / wall, 2)}
