"""The training-input loader feeding an emulated accelerator. Knows nothing of NFS or
namespaces: it reads files under a path.

As torch's DataLoader does, `prefetch` batches stay requested from the readers (threads
or forked processes) sample by sample; the accelerator takes a batch (the wait is the
stall), "computes" for compute_ms (a sleep), and the next batch is requested. Epochs
follow one another (reshuffled) for as long as the measured window needs; every sample
read is dropped from the page cache afterwards (POSIX_FADV_DONTNEED), so every epoch
reads cold through the client, as a data set far larger than memory would.

run_loader  per-step timings and when warm-up ended (window.Window decides)
summarise   the measured window's AU with its 95 % interval, step time, throughput,
            stall, and how far the emulated compute overshot its nominal time (a sign
            that the machine, not the data path, was late)

Under time dilation by k the sleeps and windows run k times longer in real time, and
summarise reports emulated units (times / k, rates x k).
"""

from __future__ import annotations

import collections
import ctypes
import ctypes.util
import errno
import functools
import itertools
import math
import multiprocessing
import os
import random
import statistics
import threading
import time
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from testbed import schema
from testbed.errors import SpecError, WorkloadError
from testbed.schema import ACCESS, READER_KINDS
from testbed.workload.dataset import RECORD_HEADER, Sample, samples_of
from testbed.workload.together import Together
from testbed.workload.window import (WINDOW_ROWS, Step, Window, WindowSpec, au_ci, batches,
                                     mean_ci)

LOADER_ROWS = schema.knobs_of("loader")  # the schema's rows for the loader, by their names
READ_TIMEOUT_S = 300.0  # a batch that is not read in this time (x k) fails the run
PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class WorkloadSpec:
    """The loader and its emulated accelerator.

    batch: samples per step; compute_ms: emulated compute per step; readers: reader
    threads or processes (reader_kind); prefetch: batches requested ahead; access: a
    sample is a file or one record; read_kib: the application's read size; measure_s,
    measure_max_s, measure_stall_s, warmup_max_s, min_steps, au_ci_target: the measured window (see
    window.py); au_bar: the AU a point must reach (MLPerf Storage: 90 %)."""

    batch: int = schema.default("batch")
    compute_ms: float = schema.default("compute_ms")
    readers: int = schema.default("readers")
    prefetch: int = schema.default("prefetch")
    shuffle: bool = schema.default("shuffle")
    seed: int = schema.default("seed")
    au_bar: float = schema.FILE_SETTINGS["au_bar"].default
    reader_kind: str = schema.default("reader_kind")
    access: str = schema.default("access")
    read_kib: int = schema.default("read_kib")
    measure_s: float = schema.default("measure_s")
    measure_max_s: float = schema.default("measure_max_s")
    measure_stall_s: float = schema.default("measure_stall_s")
    warmup_max_s: float = schema.default("warmup_max_s")
    min_steps: int = schema.default("min_steps")
    au_ci_target: float = schema.default("au_ci_target")

    def __post_init__(self) -> None:
        for name in LOADER_ROWS + WINDOW_ROWS:
            object.__setattr__(self, name, schema.check(name, getattr(self, name), name))
        object.__setattr__(self, "au_bar",
                           schema.FILE_SETTINGS["au_bar"].check(self.au_bar, "au_bar"))
        self.window()  # the window's own rule (measure_max_s >= the other two)

    def window(self, warmup_bytes: int = 0) -> WindowSpec:
        """The measured window this spec asks for (durations in emulated seconds)."""
        return WindowSpec(warmup_bytes=warmup_bytes,
                          **{name: getattr(self, name) for name in WINDOW_ROWS})


