"""What the lab's build steps share (the image, its Vagrant box, other suites' kernels):
ImageError, one external command run into a build log, and progress lines on stderr.

Only the Python standard library.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path


class ImageError(Exception):
    """The image cannot be built or used; the message says why and what to do."""


def run_step(argv: list[str], log: Path, what: str, timeout: float = 1800,
             **kw: object) -> None:
    """Run one build command with its output appended to `log`; an ImageError naming
    `what` (and the log's last lines) when it fails, times out or is not installed."""
    with open(log, "a") as fh:
        fh.write(f"\n$ {' '.join(argv)}\n")
        fh.flush()
        try:
            proc = subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout,
                                  **kw)  # type: ignore[call-overload]
        except subprocess.TimeoutExpired:
            raise ImageError(f"{what}: no result within {timeout:.0f} s (log: {log})") from None
        except FileNotFoundError:
            raise ImageError(f"{what}: {argv[0]} not found; run: lab/provision "
                             "--host-vm") from None
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        raise ImageError(f"{what} failed (exit {proc.returncode}): {' | '.join(tail)} "
                         f"(log: {log.parent.parent / 'build-failed.log'})")


def require_tools(*tools: str) -> None:
    """An ImageError naming the first of `tools` that is not on PATH (the host lacks
    lab/provision --host-vm)."""
    for tool in tools:
        if shutil.which(tool) is None:
            raise ImageError(f"{tool} not found; run: lab/provision --host-vm")


class Progress:
    """Progress lines of a long build on stderr ("PREFIX: MSG (N s)", N counted from
    the Progress's creation), or nothing when disabled."""

    def __init__(self, prefix: str, enabled: bool = True) -> None:
        """Start the clock; `prefix` begins every line."""
        self.prefix = prefix
        self.enabled = enabled
        self.t0 = time.monotonic()

    def __call__(self, msg: str) -> None:
        """Print one progress line (when enabled)."""
        if self.enabled:
            print(f"{self.prefix}: {msg} ({time.monotonic() - self.t0:.0f} s)",
                  file=sys.stderr, flush=True)
