"""A recorded job's file I/O as data: which files under a data root it opened, read (where,
how much, how long each call took) and closed, thread by thread, so that the same reads
can be replayed over the emulated fibre (replay.py) against a dataset of the same shape.

strace (run through launch.py) writes every open, read, pread64, readv, lseek and close of
the job and its threads and forked processes (-f) with absolute start times (-ttt),
durations (-T) and the path behind every fd (-y); strace.py turns that into the calls on
the job's data files, and build() into a Trace (the file's format: tracefile.py).

record        run a command under strace and write its trace
build         a Trace of strace.data_calls (files sized, streams numbered)
load / save   the trace file (tracefile.py; a malformed one is one SpecError line)
summary       files, bytes, reads, read sizes, streams, compute gaps, duration
gaps          per stream, the time between its calls: the job's compute
requirements  the dataset a replay needs: (relative path, bytes) per file
generate      files of the trace's sizes under a folder (content irrelevant)
"""

from __future__ import annotations

import collections
import datetime
import os
import platform
import random
import shlex
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Sequence

from testbed import launch
from testbed.errors import ServiceError, SpecError
from testbed.workload import strace
from testbed.workload.tracefile import READS, Event, Trace, inside, load, save

__all__ = ["Event", "Trace", "build", "gaps", "generate", "load", "machine", "record",
           "requirements", "save", "summary"]
SYSCALLS = "open,openat,read,readv,pread64,lseek,close,clone,clone3,fork,vfork"
STRACE_ARGS = ("-f", "-ttt", "-T", "-y", "-qq", "-s", "0", "-e", "signal=none",
               "-e", f"trace={SYSCALLS}", "--seccomp-bpf")
RECORD_TIMEOUT_S = 3600.0


def build(raw: list[strace.DataCall], root: Path, command: Sequence[str]) -> Trace:
    """A Trace of the data events: files sized from root (or the furthest byte read when
    gone), non-regular files dropped, times relative to the first event."""
    sizes: dict[str, int] = {}
    for e in raw:
        if e.path not in sizes:
            p = root / e.path
            sizes[e.path] = p.stat().st_size if p.is_file() else -1 if p.exists() else 0
        if sizes[e.path] >= 0 and e.op in READS and e.got:
            sizes[e.path] = max(sizes[e.path], e.offset + e.got)
    raw = [e for e in raw if sizes[e.path] >= 0]
    files = {p: i for i, p in enumerate(dict.fromkeys(e.path for e in raw))}
    streams = {s: i for i, s in enumerate(dict.fromkeys((e.pid, e.tid) for e in raw))}
    t0 = raw[0].t_s if raw else 0.0
    events = tuple(Event(round((e.t_s - t0) * 1e6), streams[(e.pid, e.tid)], e.op,
                         files[e.path], e.fd, e.offset, e.size, e.got, round(e.dur_s * 1e6))
                   for e in raw)
    return Trace(tuple(command), machine(), _now(), str(root),
                 tuple((p, sizes[p]) for p in files), tuple(streams), events)


def machine() -> str:
    """This machine as a trace header names it: kernel, architecture, CPUs."""
    return f"{platform.system()} {platform.release()} {platform.machine()}, " \
           f"{os.cpu_count()} CPUs"


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def record(argv: Sequence[str], out_path: Path | str, root: Path | str | None = None, *,
           cwd: Path | str | None = None, timeout_s: float = RECORD_TIMEOUT_S) -> Trace:
    """Run argv (in cwd) under strace, keep its I/O on files under root (default: cwd,
    or this process's working folder) and write the trace to out_path. The command's
    output is discarded (its last line names a failure).

    Raises SpecError for an empty command or a root that is not a folder, ServiceError
    when strace is missing, the command fails (its exit status and last line) or runs
    past timeout_s (then it is killed with strace)."""
    if not argv:
        raise SpecError("trace record: give the command to record after --")
    base = Path(root if root is not None else cwd if cwd is not None else os.getcwd())
    if not base.is_dir():
        raise SpecError(f"trace record: root {base} is not a folder")
    tool = shutil.which("strace")
    if tool is None:
        raise ServiceError("trace record: strace not found on PATH (apt-get install strace)")
    with tempfile.TemporaryDirectory(prefix="testbed-strace-") as tmp:
        log_path = Path(tmp) / "strace.out"
        _traced([tool, *STRACE_ARGS, "-o", str(log_path), "--", *argv], Path(tmp), cwd,
                timeout_s, shlex.join(argv))
        with open(log_path, encoding="utf-8", errors="surrogateescape") as fh:
            raw = strace.data_calls(strace.parse_lines(fh), base)
    trace = build(raw, base.resolve(), argv)
    save(trace, Path(out_path))
    return trace


