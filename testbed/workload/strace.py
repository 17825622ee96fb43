"""strace's output as data: the lines `strace -f -ttt -T -y -s 0 -o FILE` writes, turned
into one Call per system call. Pure text handling (no I/O, no process): trace.py runs
strace and decides which calls are a job's data.

A line is `TID EPOCH.USEC NAME(ARGS) = RET [ERRNO (why)] <DURATION>`. Under -f a call
another thread interrupts is split in two: `NAME(ARGS <unfinished ...>` then, later and
on the same TID, `<... NAME resumed>REST`; the two halves are joined and the call keeps
the first half's start time (its <DURATION> is the whole call's). With -y every file
descriptor carries its path, `3</data/a.bin>`, with `>` and unprintable bytes escaped
(\\76, \\303), so a path never needs an fd table to be known. Lines that are not calls
(`+++ exited`, `--- SIGCHLD`) are skipped.

A job's data: regular files under the root opened without O_WRONLY or O_DIRECTORY, except
the interpreter's own code (under its prefixes, in __pycache__ or site-packages, or ending
in .py, .pyc, .so, .pth), so `python job.py` recorded in its own folder keeps only what it
reads. read() and readv() read at the open file's offset, tracked per (process, fd)
through open, read, lseek and close; threads share their process's (CLONE_THREAD), a
forked process starts with a copy of its parent's. pread64 names its offset.

parse_lines  Calls from lines (unfinished/resumed joined)
data_calls   the Calls on a job's data files under a root, with read() offsets tracked
split_args   a call's top-level arguments (strings, arrays, structs and fd paths kept whole)
fd_arg       (fd, path) of an argument such as `3</data/a.bin>`
unquote      a C-escaped string as strace prints it -> str (os.fsdecode of its bytes)
"""

from __future__ import annotations

import codecs
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, NamedTuple

HEAD = re.compile(r"(\d+)\s+(\d+\.\d+)\s+(.*)")
CALL = re.compile(r"([a-z_0-9]+)\((.*)", re.S)
RESUMED = re.compile(r"<\.\.\. ([a-z_0-9]+) resumed>(.*)", re.S)
UNFINISHED = " <unfinished ...>"
RET = re.compile(r"\s*=\s*(-?\d+|\?)(<(?:[^>\\]|\\.)*>)?(?:\s+([A-Z][A-Z0-9_]*)[^<]*)?"
                 r"(?:\s+<(\d+\.\d+)>)?\s*$")
OPEN, CLOSE = "([{", ")]}"
CODE_SUFFIXES = (".py", ".pyc", ".so", ".pth")
CODE_DIRS = {"__pycache__", "site-packages", "dist-packages"}
FORKS = ("clone", "clone3", "fork", "vfork")


@dataclass(frozen=True)
class Call:
    """One system call: thread tid started it at t_s (seconds since the epoch); args as
    printed; ret its return value (None: `?`), ret_path the path -y printed with a
    returned fd, errno its error name if it failed, dur_s how long it took (-T)."""

    tid: int
    t_s: float
    name: str
    args: list[str]
    ret: int | None
    ret_path: str | None
    errno: str | None
    dur_s: float


def unquote(text: str) -> str:
    """A C-escaped string or -y path as strace prints it (quotes optional) -> str; the
    bytes it stands for are decoded as the file system would (os.fsdecode)."""
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1]
    escaped = text.encode("utf-8", "surrogateescape")
    raw = codecs.escape_decode(escaped)[0]  # type: ignore[attr-defined]
    return os.fsdecode(raw)


def _skip_string(text: str, i: int) -> int:
    """The index just past the C string starting at text[i] (a `"`)."""
    i += 1
    while i < len(text) and text[i] != '"':
        i += 2 if text[i] == "\\" else 1
    return i + 1


def _skip_path(text: str, i: int) -> int:
    """The index just past the -y decoration `<...>` starting at text[i]."""
    while i < len(text) and text[i] != ">":
        i += 2 if text[i] == "\\" else 1
    return i + 1


