"""The one process launcher: every external tool the testbed runs goes through here.

Subprocesses are used only where no library does the job (mount, umount, exportfs,
rpc.nfsd, rpc.mountd, cachefilesd, mkfs, modprobe, iperf3, git). Always argv lists, never
a shell string from user input, always a timeout, and the command logged at DEBUG.

run        run to completion; output captured as text; ServiceError on timeout or a
           missing tool, and (check=True) on a non-zero exit, naming the tool's last line
start      start a long-lived process in its own session (its PID is its process group,
           so it and its children can be stopped by that one PID)
stop       SIGTERM the process group we started, SIGKILL after a grace period
in_netns   argv that runs a command in a network namespace (host mount namespace)
ns_shell   argv that runs a shell script in a network namespace and a private mount
           namespace (so its mounts, e.g. /proc/fs/nfsd, vanish with it)
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
import subprocess
from typing import Any, Sequence

from testbed.errors import ServiceError

log = logging.getLogger(__name__)


def last_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The last non-empty line a finished tool printed (stderr first), for error messages."""
    lines = (proc.stderr or proc.stdout or "").strip().splitlines()
    return lines[-1].strip() if lines else f"exit {proc.returncode}"


def run(argv: Sequence[str], *, timeout: float, what: str, check: bool = True,
        **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run argv to completion and return it (stdout/stderr as text).

    Raises ServiceError naming `what` when the tool is missing, does not finish within
    `timeout` seconds, or (check=True) exits non-zero."""
    log.debug("exec: %s", shlex.join(argv))
    try:
        child = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, **kwargs)
    except FileNotFoundError:
        raise ServiceError(f"{what}: {argv[0]} not found (lab/provision installs it)") from None
    try:
        stdout, stderr = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _abandon(child)
        raise ServiceError(f"{what}: no answer within {timeout:g} s") from None
    proc = subprocess.CompletedProcess(list(argv), child.returncode, stdout, stderr)
    if check and proc.returncode != 0:
        raise ServiceError(f"{what}: {last_line(proc)}")
    return proc


def _abandon(child: subprocess.Popen[str], wait_s: float = 2.0) -> None:
    """SIGKILL a child that overran its timeout; never wait forever for it (a process
    blocked on a dead NFS server may not die at once)."""
    child.kill()
    try:
        child.communicate(timeout=wait_s)
    except subprocess.TimeoutExpired:
        log.warning("pid %d did not exit after SIGKILL; left behind", child.pid)


def start(argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
    """Start argv in a new session (process group = its PID) and return it."""
    log.debug("start: %s", shlex.join(argv))
    try:
        return subprocess.Popen(list(argv), start_new_session=True, **kwargs)
    except FileNotFoundError:
        raise ServiceError(f"{argv[0]} not found (lab/provision installs it)") from None


def stop(proc: subprocess.Popen[Any], grace_s: float = 3.0) -> None:
    """Stop a process started by start(): SIGTERM to its group, SIGKILL after grace_s."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=grace_s)
    except ProcessLookupError:
        pass


def in_netns(ns_path: str, argv: Sequence[str]) -> list[str]:
    """argv running `argv` in the network namespace at ns_path (host mount namespace)."""
    return ["nsenter", f"--net={ns_path}", *argv]


def ns_shell(ns_path: str, script: str) -> list[str]:
    """argv running a shell script in the network namespace at ns_path, in a private
    mount namespace (so its mounts, e.g. /proc/fs/nfsd or sysfs, vanish with it)."""
    return ["nsenter", f"--net={ns_path}", "unshare", "--mount", "sh", "-c", script]
