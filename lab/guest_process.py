"""The host side of one lab guest (user-mode Linux or the QEMU VM) for lab/run: its process
group killed on SIGINT/SIGTERM/SIGHUP, on timeout and once it ends (nothing of it may
outlive lab/run), and the exit code the guest left in the run folder. One wording table
per route keeps lab/run's messages as they were.

Only the Python standard library.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.guest import RC_NO_RESULT, RC_TIMEOUT

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass(frozen=True)
class Kind:
    """How lab/run's messages name one route's guest and its host process."""

    guest: str       # "lab kernel", "lab VM"
    killed: str      # what a timeout killed, with {pid}
    exit: str        # the host process's end, with {how}: "exit 1", "killed by SIGKILL"
    tail_lines: int  # lines of each log shown when the guest left no exit code


UML = Kind("lab kernel", "process group {pid}", "{how}", 5)
QEMU = Kind("lab VM", "QEMU (PID {pid})", "QEMU {how}", 8)


def how_ended(returncode: int) -> str:
    """A host process's end in words: "exit N", or "killed by SIGNAME" (Popen's
    negative return code)."""
    if returncode >= 0:
        return f"exit {returncode}"
    try:
        return f"killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"killed by signal {-returncode}"


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill the guest's process group (UML and QEMU run helper processes besides the main
    one) and reap the main process."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def kill_on_signals(proc: subprocess.Popen[bytes]) -> tuple[list[int], dict[int, Any]]:
    """Install handlers that kill the guest on SIGINT, SIGTERM and SIGHUP: (the signals
    received, filled in as they come; the handlers they replaced)."""
    interrupted: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        """Remember the signal and kill the guest (lab/run then exits 128 + signum)."""
        interrupted.append(signum)
        kill_group(proc)

    return interrupted, {sig: signal.signal(sig, on_signal) for sig in SIGNALS}


def guest_rc(run_dir: Path) -> int | None:
    """The exit code the guest wrote to run_dir/rc (RC_NO_RESULT if unreadable), None if
    it wrote none."""
    rc_file = run_dir / "rc"
    if not rc_file.exists():
        return None
    text = rc_file.read_text().strip()
    return int(text) if text.isdigit() else RC_NO_RESULT


def print_tails(paths: list[Path], lines: int) -> None:
    """The last `lines` lines of each readable file, indented under lab/run's messages."""
    for path in paths:
        try:
            tail = path.read_text(errors="replace").strip().splitlines()[-lines:]
        except OSError:
            continue
        for line in tail:
            print(f"lab/run:   {line}", file=sys.stderr)


def wait_guest(proc: subprocess.Popen[bytes], run_dir: Path, timeout_s: float, kind: Kind,
               logs: list[Path], interrupted: list[int]) -> int:
    """Wait for the guest until it powers off or timeout_s passes, then kill what is left
    of it; the guest command's exit code, RC_TIMEOUT, 128 + the signal that interrupted
    lab/run, or RC_NO_RESULT (with the tails of `logs`) if the guest left none."""
    started = time.monotonic()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        print(f"lab/run: the {kind.guest} did not finish within {timeout_s:.0f} s; killed "
              + kind.killed.format(pid=proc.pid), file=sys.stderr)
        return RC_TIMEOUT
    kill_group(proc)  # nothing of the process group may outlive it
    if interrupted:
        print(f"lab/run: interrupted (signal {interrupted[0]}); {kind.guest} killed",
              file=sys.stderr)
        return 128 + interrupted[0]
    rc = guest_rc(run_dir)
    if rc is None:
        print(f"lab/run: the {kind.guest} stopped "
              f"({kind.exit.format(how=how_ended(proc.returncode))}) "
              f"without a result after {time.monotonic() - started:.0f} s", file=sys.stderr)
        print_tails(logs, kind.tail_lines)
        return RC_NO_RESULT
    return rc
