"""Undo crashed runs: only what the run registry says is ours, and what carries our prefix.

A run whose owner process is still alive is never touched, so `testbed clean` is safe at
any time. clean(steps) undoes each dead run by running the steps it is given, in the
order given, then removing the run's registry file. The network layer's steps are here:

  unmount_nfs        NFS mounts: forced, then lazy, unmount while the run's nfsd still
                     answers (a lookup on a mount whose server is gone can wait forever);
                     mounts are those the registry recorded and any NFS mount under the
                     run's folder
  kill_procs         SIGKILL to the process groups we started, by recorded PID, only if
                     the PID's start time still matches (a recycled PID is left alone)
  unmount_other      other mounts (the FS-Cache filesystem), once no daemon holds them
  remove_namespaces  namespaces, with every link, bridge and qdisc in them
  remove_dirs        the run's scratch folders and its run folder
  restore_tcp_mem    the kernel's tcp_mem as the run found it, if it still holds what the
                     run raised it to and no other run of ours is alive (it may lean on it)
  restore_sysctls    other kernel settings a run changes for a moment (sunrpc's slot
                     table while a mount is made), put back if they still hold its value

A higher layer's step (stopping nfsd in the run's namespaces) takes the run's state and
the seconds it may use; external() makes it a step whose failure is reported, not
raised. testbed.cleanup puts the list together.

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
from typing import Callable, Sequence

from testbed import launch
from testbed.errors import TestbedError
from testbed.network import state as state_mod
from testbed.network import tcp_memory
from testbed.network.namespace import NETNS_DIR, remove_namespace

log = logging.getLogger(__name__)

DEADLINE_S = 25.0
UMOUNT_S = 4.0
NFS_TYPES = ("nfs", "nfs4")

HOOK_S = 15.0  # the most a higher layer's step may take


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
    restored: list[str] = field(default_factory=list)  # kernel settings put back

    def empty(self) -> bool:
        """True when there was nothing to clean."""
        return not (self.killed or self.unmounted or self.namespaces or self.dirs
                    or self.runs or self.problems or self.restored)


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


# One step of undoing a dead run: its state, what clean reports, the time left.
Step = Callable[[state_mod.RunState, CleanReport, _Budget], None]


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


def unmount_nfs(st: state_mod.RunState, report: CleanReport, budget: _Budget) -> None:
    """Unmount the run's NFS mounts, deepest first (before its nfsd is stopped)."""
    _unmount_all(_run_mounts(st)[0], report, budget)


def kill_procs(st: state_mod.RunState, report: CleanReport, budget: _Budget) -> None:
    """SIGKILL the process groups the run started that still run."""
    report.killed += [rec.pid for rec in st.procs if _kill(rec)]


def unmount_other(st: state_mod.RunState, report: CleanReport, budget: _Budget) -> None:
    """Unmount the run's other mounts (the FS-Cache filesystem), deepest first."""
    _unmount_all(_run_mounts(st)[1], report, budget)


def remove_namespaces(st: state_mod.RunState, report: CleanReport, budget: _Budget) -> None:
    """Delete the run's namespaces in reverse order of creation."""
    for name in reversed(st.namespaces):
        try:
            if remove_namespace(name):
                report.namespaces.append(name)
        except TestbedError as exc:
            report.problems.append(str(exc))


def external(fn: Callable[[state_mod.RunState, float], None]) -> Step:
    """A higher layer's step (it gets the run's state and at most HOOK_S seconds) as a
    clean step: what it raises is reported as a problem and the cleanup goes on."""
    def step(st: state_mod.RunState, report: CleanReport, budget: _Budget) -> None:
        try:
            fn(st, budget.left(HOOK_S))
        except Exception as exc:  # a higher layer must not stop the rest of the cleanup
            report.problems.append(f"{st.prefix}: {fn.__name__}: {exc}")
    step.__name__ = fn.__name__
    return step


def remove_dirs(st: state_mod.RunState, report: CleanReport, budget: _Budget) -> None:
    """Remove the run's scratch folders (never one with a mount inside), its emptied
    mount points and its run folder."""
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


def restore_tcp_mem(st: state_mod.RunState, report: CleanReport, budget: _Budget) -> None:
    """Put back the tcp_mem a dead run raised (tcp_memory.restore_found), unless another
    run of ours is alive: its buffers may be sized to the raised value."""
    if not st.tcp_mem_set:
        return
    if any(o.prefix != st.prefix and o.owner_alive() for o in state_mod.load_all()):
        found, raised = map(tcp_memory.as_text, (st.tcp_mem_found, st.tcp_mem_set))
        report.restored.append(f"{st.prefix}: tcp_mem left at {raised} (a live run may use"
                               f" it; the run found {found})")
        return
    report.restored.append(f"{st.prefix}: "
                           + tcp_memory.restore_found(tcp_memory.TCP_MEM, st.tcp_mem_found,
                                                      st.tcp_mem_set))


def put_back_setting(path: Path, found: str, held: str) -> str:
    """Write `found` back to a kernel setting that still reads `held` (a value someone
    wrote since is theirs, left as it is); what was done, in words. OSError passes."""
    now = path.read_text().strip()
    if now != held:
        return f"{path} left at {now} (changed since)"
    path.write_text(found)
    return f"{path} put back to {found}"


def restore_sysctls(st: state_mod.RunState, report: CleanReport, budget: _Budget) -> None:
    """Put back each kernel setting a dead run was holding (RunState.sysctls) if it still
    reads what the run set (put_back_setting)."""
    for path, (found, held) in st.sysctls.items():
        try:
            report.restored.append(f"{st.prefix}: " + put_back_setting(Path(path), found, held))
        except OSError as exc:
            report.problems.append(f"{path}: not put back to {found}: {exc.strerror or exc}")


NETWORK_STEPS: tuple[Step, ...] = (unmount_nfs, kill_procs, unmount_other,
                                    remove_namespaces, remove_dirs, restore_tcp_mem,
                                    restore_sysctls)


def clean_run(st: state_mod.RunState, report: CleanReport, budget: _Budget,
              steps: Sequence[Step] = NETWORK_STEPS) -> None:
    """Undo one dead run: each step in order, then forget the run (its registry file)."""
    for step in steps:
        step(st, report, budget)
    st.discard()
    report.runs.append(st.prefix + (f" (was at: {st.phase})" if st.phase else ""))


def clean(steps: Sequence[Step] = NETWORK_STEPS,
          deadline_s: float = DEADLINE_S) -> CleanReport:
    """Undo every dead run with `steps` (the network layer's own by default), then remove
    namespaces with our naming that no registry knows; return what was removed and what
    was not."""
    report = CleanReport()
    budget = _Budget(deadline_s)
    live: set[str] = set()
    for st in state_mod.load_all():
        if st.owner_alive():
            report.skipped_live.append(st.prefix)
            live.add(st.prefix)
            continue
        clean_run(st, report, budget, steps)
    # Namespaces with our naming but no registry (e.g. /run/apn-testbed was lost).
    if NETNS_DIR.is_dir():
        for entry in sorted(os.listdir(NETNS_DIR)):
            m = state_mod.NAMESPACE_RE.match(entry)
            if m and m.group(1) not in live and remove_namespace(entry):
                report.namespaces.append(entry)
    return report
