"""Undo crashed runs: only what the run registry says is ours, and namespaces with our prefix.

A run whose owner process is still alive is never touched, so `testbed clean` is safe to
run at any time. Processes are killed only by recorded PID and only if their start time
still matches (a recycled PID is left alone).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import shutil
import signal
import time
from dataclasses import dataclass, field
from typing import Callable

from pyroute2 import netns

from testbed.network import state as state_mod
from testbed.network.engine import NETNS_DIR

log = logging.getLogger(__name__)

MNT_DETACH = 2
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)

# Extra steps that higher layers register (e.g. stopping nfsd in a namespace): each gets
# the dead run's state before its namespaces are deleted.
HOOKS: list[Callable[[state_mod.RunState], None]] = []


@dataclass
class CleanReport:
    runs: list[str] = field(default_factory=list)
    skipped_live: list[str] = field(default_factory=list)
    killed: list[int] = field(default_factory=list)
    unmounted: list[str] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)

    def empty(self) -> bool:
        return not (self.killed or self.unmounted or self.namespaces or self.dirs or self.runs)


def umount(path: str) -> bool:
    """Detach a mount (lazy unmount); True if something was unmounted."""
    if _libc.umount2(path.encode(), MNT_DETACH) == 0:
        return True
    err = ctypes.get_errno()
    if err not in (22, 2):  # EINVAL: not a mount point; ENOENT: gone
        log.warning("umount %s: %s", path, os.strerror(err))
    return False


def _kill(rec: state_mod.ProcRecord) -> bool:
    if not state_mod.pid_alive(rec.pid, rec.start_time):
        return False
    try:
        os.kill(rec.pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    for _ in range(50):
        if not state_mod.pid_alive(rec.pid, rec.start_time):
            break
        time.sleep(0.02)
    return True


def clean_run(st: state_mod.RunState, report: CleanReport) -> None:
    for rec in st.procs:
        if _kill(rec):
            report.killed.append(rec.pid)
    for hook in HOOKS:
        try:
            hook(st)
        except Exception as exc:  # a hook must not stop the rest of the cleanup
            log.warning("cleanup hook %s for %s: %s", hook.__name__, st.prefix, exc)
    for path in reversed(st.mounts):
        if umount(path):
            report.unmounted.append(path)
        try:
            os.rmdir(path)
        except OSError:
            pass
    for name in reversed(st.namespaces):
        if (NETNS_DIR / name).exists():
            netns.remove(name)
            report.namespaces.append(name)
    for path in st.dirs:  # folders, and a few files (a cache's image)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
            report.dirs.append(path)
        elif os.path.isfile(path):
            os.unlink(path)
            report.dirs.append(path)
    try:
        os.rmdir(state_mod.STATE_DIR / st.prefix)  # only if empty: never recurse into mounts
    except OSError:
        pass
    st.discard()
    report.runs.append(st.prefix)


def clean() -> CleanReport:
    """Remove leftovers of every dead run; return what was removed."""
    report = CleanReport()
    live: set[str] = set()
    for st in state_mod.load_all():
        if st.owner_alive():
            report.skipped_live.append(st.prefix)
            live.add(st.prefix)
            continue
        clean_run(st, report)
    # Namespaces with our naming but no registry (e.g. /run/apn-testbed was lost).
    if NETNS_DIR.is_dir():
        for entry in sorted(os.listdir(NETNS_DIR)):
            m = state_mod.NAMESPACE_RE.match(entry)
            if m and m.group(1) not in live:
                netns.remove(entry)
                report.namespaces.append(entry)
    return report
