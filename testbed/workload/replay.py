"""A recorded trace replayed in one worker: the same files (relative to a data root),
offsets and sizes, stream by stream with the recorded concurrency (one thread per
recorded thread or process), and the recorded time between a stream's calls spent as
compute (a sleep, x time_scale, as the loader's compute). Knows nothing of NFS: it reads
files under a path, as loader.py does.

Each stream starts when it started in the recording (x time_scale) and then runs closed
loop: a call is issued as soon as the previous call of its stream has returned and its
gap has been slept, so slower storage stretches the stream instead of overlapping its
calls. A sleep that overshoots (timer slack, a busy machine) is taken off the stream's
next gaps, so its compute adds up to the recorded one (hundreds of short gaps would
otherwise add a late wake-up each). Every file is dropped from the page cache before the
replay and after each close (POSIX_FADV_DONTNEED, as the loader drops each sample), so
every replay reads cold.

A step (what window.py and loader.summarise measure) is a burst of one stream's calls and
the compute after it: the stream's calls up to one followed by a recorded gap of at least
step_gap_ms (default 1 ms), then that gap. wait_s is the time spent inside the step's
calls, compute_s the time between them (the gaps as slept, including the step's closing
gap), so AU = compute / wall is the share of the stream's time not spent waiting for
storage, and a slower data path lowers it; bytes are the step's bytes read and samples
its read calls. The steps measured are those of the main stream, the one that read the
most bytes (a single-threaded job's only stream); every stream's steps are returned too.

replay       run a trace against data_root and return its per-step timings
summarise    a replay's AU with its 95 % interval, step time, throughput, compute overshoot
stream_gaps  per stream, each call's recorded gap before it (the compute to replay)
steps_of     a stream's replayed calls cut into steps
drop_cached  a file dropped from the page cache
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from testbed.errors import WorkloadError
from testbed.workload.tracefile import READS, Event, Trace, inside
from testbed.workload.window import Step, au_ci

STEP_GAP_MS = 1.0
LONG_GAP_S = 0.01  # gaps this long sleep on the stop event (an error elsewhere wakes them)
MAX_BUFFER = 16 << 20  # a larger recorded read is replayed as several reads of this size


@dataclass
class ReplayRun:
    """A replay: the main stream's steps (steps), every stream's, which stream is main,
    bytes and reads done, wall time, the main stream's recorded compute x time_scale
    (nominal_compute_s) and the first I/O error, which stops every stream."""

    steps: list[Step] = field(default_factory=list)
    streams: dict[int, list[Step]] = field(default_factory=dict)
    main: int = 0
    bytes: int = 0
    reads: int = 0
    wall_s: float = 0.0
    nominal_compute_s: float = 0.0
    error: str | None = None


@dataclass
class _Call:
    """One replayed call: when it started and ended (perf_counter), bytes got, its op,
    and the recorded gap after it (None for a stream's last call)."""

    start: float
    end: float
    got: int
    op: str
    gap_after_us: int | None = None


def stream_gaps(trace: Trace) -> dict[int, list[tuple[int, Event]]]:
    """Per stream, its events in start order, each with the recorded microseconds between
    the end of the stream's previous call and its start (0 for the first)."""
    out: dict[int, list[tuple[int, Event]]] = {}
    for ev in sorted(trace.events, key=lambda e: e.t_us):
        calls = out.setdefault(ev.stream, [])
        prev = calls[-1][1] if calls else None
        calls.append((max(0, ev.t_us - prev.t_us - prev.dur_us) if prev else 0, ev))
    return out


def _main_stream(trace: Trace) -> int:
    """The stream that read the most bytes (the lowest index on a tie)."""
    read: dict[int, int] = {}
    for ev in trace.events:
        read[ev.stream] = read.get(ev.stream, 0) + (ev.got if ev.op in READS else 0)
    return min(read, key=lambda s: (-read[s], s)) if read else 0


def _check_dataset(trace: Trace, root: Path) -> list[Path]:
    """The trace's files under root; WorkloadError when one is missing or too small."""
    paths = []
    for rel, size in trace.files:
        path = inside(root, rel)
        try:
            have = path.stat().st_size if path.is_file() else None
        except OSError:
            have = None
        if have is None or have < size:
            what = "missing" if have is None else f"{have} bytes"
            raise WorkloadError(f"replay: {path} is {what}; the trace needs {size} bytes "
                                "(trace.generate writes such a dataset)")
        paths.append(path)
    return paths


def drop_cached(path: Path) -> None:
    """Drop a file's pages from this machine's page cache (best effort)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


class _Stream:
    """One recorded stream replayed: its own descriptors (recorded fd -> ours, opened on
    first use when another thread of the job opened it) and read buffer."""

    def __init__(self, paths: list[Path], calls: list[tuple[int, Event]]) -> None:
        self.paths, self.calls = paths, calls
        size = max((ev.size for _, ev in calls if ev.op in READS), default=1)
        self.view = memoryview(bytearray(min(max(size, 1), MAX_BUFFER)))
        self.fds: dict[int, tuple[int, int]] = {}  # recorded fd -> (our fd, file index)
        self.done: list[_Call] = []

    def _fd(self, ev: Event) -> int:
        """Our descriptor for the event's recorded fd (opened here if not yet)."""
        have = self.fds.get(ev.fd)
        if have is None or have[1] != ev.file:
            if have is not None:
                os.close(have[0])
            have = self.fds[ev.fd] = (os.open(self.paths[ev.file], os.O_RDONLY), ev.file)
        return have[0]

    def _read(self, ev: Event) -> int:
        """The event's bytes read at its offset (pread: never moves our offset; read: at the
        recorded offset, so a read() stays a read())."""
        fd, got, want = self._fd(ev), 0, ev.size
        if ev.op == "read" and os.lseek(fd, 0, os.SEEK_CUR) != ev.offset:
            os.lseek(fd, ev.offset, os.SEEK_SET)
        while want > 0:
            view = self.view[:min(want, len(self.view))]
            n = os.preadv(fd, [view], ev.offset + got) if ev.op == "pread" \
                else os.readv(fd, [view])
            if n <= 0:
                break
            got, want = got + n, want - n
        return got

    def do(self, ev: Event) -> int:
        """Replay one event; bytes read (0 for open and close)."""
        if ev.op == "open":
            self._fd(ev)
        elif ev.op == "close":
            self.close(ev.fd)
        else:
            return self._read(ev)
        return 0

    def close(self, fd: int) -> None:
        """Drop a replayed file's pages and close our descriptor for it."""
        have = self.fds.pop(fd, None)
        if have is not None:
            try:
                os.posix_fadvise(have[0], 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(have[0])

    def run(self, t0: float, k: float, stop: threading.Event, run: ReplayRun) -> None:
        """Replay every call: wait for the stream's start, then per call sleep its gap
        (x k) after the previous call's end and issue it. Time between calls beyond the
        gap (a late wake-up, this loop's own work) is owed and taken off the next gaps,
        so the stream computes as long as recorded in all. An OSError stops every stream."""
        due, owed, end = t0 + self.calls[0][1].t_us * k / 1e6, 0.0, None
        try:
            for i, (gap_us, ev) in enumerate(self.calls):
                if _pause(due - time.perf_counter(), stop):
                    return
                start = time.perf_counter()
                if end is not None:
                    owed += (start - end) - gap_us * k / 1e6
                got = self.do(ev)
                end = time.perf_counter()
                after = self.calls[i + 1][0] if i + 1 < len(self.calls) else None
                self.done.append(_Call(start, end, got, ev.op, after))
                due = end + (after or 0) * k / 1e6 - owed
        except OSError as exc:
            run.error = run.error or f"replay: {exc.strerror or exc}: {exc.filename or ''}"
            stop.set()
        finally:
            for fd in list(self.fds):
                self.close(fd)


def _pause(seconds: float, stop: threading.Event) -> bool:
    """Sleep (the compute); True when the replay was stopped meanwhile. Short gaps use
    time.sleep (finer than an Event's timed wait), long ones wake up on a stop."""
    if seconds >= LONG_GAP_S:
        return stop.wait(seconds)
    if seconds > 0:
        time.sleep(seconds)
    return stop.is_set()


def steps_of(calls: list[_Call], t0: float, step_gap_us: float) -> list[Step]:
    """A stream's replayed calls cut into steps (see the module docstring); start_s is
    relative to t0, the replay's start."""
    steps: list[Step] = []
    first, io_s, compute_s, nbytes, reads = None, 0.0, 0.0, 0, 0
    for i, c in enumerate(calls):
        first = c.start if first is None else first
        io_s += c.end - c.start
        nbytes, reads = nbytes + c.got, reads + (c.op in READS)
        nxt = calls[i + 1].start if i + 1 < len(calls) else c.end
        compute_s += nxt - c.end
        if c.gap_after_us is None or c.gap_after_us >= step_gap_us:
            steps.append(Step(len(steps), first - t0, io_s, compute_s, nbytes, reads))
            first, io_s, compute_s, nbytes, reads = None, 0.0, 0.0, 0, 0
    return steps


def replay(trace: Trace, data_root: Path | str, time_scale: float = 1.0,
           step_gap_ms: float = STEP_GAP_MS) -> ReplayRun:
    """Replay the trace's reads against the files under data_root (see the module
    docstring) and return the per-step timings. WorkloadError when a file the trace
    reads is missing or smaller than recorded; an I/O error during the replay stops it
    and is reported in the run (error), not raised."""
    if not time_scale > 0:
        raise WorkloadError(f"replay: time_scale must be > 0, got {time_scale!r}")
    paths = _check_dataset(trace, Path(data_root))
    for path in paths:
        drop_cached(path)
    run, stop = ReplayRun(main=_main_stream(trace)), threading.Event()
    streams = {s: _Stream(paths, calls) for s, calls in stream_gaps(trace).items()}
    t0 = time.perf_counter()
    threads = [threading.Thread(target=st.run, args=(t0, time_scale, stop, run),
                                name=f"replay-{s}", daemon=True) for s, st in streams.items()]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    run.wall_s = time.perf_counter() - t0
    for s, st in streams.items():
        run.streams[s] = steps_of(st.done, t0, step_gap_ms * 1000.0)
        run.bytes += sum(c.got for c in st.done)
        run.reads += sum(c.op in READS for c in st.done)
    run.steps = run.streams.get(run.main, [])
    main_gaps = stream_gaps(trace).get(run.main, [])
    run.nominal_compute_s = sum(g for g, _ in main_gaps[1:]) * time_scale / 1e6
    return run


def summarise(run: ReplayRun, time_scale: float = 1.0) -> dict[str, float]:
    """The main stream's steps in emulated units (times / time_scale, rates x it): AU (%)
    and its 95 % half-width (window.au_ci), mean step time, MB/s, stall, and how far the
    compute as slept overshot the recorded (a sign the machine, not the data path, was
    late). NaN figures when fewer than two steps ran."""
    steps, k = run.steps, time_scale
    if len(steps) < 2:
        return dict.fromkeys(("au_pct", "au_ci_pct", "step_s", "throughput_MB_s", "stall_s",
                              "wall_s", "compute_overshoot_pct"), float("nan"))
    wall = steps[-1].end_s - steps[0].start_s
    au_pct, au_half = au_ci(steps)
    compute = sum(s.compute_s for s in steps)
    nominal = run.nominal_compute_s
    return {"au_pct": au_pct, "au_ci_pct": au_half, "step_s": wall / len(steps) / k,
            "throughput_MB_s": sum(s.bytes for s in steps) / wall / 1e6 * k,
            "stall_s": sum(s.wait_s for s in steps) / k, "wall_s": wall / k,
            "compute_overshoot_pct": 100.0 * (compute - nominal) / nominal if nominal > 0
            else 0.0}
