"""Results files a reader never sees half-written, declared once for every writer.

A whole file (summary.csv, meta.json, a plot, advice.json) is written under a temporary
name beside it, fsynced and renamed over it: rename is atomic within a file system, so a
reader (a person, `testbed report`, a `--resume`) sees the old file or the new one. An
append (results.csv, steps.csv) lands whole or not at all: when the write fails (the disk
is full) the file is cut back to its length before, so no half row is left for the next
reader. Both turn the operating system's refusal into one ResultsError line that names
the file and says that what was written before it is intact."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import IO, Iterator

from testbed.errors import ResultsError


def _refused(path: Path, exc: OSError) -> ResultsError:
    """The one line for a results file the system would not write."""
    return ResultsError(f"{path}: cannot write: {exc.strerror or exc} (what was written "
                        "before is intact; free space or fix the folder, then --resume)")


def _fsync_dir(folder: Path) -> None:
    """Make a rename in `folder` durable (best effort: some file systems refuse)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temporary path beside `path` (same suffix, so writers that go by it still do)
    for the caller to write; on success fsynced and renamed over `path`, on any failure
    removed, `path` untouched. OSError becomes ResultsError."""
    path = Path(path)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise _refused(path, exc) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def write_text(path: Path, text: str) -> Path:
    """Replace `path` with `text` (UTF-8), atomically (see replacing)."""
    with replacing(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path


def write_bytes(path: Path, data: bytes) -> Path:
    """Replace `path` with `data`, atomically (see replacing)."""
    with replacing(path) as tmp:
        tmp.write_bytes(data)
    return path


@contextlib.contextmanager
def appending(path: Path) -> Iterator[IO[str]]:
    """`path` open to append text (created if missing); on success flushed and fsynced,
    on failure cut back to its length before, so what the caller wrote lands whole or
    not at all. OSError becomes ResultsError."""
    path = Path(path)
    try:
        fh = open(path, "a", newline="", encoding="utf-8")
    except OSError as exc:
        raise _refused(path, exc) from None
    start = fh.tell()
    try:
        yield fh
        fh.flush()
        os.fsync(fh.fileno())
    except BaseException as exc:
        with contextlib.suppress(OSError):
            fh.close()  # its unwritten buffer fails again: dropped with it
        with contextlib.suppress(OSError):
            os.truncate(path, start)
        if isinstance(exc, OSError):
            raise _refused(path, exc) from None
        raise
    finally:
        with contextlib.suppress(OSError):
            fh.close()