def split_args(text: str) -> tuple[list[str], str] | None:
    """The top-level arguments of `ARGS) REST` and REST (after the closing parenthesis);
    None when the parenthesis never closes (a line cut short)."""
    args, depth, start, i = [], 0, 0, 0
    while i < len(text):
        c = text[i]
        if c == '"':
            i = _skip_string(text, i)
            continue
        if c == "<":
            i = _skip_path(text, i)
            continue
        if c in OPEN:
            depth += 1
        elif c in CLOSE:
            if depth == 0:
                last = text[start:i].strip()
                return (args + [last] if last or args else args), text[i + 1:]
            depth -= 1
        elif c == "," and depth == 0:
            args.append(text[start:i].strip())
            start = i + 1
        i += 1
    return None


FD_ARG = re.compile(r"(-?\d+|AT_FDCWD)(?:<(.*)>)?$", re.S)


def fd_arg(arg: str) -> tuple[int | None, str | None]:
    """(fd, path) of an fd argument `3</data/a.bin>` (path None without -y's
    decoration; fd None for AT_FDCWD or anything that is not an fd)."""
    m = FD_ARG.match(arg)
    if not m:
        return None, None
    fd = None if m.group(1) == "AT_FDCWD" else int(m.group(1))
    return fd, None if m.group(2) is None else unquote(m.group(2))


def _call(tid: int, t_s: float, text: str) -> Call | None:
    """The Call in `NAME(ARGS) = RET ... <DUR>`, or None when it does not read as one."""
    m = CALL.match(text)
    if not m:
        return None
    split = split_args(m.group(2))
    if split is None:
        return None
    args, rest = split
    r = RET.match(rest)
    if not r:
        return None
    ret = None if r.group(1) == "?" else int(r.group(1))
    path = None if r.group(2) is None else unquote(r.group(2)[1:-1])
    return Call(tid, t_s, m.group(1), args, ret, path, r.group(3),
                float(r.group(4)) if r.group(4) else 0.0)


def parse_lines(lines: Iterable[str]) -> Iterator[Call]:
    """Every call in strace's output lines, in the order they finished being printed;
    unfinished halves are held per thread until their `resumed` half arrives."""
    pending: dict[int, tuple[float, str]] = {}
    for line in lines:
        m = HEAD.match(line.rstrip("\n"))
        if not m:
            continue
        tid, t_s, text = int(m.group(1)), float(m.group(2)), m.group(3)
        if text.endswith(UNFINISHED):
            pending[tid] = (t_s, text[:-len(UNFINISHED)])
            continue
        resumed = RESUMED.match(text)
        if resumed:
            if tid not in pending:
                continue  # its first half was never seen (attached mid-call)
            t_s, first = pending.pop(tid)
            text = first + resumed.group(2)
        call = _call(tid, t_s, text)
        if call is not None:
            yield call


class DataCall(NamedTuple):
    """A call on a data file: started at t_s (epoch) by thread tid of process pid, op
    (open, read, pread, close), path relative to the data root, the job's fd, offset,
    size asked, bytes got (0 for open and close), how long it took."""

    t_s: float
    tid: int
    pid: int
    op: str
    path: str
    fd: int
    offset: int
    size: int
    got: int
    dur_s: float


def _is_code(path: str) -> bool:
    """Whether path is the interpreter's own code rather than a job's data."""
    prefixes = {p.rstrip(os.sep) + os.sep for p in (sys.prefix, sys.base_prefix,
                                                      sys.exec_prefix) if p != os.sep}
    return (path.endswith(CODE_SUFFIXES) or bool(CODE_DIRS & set(path.split(os.sep)))
            or any(path.startswith(p) for p in prefixes))


