"""Teardown that a second Ctrl-C cannot cut in half.

The first Ctrl-C (or SIGTERM, SIGHUP) unwinds a run into its teardown; a second one
during it would stop that teardown between two steps (a mount left without its
namespace's cleanup, nfsd threads left running). While a teardown runs, these signals
are held: the first held one prints one line saying the teardown finishes first, and
KeyboardInterrupt is raised once it has. SIGKILL cannot be held: what it leaves is in
the run registry, for `testbed clean`."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Iterator

HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def interrupts_held(what: str) -> Iterator[None]:
    """Hold SIGINT/SIGTERM/SIGHUP while `what` runs (main thread only, where Python runs
    handlers; a forked child that inherits the handler dies as by default), then raise
    KeyboardInterrupt if one came."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    owner = os.getpid()
    caught: list[int] = []

    def hold(signum: int, _frame: object) -> None:
        if os.getpid() != owner:
            os._exit(128 + signum)
        if not caught:
            sys.stderr.write(f"testbed: {what} in progress; it finishes first (SIGKILL "
                             "leaves the rest to `testbed clean`)\n")
            sys.stderr.flush()
        caught.append(signum)

    old = {s: signal.signal(s, hold) for s in HELD}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    if caught:
        raise KeyboardInterrupt
