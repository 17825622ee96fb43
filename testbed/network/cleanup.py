"""Undo crashed runs: only what the run registry says is ours, and what carries our prefix.

A run whose owner process is still alive is never touched, so `testbed clean` is safe at
any time. For each dead run, in this order, each step bounded in time:

  1. NFS mounts: forced, then lazy, unmount while the run's nfsd still answers (a lookup
     on a mount whose server is gone can wait forever); mounts are those the registry
     recorded and any NFS mount under the run's folder
  2. processes: SIGKILL to the process groups we started, by recorded PID, only if the
     PID's start time still matches (a recycled PID is left alone)
  3. other mounts (the FS-Cache filesystem), now that no daemon holds them
  4. the services' hooks (stopping nfsd in the run's namespaces)
  5. namespaces (with every link, bridge and qdisc in them), then folders, then the
     registry file

Every external step runs under a timeout and the whole clean under DEADLINE_S: something
that cannot be removed is reported, never waited on.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from testbed import launch
from testbed.errors import TestbedError
from testbed.network import state as state_mod
from testbed.network.namespace import NETNS_DIR, remove_namespace

log = logging.getLogger(__name__)

DEADLINE_S = 25.0
UMOUNT_S = 4.0
NFS_TYPES = ("nfs", "nfs4")

# Extra steps that higher layers register (e.g. stopping nfsd in a namespace): each gets
# the dead run's state and the seconds it may take.
HOOKS: list[Callable[[state_mod.RunState, float], None]] = []


@dataclass
class CleanReport:
    """What clean removed, left alone, or could not remove."""

    runs: list[str] = field(default_factory=list)
    skipped_live: list[str] = field(default_factory=list)
    killed: list[int] = field(default_factory=list)
    unmounted: list[str] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def empty(self) -> bool:
        """True when there was nothing to clean."""
        return not (self.killed or self.unmounted or self.namespaces or self.dirs
                    or self.runs or self.problems)


def mounts_under(folder: Path) -> list[tuple[str, str]]:
    """(mount point, fs type) of every mount at or below `folder`, deepest first, read
    from /proc/mounts (nothing is looked up on the mounts themselves)."""
    found = []
    prefix = str(folder).rstrip("/") + "/"
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) > 2:
            point = fields[1].replace("\\040", " ")
            if point == str(folder) or point.startswith(prefix):
                found.append((point, fields[2]))
    return sorted(found, key=lambda m: -len(m[0]))


def _mounted(path: str) -> bool:
    return any(point == path for point, _ in mounts_under(Path(path)))


def unmount(path: str, seconds: float) -> str | None:
    """Forced, then lazy unmount without canonicalising the path (umount -c), each
    bounded; None when gone, else why not."""
    for flags in (["-f"], ["-l"]):
        if not _mounted(path):
            return None
        try:
            launch.run(["umount", "-c", *flags, path], timeout=max(0.5, seconds / 2),
                       what=f"umount {' '.join(flags)} {path}")
        except TestbedError as exc:
            log.info("%s", exc)
    return None if not _mounted(path) else f"{path}: still mounted"


def _kill(rec: state_mod.ProcRecord) -> bool:
    """SIGKILL a recorded process's group (it leads its own: start_new_session)."""
    if not state_mod.pid_alive(rec.pid, rec.start_time):
        return False
    try:
        os.killpg(rec.pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    except PermissionError:
        os.kill(rec.pid, signal.SIGKILL)
    for _ in range(50):
        if not state_mod.pid_alive(rec.pid, rec.start_time):
            break
        time.sleep(0.02)
    return True


class _Budget:
    """The seconds a clean has left (every step takes at most what remains)."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self, cap: float) -> float:
        """Seconds for the next step: at most cap, at least 0.5, within the deadline."""
        return max(0.5, min(cap, self.end - time.monotonic()))


def _unmount_all(mounts: list[str], report: CleanReport, budget: _Budget) -> None:
    for path in mounts:
        if not _mounted(path):
            continue
        problem = unmount(path, budget.left(UMOUNT_S))
        if problem:
            report.problems.append(problem)
        else:
            report.unmounted.append(path)


def _run_mounts(st: state_mod.RunState) -> tuple[list[str], list[str]]:
    """(NFS mounts, other mounts) a run left, deepest first: those under its folder and
    those it recorded elsewhere, as /proc/mounts lists them now."""
    found = dict(mounts_under(state_mod.STATE_DIR / st.prefix))
    for path in st.mounts:
        found.update((p, t) for p, t in mounts_under(Path(path)) if p == path)
    ordered = sorted(found, key=lambda p: -len(p))
    return ([p for p in ordered if found[p] in NFS_TYPES],
            [p for p in ordered if found[p] not in NFS_TYPES])


def _remove_dirs(st: state_mod.RunState, report: CleanReport) -> None:
    for path in st.dirs:  # folders, and a few files
        if mounts_under(Path(path)):
            report.problems.append(f"{path}: a mount is still inside; left")
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
            report.dirs.append(path)
        elif os.path.isfile(path):
            os.unlink(path)
            report.dirs.append(path)
    for path in reversed(st.mounts):
        try:
            os.rmdir(path)
        except OSError:
            pass
    try:
        os.rmdir(state_mod.STATE_DIR / st.prefix)  # only if empty: never recurse into mounts
    except OSError:
        pass


def clean_run(st: state_mod.RunState, report: CleanReport, budget: _Budget) -> None:
    """Undo one dead run (see the module docstring for the order)."""
    nfs, other = _run_mounts(st)
    _unmount_all(nfs, report, budget)
    report.killed += [rec.pid for rec in st.procs if _kill(rec)]
    _unmount_all(other, report, budget)
    for hook in HOOKS:
        try:
            hook(st, budget.left(15.0))
        except Exception as exc:  # a hook must not stop the rest of the cleanup
            report.problems.append(f"{st.prefix}: {hook.__name__}: {exc}")
    for name in reversed(st.namespaces):
        try:
            if remove_namespace(name):
                report.namespaces.append(name)
        except TestbedError as exc:
            report.problems.append(str(exc))
    _remove_dirs(st, report)
    st.discard()
    report.runs.append(st.prefix + (f" (was at: {st.phase})" if st.phase else ""))


def clean(deadline_s: float = DEADLINE_S) -> CleanReport:
    """Remove leftovers of every dead run; return what was removed and what was not."""
    report = CleanReport()
    budget = _Budget(deadline_s)
    live: set[str] = set()
    for st in state_mod.load_all():
        if st.owner_alive():
            report.skipped_live.append(st.prefix)
            live.add(st.prefix)
            continue
        clean_run(st, report, budget)
    # Namespaces with our naming but no registry (e.g. /run/apn-testbed was lost).
    if NETNS_DIR.is_dir():
        for entry in sorted(os.listdir(NETNS_DIR)):
            m = state_mod.NAMESPACE_RE.match(entry)
            if m and m.group(1) not in live and remove_namespace(entry):
                report.namespaces.append(entry)
    return report
