"""The trace file: a recorded job's file I/O (trace.py records it, replay.py replays it),
its types and its format, written and read here only.

Format "apn-testbed-trace", version 1: JSON lines, UTF-8.
  line 1   a header object: format, version, command (argv), machine (kernel, arch, CPUs),
           date (UTC), root (the recorded data root, absolute), columns (the event fields,
           below), files ([relative path, bytes] each; a file's index is its position;
           bytes: its size when the job ended, or the furthest byte read if it was gone),
           streams ([pid, tid] each; a stream's index is its position: one stream per
           thread or process that touched the data)
  then     one event a line, in start order: [t_us, stream, op, file, fd, offset, size,
           got, dur_us]: t_us the call's start in microseconds after the first event; op
           "open", "read" (read/readv: sequential, at the offset the open file had),
           "pread" (pread64: explicit offset) or "close"; fd the job's descriptor; offset,
           size (bytes asked; readv's are not decoded: its got stands for it) and got
           (bytes returned), all 0 for open and close; dur_us how long the call took.
Paths are relative to root and never leave it (not absolute, no ".."). A file that does
not read as this format is refused in one SpecError line naming the file and line.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from testbed import atomic, userfiles
from testbed.errors import SpecError

FORMAT, VERSION = "apn-testbed-trace", 1
COLUMNS = ("t_us", "stream", "op", "file", "fd", "offset", "size", "got", "dur_us")
OPS = ("open", "read", "pread", "close")
READS = ("read", "pread")
MAX_INT = (1 << 63) - 1  # offsets and sizes the kernel takes (off_t)
NAME_MAX, PATH_MAX = 255, 4096  # Linux's limits on a name and a path (bytes)
HEADER_KEYS = ("format", "version", "command", "machine", "date", "root", "columns",
               "files", "streams")


class Event(NamedTuple):
    """One data call of a trace (fields: the module docstring's columns)."""

    t_us: int
    stream: int
    op: str
    file: int
    fd: int
    offset: int
    size: int
    got: int
    dur_us: int


@dataclass(frozen=True)
class Trace:
    """A recorded job: its header (command, machine, date, root), the files it read with
    their sizes, its streams (pid, tid) and its events in start order."""

    command: tuple[str, ...]
    machine: str
    date: str
    root: str
    files: tuple[tuple[str, int], ...]
    streams: tuple[tuple[int, int], ...]
    events: tuple[Event, ...]


def save(trace: Trace, path: Path) -> Path:
    """Write the trace file (atomically: a reader never sees half of it)."""
    header = {"format": FORMAT, "version": VERSION, "command": list(trace.command),
              "machine": trace.machine, "date": trace.date, "root": trace.root,
              "columns": list(COLUMNS), "files": [list(f) for f in trace.files],
              "streams": [list(s) for s in trace.streams]}
    lines = [json.dumps(header)] + [json.dumps(list(e), separators=(",", ":"))
                                    for e in trace.events]
    return atomic.write_text(Path(path), "\n".join(lines) + "\n")


def load(path: Path | str) -> Trace:
    """A trace file, validated; SpecError "trace FILE line N: why" otherwise."""
    text = userfiles.read_text(path, "trace", f"an {FORMAT} file (JSON lines)")
    lines = text.splitlines()
    if not lines or not lines[0].strip():
        raise SpecError(f"trace {path}: empty, not an {FORMAT} file")
    head = _header(_json(lines[0], path, 1), path)
    files, streams = head["files"], head["streams"]
    events = tuple(_event(_json(line, path, n), len(files), len(streams), path, n)
                   for n, line in enumerate(lines[1:], 2) if line.strip())
    return Trace(tuple(head["command"]), head["machine"], head["date"], head["root"],
                 tuple((p, b) for p, b in files), tuple((a, b) for a, b in streams), events)


def _json(line: str, path: Path | str, n: int) -> Any:
    """One line's JSON value; SpecError naming the line otherwise."""
    try:
        return json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise SpecError(f"trace {path} line {n}: not JSON ({str(exc)[:80]})") from None


def _count(v: Any) -> bool:
    """A whole number in the kernel's range (bool is not a number here)."""
    return type(v) is int and 0 <= v <= MAX_INT


def _header(head: Any, path: Path | str) -> dict[str, Any]:
    """The header object, checked: format and version, every key, files and streams."""
    where = f"trace {path} line 1"
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise SpecError(f"{where}: not an {FORMAT} header (a JSON object with "
                        f"\"format\": \"{FORMAT}\")")
    if type(head.get("version")) is not int or head.get("version") != VERSION:
        raise SpecError(f"{where}: version {head.get('version')!r} is not one this testbed "
                        f"reads ({VERSION})")
    missing = [k for k in HEADER_KEYS if k not in head]
    if missing:
        raise SpecError(f"{where}: header lacks {', '.join(missing)}")
    if head["columns"] != list(COLUMNS):
        raise SpecError(f"{where}: columns must be {', '.join(COLUMNS)}")
    if not (isinstance(head["command"], list) and all(isinstance(a, str) for a in head["command"])
            and all(isinstance(head[k], str) for k in ("machine", "date", "root"))):
        raise SpecError(f"{where}: command must be a list of strings; machine, date and "
                        "root strings")
    for rel, size in _pairs(head["files"], where, "files", (str, int)):
        if not safe_path(rel):
            raise SpecError(f"{where}: file path {rel!r} is not a plain path inside the "
                            "data root")
        if not _count(size):
            raise SpecError(f"{where}: file {rel!r} has a size of {size!r}")
    for pid, tid in _pairs(head["streams"], where, "streams", (int, int)):
        if not (_count(pid) and _count(tid)):
            raise SpecError(f"{where}: stream [{pid!r}, {tid!r}] is not two whole numbers")
    return head


def _pairs(value: Any, where: str, key: str, types: tuple[type, type]) -> list[list[Any]]:
    """A header list of two-element lists of the given types; SpecError otherwise."""
    if not isinstance(value, list) or not all(
            isinstance(v, list) and len(v) == 2 and isinstance(v[0], types[0])
            and isinstance(v[1], types[1]) for v in value):
        raise SpecError(f"{where}: {key} must be a list of [{types[0].__name__}, "
                        f"{types[1].__name__}] pairs")
    return value


def _event(row: Any, files: int, streams: int, path: Path | str, n: int) -> Event:
    """One event line, checked: nine fields, known op, indices in range, counts >= 0."""
    where = f"trace {path} line {n}"
    if not isinstance(row, list) or len(row) != len(COLUMNS):
        raise SpecError(f"{where}: an event is a list of {len(COLUMNS)} fields "
                        f"({', '.join(COLUMNS)})")
    ev = Event(*row)
    if ev.op not in OPS:
        raise SpecError(f"{where}: op {ev.op!r} is not one of {', '.join(OPS)}")
    bad = [c for c, v in zip(COLUMNS, ev) if c != "op" and not _count(v)]
    if bad:
        raise SpecError(f"{where}: {bad[0]} {getattr(ev, bad[0])!r} is not a whole "
                        "number >= 0")
    if ev.stream >= streams or ev.file >= files:
        raise SpecError(f"{where}: stream {ev.stream} or file {ev.file} is not in the header "
                        f"({streams} streams, {files} files)")
    return ev


def safe_path(rel: str) -> bool:
    """Whether rel names a file inside a root: relative, normalised, no "..", and a name
    the file system can spell."""
    try:
        os.fsencode(rel)
    except UnicodeError:
        return False
    return (bool(rel) and "\0" not in rel and not os.path.isabs(rel)
            and os.path.normpath(rel) == rel and rel != "." and ".." not in Path(rel).parts
            and len(os.fsencode(rel)) < PATH_MAX
            and all(len(os.fsencode(p)) <= NAME_MAX for p in Path(rel).parts))


def inside(root: Path, rel: str) -> Path:
    """root/rel, refusing (SpecError) a path that would leave root."""
    if not safe_path(rel):
        raise SpecError(f"trace: file path {rel!r} is not a plain path inside the data root")
    return Path(root) / rel