def _processes(calls: list[Call]) -> dict[int, tuple[int, int | None]]:
    """tid -> (its process id, the tid it was forked from or None), from the clone calls:
    a thread (CLONE_THREAD) belongs to its creator's process, a forked child is its own."""
    made: dict[int, tuple[int, bool]] = {}
    for c in calls:
        if c.name in FORKS and c.ret is not None and c.ret > 0:
            made[c.ret] = (c.tid, any("CLONE_THREAD" in a for a in c.args))
    out: dict[int, tuple[int, int | None]] = {}
    for tid in made:
        pid, seen = tid, {tid}
        while pid in made and made[pid][1] and made[pid][0] not in seen:  # a reused tid
            pid = made[pid][0]
            seen.add(pid)
        out[tid] = (pid, made[pid][0] if pid in made and not made[pid][1] else None)
    return out


class _Offsets:
    """File offsets per (process, fd) as read(), lseek() and open() move them; a forked
    process starts with a copy of its parent's (the copies then move apart)."""

    def __init__(self, procs: dict[int, tuple[int, int | None]]) -> None:
        self.procs = procs
        self.at: dict[tuple[int, int], int] = {}
        self.seen: set[int] = set()

    def pid(self, tid: int) -> int:
        """The process of a thread; the first time a forked process is seen, it inherits
        its parent's offsets."""
        pid, parent = self.procs.get(tid, (tid, None))
        if pid not in self.seen:
            self.seen.add(pid)
            if parent is not None:
                ppid = self.pid(parent)
                self.at.update({(pid, fd): o for (p, fd), o in list(self.at.items())
                                if p == ppid})
        return pid


def _data_path(c: Call, root: str) -> tuple[int, str] | None:
    """(fd, path relative to root) of a call on a data file, else None."""
    if c.name in ("open", "openat"):
        at = 1 if c.name == "open" else 2
        flags = c.args[at] if len(c.args) > at else ""
        if c.ret is None or c.ret < 0 or "O_WRONLY" in flags or "O_DIRECTORY" in flags:
            return None
        fd, path = c.ret, c.ret_path
    else:
        fd, path = fd_arg(c.args[0]) if c.args else (None, None)
    if fd is None or path is None or not path.startswith(root.rstrip(os.sep) + os.sep) \
            or _is_code(path):
        return None
    return fd, os.path.relpath(path, root)


def _data_call(c: Call, rel: str, fd: int, pid: int, off: _Offsets) -> DataCall | None:
    """The data event of one call on a data file (None for lseek and failed calls);
    updates the offsets."""
    if c.ret is None or c.ret < 0:
        return None
    key, ret = (pid, fd), c.ret
    raw = DataCall(c.t_s, c.tid, pid, "", rel, fd, 0, 0, 0, c.dur_s)
    if c.name in ("open", "openat"):
        off.at[key] = 0
        return raw._replace(op="open")
    if c.name == "close":
        off.at.pop(key, None)
        return raw._replace(op="close")
    if c.name == "lseek":
        off.at[key] = ret
        return None
    if c.name == "pread64":
        size, offset = _int(c.args, 2), _int(c.args, 3)
        return None if size is None or offset is None else \
            raw._replace(op="pread", offset=offset, size=size, got=ret)
    if c.name in ("read", "readv"):
        size = _int(c.args, 2) if c.name == "read" else ret
        start = off.at.get(key, 0)
        off.at[key] = start + ret
        return None if size is None else raw._replace(op="read", offset=start, size=size,
                                                      got=ret)
    return None


def _int(args: list[str], i: int) -> int | None:
    """args[i] as a whole number >= 0, or None (missing, or not printed as a number)."""
    text = args[i] if i < len(args) else ""
    return int(text) if text.isdigit() else None


def data_calls(calls: Iterable[Call], root: Path | str) -> list[DataCall]:
    """The calls on data files under root among strace's calls, in start order."""
    calls = list(calls)
    base = os.path.realpath(root)
    off = _Offsets(_processes(calls))
    out = []
    for c in calls:
        found = _data_path(c, base)
        if found is not None:
            ev = _data_call(c, found[1], found[0], off.pid(c.tid), off)
            if ev is not None:
                out.append(ev)
    return sorted(out, key=lambda e: e.t_s)