@dataclass
class LoaderRun:
    """What a loader run produced: every step, where its own warm-up ended, whether it
    settled, and the I/O error that ended it early, if any. first and stop bound the
    measured window when loaders ran together (together.common_window); else it runs
    from the end of warm-up to the last step."""

    steps: list[Step] = field(default_factory=list)
    warmup_steps: int | None = None
    settled: bool = False
    error: str | None = None
    first: int | None = None
    stop: int | None = None

    @property
    def window(self) -> range:
        """The indices of the measured window's steps."""
        if self.warmup_steps is None:
            return range(0)
        first = self.warmup_steps if self.first is None else self.first
        return range(first, len(self.steps) if self.stop is None else self.stop)

    @property
    def measured(self) -> list[Step]:
        """The steps of the measured window."""
        return self.steps[self.window.start:self.window.stop]


_buffers = threading.local()


def _buffer(size: int) -> memoryview:
    """This reader's read buffer, reused across samples as fio reuses its own (a fresh
    1 MiB buffer per sample is an mmap and page faults that fio does not pay)."""
    view: memoryview | None = getattr(_buffers, "view", None)
    if view is None or len(view) != size:
        view = _buffers.view = memoryview(bytearray(size))
    return view


def read_sample(sample: Sample, read_bytes: int = 1 << 20) -> int:
    """Read one sample in read_bytes requests, then drop it from the page cache so that
    the next epoch reads it cold again; returns the bytes read. A read that ends before
    the sample's length raises OSError (EIO): a short read is never counted as a sample
    (a soft mount's failure must fail the run). A whole file is read to its end, where
    a failing mount's read raises EIO itself; it is not stat'ed, which costs a GETATTR
    round trip per file where attributes are not cached."""
    path, offset, length = sample
    n = 0
    view = _buffer(read_bytes)
    with open(path, "rb", buffering=0) as fh:
        if offset:
            fh.seek(offset)
        while length < 0 or n < length:
            want = read_bytes if length < 0 else min(read_bytes, length - n)
            got = fh.readinto(view[:want])
            if not got:
                break
            n += got
        if n < length:
            raise OSError(errno.EIO, f"short read of {path}: {n} of {length} bytes")
        os.posix_fadvise(fh.fileno(), offset, n, os.POSIX_FADV_DONTNEED)
    return n