def _traced(argv: list[str], tmp: Path, cwd: Path | str | None, timeout_s: float,
            what: str) -> None:
    """Run strace and its command in their own process group (launch.start), output to
    files in tmp; the whole group is stopped on a timeout or Ctrl-C (a tracee outlives a
    killed strace otherwise). ServiceError when it fails or overruns."""
    out, err = tmp / "stdout", tmp / "stderr"
    with open(out, "wb") as o, open(err, "wb") as e:
        proc = launch.start(argv, stdin=subprocess.DEVNULL, stdout=o, stderr=e, cwd=cwd)
    try:
        code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        launch.stop(proc)
        raise ServiceError(f"trace record: {what} did not finish within {timeout_s:g} s "
                           "(stopped)") from None
    finally:
        launch.stop(proc)
    if code != 0:
        lines = (err.read_text(errors="replace").strip()
                 or out.read_text(errors="replace").strip()).splitlines()
        how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
        raise ServiceError(f"trace record: {what} {how}: "
                           f"{lines[-1].strip() if lines else 'no output'}")


def summary(trace: Trace) -> dict[str, str]:
    """What a trace holds, as label -> text: files, bytes, reads and their sizes, streams,
    the compute gaps between a stream's calls, the duration."""
    reads = [e for e in trace.events if e.op in READS]
    sizes = collections.Counter(e.size for e in reads).most_common(4)
    end = max((e.t_us + e.dur_us for e in trace.events), default=0)
    return {
        "command": shlex.join(trace.command).replace("\n", "\\n"),
        "machine": trace.machine, "date": trace.date,
        "files": f"{len(trace.files)} ({sum(b for _, b in trace.files) / 1e6:.3f} MB)",
        "bytes read": f"{sum(e.got for e in reads) / 1e6:.3f} MB",
        "reads": f"{len(reads)} ({sum(e.op == 'pread' for e in reads)} pread)",
        "read sizes": ", ".join(f"{_kib(s)} x {n}" for s, n in sizes) + (
            f" (median {_kib(statistics.median_low(e.size for e in reads))})" if reads else ""),
        "streams": f"{len(trace.streams)} in {len({p for p, _ in trace.streams})} "
                   "process(es)",
        "compute gaps": f"{sum(gaps(trace).values()) / 1e6:.3f} s (summed over streams)",
        "I/O time": f"{sum(e.dur_us for e in trace.events) / 1e6:.3f} s",
        "duration": f"{end / 1e6:.3f} s",
    }


def _kib(n: int) -> str:
    return f"{n / 1024:g} KiB" if n >= 1024 else f"{n} B"


def gaps(trace: Trace) -> dict[int, int]:
    """Per stream, its compute: the microseconds between the end of each of its calls and
    the start of its next (never negative)."""
    last: dict[int, int] = {}
    out: dict[int, int] = collections.defaultdict(int)
    for e in trace.events:
        if e.stream in last:
            out[e.stream] += max(0, e.t_us - last[e.stream])
        out[e.stream] += 0
        last[e.stream] = e.t_us + e.dur_us
    return dict(out)


def requirements(trace: Trace) -> list[tuple[str, int]]:
    """The dataset a replay needs: (path relative to the data root, bytes) per file."""
    return list(trace.files)


BLOCK = 1 << 20


def generate(trace: Trace, root: Path, seed: int = 7) -> list[Path]:
    """Write the trace's files under root at their recorded sizes (pseudo-random bytes;
    an existing file of the right size is kept), flushed to disk so that a replay can
    drop them from the page cache. Returns their paths."""
    block = random.Random(seed).randbytes(BLOCK)
    out = []
    for rel, size in requirements(trace):
        path = inside(root, rel)
        out.append(path)
        if path.is_file() and path.stat().st_size == size:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as fh:
            for start in range(0, size, BLOCK):
                fh.write(block[:min(BLOCK, size - start)])
            fh.flush()
            os.fsync(fh.fileno())
    return out


