"""Files a user names, on the command line or in an experiment file (experiment files,
DLIO workload configs, captures): checked to be a regular file that can be read, or
refused in one SpecError line that says why (not found, a folder, a FIFO or device, a
name too long, a loop of links, no permission). Declared once here for every reader."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from testbed.errors import SpecError


def check(path: Path | str, kind: str) -> Path:
    """The path, when it names a regular file; SpecError "KIND PATH: why" otherwise
    (kind: what the file should be, "experiment file", "capture", ...)."""
    p = Path(path)
    try:
        mode = os.stat(p).st_mode
    except FileNotFoundError:
        raise SpecError(f"{kind} {p} not found") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the name
        raise SpecError(f"{kind} {p}: cannot read: {getattr(exc, 'strerror', exc)}") from None
    if stat.S_ISDIR(mode):
        raise SpecError(f"{kind} {p}: is a directory, not a file")
    if not stat.S_ISREG(mode):
        raise SpecError(f"{kind} {p}: not a regular file (a FIFO or device)")
    return p


def _size(p: Path) -> int:
    """The file's size in bytes (0 when stat fails: reading it will say why)."""
    try:
        return p.stat().st_size
    except OSError:
        return 0


def read_text(path: Path | str, kind: str, what: str, max_bytes: int | None = None) -> str:
    """The file's text; SpecError as check(), for a file larger than max_bytes (a
    description a person wrote is a few KiB; parsing megabytes would cost seconds before
    the first check), or for text that is not UTF-8 (what: the format the file should be
    in, for the message)."""
    p = check(path, kind)
    if max_bytes is not None:
        size = _size(p)
        if size > max_bytes:
            raise SpecError(f"{p}: {size:,} bytes is too large ({kind}: at most "
                            f"{max_bytes:,} bytes)")
    try:
        return p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{p}: not UTF-8 text (byte {exc.start}): {what}") from None
    except OSError as exc:
        raise SpecError(f"{p}: cannot read: {exc.strerror}") from None