def die_with_parent() -> None:
    """In a forked reader: have the kernel SIGKILL us when the loader's process dies, so
    a killed run leaves no reader process behind (reading, or holding a mount busy)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0)


Batch = tuple[list[Sample], int]  # the reads of one step, and how many samples they hold


def _stream(samples: list[Sample], spec: WorkloadSpec, rng: random.Random) -> Iterator[Sample]:
    """The samples in the order the loader asks for them, epoch after epoch: shuffled
    each epoch (if shuffle); records read in order are interleaved over `readers` files
    at a time, one record from each in turn, as tf.data's interleave (DLIO's TFRecord
    reader with read_threads) reads record files: each file sequentially."""
    by_file: dict[str, list[Sample]] = {}
    for smp in samples:
        by_file.setdefault(smp[0], []).append(smp)
    interleave = spec.access == "record" and not spec.shuffle
    while True:
        epoch = list(samples)
        if spec.shuffle:
            rng.shuffle(epoch)
            yield from epoch
        elif not interleave:
            yield from epoch
        else:
            queue = collections.deque(by_file.values())
            active = [iter(queue.popleft()) for _ in range(min(spec.readers, len(queue)))]
            while active:
                for it in list(active):
                    smp = next(it, None)
                    if smp is None:
                        active.remove(it)
                        if queue:
                            active.append(iter(queue.popleft()))
                        continue
                    yield smp


def coalesce(batch: list[Sample]) -> list[Sample]:
    """A batch's records of one file that follow one another, read as one run (one open,
    one sequential read through the records and their headers): how a record file is
    read when it is read in order. Other samples are read as they are."""
    runs: list[Sample] = []
    for path, offset, length in batch:
        if length >= 0 and runs and runs[-1][0] == path and runs[-1][2] >= 0 \
                and 0 <= offset - (runs[-1][1] + runs[-1][2]) <= RECORD_GAP:
            prev = runs.pop()
            runs.append((path, prev[1], offset + length - prev[1]))
        else:
            runs.append((path, offset, length))
    return runs


RECORD_GAP = RECORD_HEADER.size  # bytes between one record's payload and the next


def _batches(samples: list[Sample], spec: WorkloadSpec) -> Iterator[Batch]:
    """Batches for ever (see _stream), each as its reads (coalesce) and its sample count."""
    it = _stream(samples, spec, random.Random(spec.seed))
    while True:
        batch = list(itertools.islice(it, spec.batch))
        reads = sorted(batch, key=lambda smp: (smp[0], smp[1])) if not spec.shuffle else batch
        yield coalesce(reads), len(batch)


def _pool(spec: WorkloadSpec) -> Executor:
    if spec.reader_kind == "process":
        # Forked before any of our threads start (as DataLoader workers are), warmed up so
        # that process start-up is not counted as I/O stall.
        pool = ProcessPoolExecutor(spec.readers, mp_context=multiprocessing.get_context("fork"),
                                   initializer=die_with_parent)
        list(pool.map(abs, range(spec.readers)))
        return pool
    return ThreadPoolExecutor(max_workers=spec.readers)


class _Signals:
    """What one loader tells the others through `together` (if any): its warm-up has
    ended (Together.warm), its window is complete (Together.done), also when it fails."""

    def __init__(self, together: Together | None) -> None:
        self.together, self.warm, self.done = together, False, False

    def after(self, decide: Window, step: Step) -> bool:
        """Record a step; True when this loader should stop (its window complete and,
        with `together`, every other one's too)."""
        more = self.done or decide.add(step)
        if not self.warm and decide.warmup_steps is not None:
            self.warm = True
            if self.together is not None:
                self.together.warm()
        if not self.done and not more:
            self.done = True
            if self.together is not None:
                self.together.done()
        return self.done and (self.together is None or self.together.complete.is_set())

    def finish(self) -> None:
        """A loader that stopped early (failed) counts as warm and complete."""
        if self.together is not None and not self.warm:
            self.together.warm()  # the others' window must not wait for this one
        if self.together is not None and not self.done:
            self.together.done()  # the others must not wait for this window


def run_loader(root: Path, spec: WorkloadSpec, window: WindowSpec | None = None,
               time_scale: float = 1.0, pattern: str = "sample_*",
               together: Together | None = None) -> LoaderRun:
    """Feed an emulated accelerator from the files under root until the measured window
    is complete (and, with `together`, every other loader's too: they keep loading
    meanwhile, on its clock). Never raises for I/O errors: the run reports them (a dead
    server must not hang or crash the experiment). WorkloadError when there are no files;
    a loader that fails or raises counts as complete for the others."""
    run, signals = LoaderRun(), _Signals(together)
    try:
        files = sorted(root.glob(pattern))
        if not files:
            raise WorkloadError(f"no dataset files under {root}")
        decide = Window((window or spec.window()).scaled(time_scale))
        batch_iter = _batches(samples_of(files, spec.access), spec)
        read = functools.partial(read_sample, read_bytes=spec.read_kib << 10)
        pool = _pool(spec)
        pending: collections.deque[tuple[list[Future[int]], int]] = collections.deque(
            _submit(pool, read, next(batch_iter)) for _ in range(spec.prefetch))
        t0 = together.t0 if together is not None else time.perf_counter()
        try:
            for i in itertools.count():
                step = _step(i, t0, pool, read, pending, batch_iter, spec, time_scale, run)
                if step is None:
                    break
                run.steps.append(step)
                if signals.after(decide, step):
                    break
        finally:
            _drain(pool, pending, READ_TIMEOUT_S * time_scale)
    finally:
        signals.finish()
    run.warmup_steps, run.settled = decide.warmup_steps, decide.settled
    return run


def _submit(pool: Executor, read: functools.partial[int],
            batch: Batch) -> tuple[list[Future[int]], int]:
    """A batch's reads handed to the readers, with its sample count."""
    reads, samples = batch
    return [pool.submit(read, smp) for smp in reads], samples


def _step(i: int, t0: float, pool: Executor, read: functools.partial[int],
          pending: collections.deque[tuple[list[Future[int]], int]],
          batch_iter: Iterator[Batch],
          spec: WorkloadSpec, time_scale: float, run: LoaderRun) -> Step | None:
    """One training step: wait for the oldest requested batch (the stall), request the
    next, compute (sleep). None, with run.error set, when the batch could not be read."""
    start = time.perf_counter()
    try:
        futures, samples = pending.popleft()
        nbytes = sum(f.result(timeout=READ_TIMEOUT_S * time_scale) for f in futures)
    except (OSError, FutureTimeout) as exc:
        run.error = f"{type(exc).__name__}: {exc}" if str(exc) else \
            f"a batch was not read within {READ_TIMEOUT_S * time_scale:g} s"
        return None
    wait = time.perf_counter() - start
    pending.append(_submit(pool, read, next(batch_iter)))
    t1 = time.perf_counter()
    time.sleep(spec.compute_ms * time_scale / 1000.0)  # the emulated accelerator
    return Step(i, start - t0, wait, time.perf_counter() - t1, nbytes, samples)


def _drain(pool: Executor, pending: collections.deque[tuple[list[Future[int]], int]],
           timeout_s: float) -> None:
    """Cancel the reads not started and wait (bounded) for those under way, so that no
    read of this run overlaps the teardown or the next point."""
    futures = [f for batch, _ in pending for f in batch]
    for f in futures:
        f.cancel()
    wait([f for f in futures if not f.cancelled()], timeout=timeout_s)
    pool.shutdown(wait=False, cancel_futures=True)


NAN_SUMMARY = ("au_pct", "au_ci_pct", "step_s", "step_ci_s", "samples_per_s",
               "throughput_MB_s", "stall_s", "wall_s", "step_wait_median_ms",
               "steps_measured", "warmup_s", "warmup_MB", "warmup_settled",
               "compute_overshoot_pct")


def summarise(run: LoaderRun, spec: WorkloadSpec, time_scale: float = 1.0) -> dict[str, float]:
    """The measured window in emulated units: AU (%) and its 95 % half-width, time per
    step and its half-width, samples/s, MB/s, stall, warm-up, compute overshoot."""
    steps, k = run.measured, time_scale
    if len(steps) < 2:
        return dict.fromkeys(NAN_SUMMARY, math.nan)
    wall = steps[-1].end_s - steps[0].start_s
    au_pct, au_half = au_ci(steps)
    step_means = [(b[-1].end_s - b[0].start_s) / len(b) for b in batches(steps)]
    nominal = spec.compute_ms * k / 1000.0 * len(steps)
    warm = run.steps[:run.warmup_steps or 0]
    started = warm[0].start_s if warm else steps[0].start_s
    return {
        "au_pct": au_pct, "au_ci_pct": au_half,
        "step_s": wall / len(steps) / k, "step_ci_s": mean_ci(step_means)[1] / k,
        "samples_per_s": sum(s.samples for s in steps) / wall * k,
        "throughput_MB_s": sum(s.bytes for s in steps) / wall / 1e6 * k,
        "stall_s": sum(s.wait_s for s in steps) / k, "wall_s": wall / k,
        "step_wait_median_ms": 1000 * statistics.median(s.wait_s for s in steps) / k,
        "steps_measured": len(steps),
        "warmup_s": (warm[-1].end_s - started if warm else 0.0) / k,
        "warmup_MB": sum(s.bytes for s in warm) / 1e6, "warmup_settled": run.settled,
        "compute_overshoot_pct": 100.0 * (sum(s.compute_s for s in steps) - nominal)
        / nominal if nominal > 0 else 0.0,
    }
