"""The run registry: what each run created, so that `testbed clean` can undo a crashed run.

Every run has a prefix "tb" + 4 hex digits; each namespace it creates is "<prefix>-<node>",
and everything else it creates (veths, bridges, qdiscs, sysctls) lives inside those
namespaces. A run records, as it goes, in /run/apn-testbed/<prefix>.json: its owner PID,
its namespaces, the PIDs of processes it started (with their start times, so a recycled
PID is never killed), its mounts and its scratch folders. The file is rewritten atomically
after each change and removed when the run ends cleanly.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

STATE_DIR = Path(os.environ.get("APN_STATE_DIR", "/run/apn-testbed"))
PREFIX_RE = re.compile(r"^tb[0-9a-f]{4}$")
NAMESPACE_RE = re.compile(r"^(tb[0-9a-f]{4})-[a-z][a-z0-9]*$")


def new_prefix() -> str:
    """A fresh run prefix not used by a live registry file."""
    while True:
        prefix = "tb" + secrets.token_hex(2)
        if not (STATE_DIR / f"{prefix}.json").exists():
            return prefix


def proc_start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def pid_alive(pid: int, start_time: int | None) -> bool:
    """True when `pid` runs and is the same process we recorded (not a recycled PID)."""
    now = proc_start_time(pid)
    return now is not None and (start_time is None or now == start_time)


@dataclass
class ProcRecord:
    """A process a run started: PID, start time (to spot a recycled PID), argv, namespace."""
    pid: int
    start_time: int | None
    argv: list[str]
    namespace: str | None = None


@dataclass
class RunState:
    """What one run has created so far (see the module docstring); saved on every change."""
    prefix: str
    owner_pid: int = field(default_factory=os.getpid)
    owner_start: int | None = None
    namespaces: list[str] = field(default_factory=list)
    procs: list[ProcRecord] = field(default_factory=list)
    mounts: list[str] = field(default_factory=list)
    nfsd_namespaces: list[str] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)
    phase: str = ""  # what the run was doing last ("network", "nfsd", "mounts", "loader")
    # The kernel's tcp_mem as the run found it and as it left it raised ([] while not raised)
    tcp_mem_found: list[int] = field(default_factory=list)
    tcp_mem_set: list[int] = field(default_factory=list)
    # Kernel settings the run changes for a moment: {path: [as found, as set]}
    sysctls: dict[str, list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.owner_start is None:
            self.owner_start = proc_start_time(self.owner_pid)

    @property
    def path(self) -> Path:
        """The run's registry file."""
        return STATE_DIR / f"{self.prefix}.json"

    def save(self) -> None:
        """Write the registry atomically (temporary file + rename)."""
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=STATE_DIR, prefix=f".{self.prefix}.")
        with os.fdopen(fd, "w") as fh:
            json.dump(asdict(self), fh, indent=1)
        os.replace(tmp, self.path)

    def discard(self) -> None:
        """Remove the registry file (the run ended cleanly or was cleaned)."""
        self.path.unlink(missing_ok=True)

    def owner_alive(self) -> bool:
        """Whether the process that owns the run still runs (and is not us)."""
        return self.owner_pid != os.getpid() and pid_alive(self.owner_pid, self.owner_start)

    # --- recording helpers (each saves at once: a crash right after loses nothing) -------
    def set_phase(self, phase: str) -> None:
        """Record what the run is doing now (reported by `testbed clean` after a crash)."""
        if phase != self.phase:
            self.phase = phase
            self.save()

    def add_namespace(self, name: str) -> None:
        """Record a namespace before anything else uses it."""
        self.namespaces.append(name)
        self.save()

    def add_proc(self, pid: int, argv: list[str], namespace: str | None = None) -> None:
        """Record a started process with its start time."""
        self.procs.append(ProcRecord(pid, proc_start_time(pid), list(argv), namespace))
        self.save()

    def drop_proc(self, pid: int) -> None:
        """Forget a process that was stopped."""
        self.procs = [p for p in self.procs if p.pid != pid]
        self.save()

    def add_mount(self, path: str) -> None:
        """Record a mount point (before the mount exists)."""
        self.mounts.append(path)
        self.save()

    def drop_mount(self, path: str) -> None:
        """Forget an unmounted mount point."""
        self.mounts = [m for m in self.mounts if m != path]
        self.save()

    def add_nfsd(self, namespace: str) -> None:
        """Record a namespace in which nfsd is started."""
        self.nfsd_namespaces.append(namespace)
        self.save()

    def drop_nfsd(self, namespace: str) -> None:
        """Forget a namespace whose nfsd was stopped."""
        self.nfsd_namespaces = [n for n in self.nfsd_namespaces if n != namespace]
        self.save()

    def set_tcp_mem(self, found: tuple[int, ...], now: tuple[int, ...]) -> None:
        """Record tcp_mem as the run found it and as it raised it (both empty: put back)."""
        self.tcp_mem_found, self.tcp_mem_set = list(found), list(now)
        self.save()

    def hold_sysctl(self, path: str, found: str, now: str) -> None:
        """Record a kernel setting as found before the run sets it to `now`."""
        self.sysctls[path] = [found, now]
        self.save()

    def drop_sysctl(self, path: str) -> None:
        """Forget a kernel setting the run has put back."""
        self.sysctls.pop(path, None)
        self.save()

    def add_dir(self, path: str) -> None:
        """Record a scratch folder (or file) of the run."""
        self.dirs.append(path)
        self.save()

    def drop_dir(self, path: str) -> None:
        """Forget a removed scratch folder."""
        self.dirs = [d for d in self.dirs if d != path]
        self.save()


def load_all() -> list[RunState]:
    """Every registry file (unreadable ones are skipped with a warning)."""
    states: list[RunState] = []
    if not STATE_DIR.is_dir():
        return states
    for path in sorted(STATE_DIR.glob("tb*.json")):
        try:
            data = json.loads(path.read_text())
            data["procs"] = [ProcRecord(**p) for p in data.get("procs", [])]
            states.append(RunState(**data))
        except (OSError, ValueError, TypeError) as exc:
            log.warning("skipping unreadable run registry %s: %s", path, exc)
    return states
