"""Training-input workload: dataset generation (storage side) and a loader feeding an
emulated accelerator (GPU side). Knows nothing of NFS or namespaces: it reads files under
a path.

WorkloadSpec   batch size, emulated compute time per step, steps (+ warm-up), readers
               (threads or processes), prefetch depth, shuffle, file- or record-level
               access; presets after MLPerf Storage (h100 and a100).
generate       N files of a given size, deterministic content (seeded per file), formats
               raw / npz / record (length-prefixed records, TFRecord-like).
run_loader     `prefetch` batches stay requested from the readers (sample by sample);
               the accelerator takes a batch (the wait is the stall) and "computes"
               for compute_s, and the next batch is requested.
               Returns per-step timings; summarise() turns them into AU, samples/s, MB/s.
"""

from __future__ import annotations

import collections
import ctypes
import ctypes.util
import functools
import hashlib
import math
import multiprocessing
import random
import statistics
import struct
import threading
import time
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from testbed.errors import SpecError, WorkloadError

FORMATS = ("raw", "npz", "record")
RECORD_HEADER = struct.Struct("<Q")

# MLPerf Storage figures (mlcommons/storage storage-conf/workload/*.yaml; anchors.md):
# sample size, batch, compute time per step, reader threads, AU pass bar.
PRESETS: dict[str, dict[str, Any]] = {
    "unet3d-h100": {"sample_bytes": 146_600_628, "batch": 7, "compute_ms": 323.0,
                    "readers": 4, "au_bar": 90.0},
    "unet3d-a100": {"sample_bytes": 146_600_628, "batch": 7, "compute_ms": 636.0,
                    "readers": 4, "au_bar": 90.0},
    "resnet50-h100": {"sample_bytes": 114_660, "batch": 400, "compute_ms": 224.0,
                      "readers": 8, "au_bar": 90.0},
    "resnet50-a100": {"sample_bytes": 114_660, "batch": 64, "compute_ms": 151.0,
                      "readers": 8, "au_bar": 90.0},
    "cosmoflow-h100": {"sample_bytes": 2_828_486, "batch": 1, "compute_ms": 3.5,
                       "readers": 4, "au_bar": 70.0},
    "cosmoflow-a100": {"sample_bytes": 2_828_486, "batch": 1, "compute_ms": 5.51,
                       "readers": 4, "au_bar": 70.0},
}
READER_KINDS = ("thread", "process")
ACCESS = ("file", "record")


def preset(name: str, scale: float = 1.0) -> dict[str, Any]:
    """A preset's fields; scale < 1 shrinks sample size AND compute time together, so the
    bandwidth an accelerator demands stays the preset's while the lab's memory suffices."""
    if name not in PRESETS:
        raise SpecError(f"preset: unknown {name!r}; known: {', '.join(PRESETS)}")
    if not 0 < scale <= 1:
        raise SpecError(f"scale: must be in (0, 1], got {scale}")
    p = dict(PRESETS[name])
    p["sample_bytes"] = max(4096, int(p["sample_bytes"] * scale))
    p["compute_ms"] = p["compute_ms"] * scale
    return p


@dataclass(frozen=True)
class WorkloadSpec:
    batch: int = 4
    compute_ms: float = 50.0
    steps: int = 20
    warmup_steps: int = 3
    readers: int = 4
    prefetch: int = 2
    shuffle: bool = True
    seed: int = 1
    au_bar: float = 90.0
    reader_kind: str = "thread"
    access: str = "file"
    read_kib: int = 1024

    def __post_init__(self) -> None:
        for name, lo in (("batch", 1), ("steps", 1), ("readers", 1), ("prefetch", 1)):
            v = getattr(self, name)
            if not isinstance(v, int) or v < lo:
                raise SpecError(f"{name}: must be an integer >= {lo}, got {v!r}")
        if not isinstance(self.warmup_steps, int) or not 0 <= self.warmup_steps < self.steps:
            raise SpecError(f"warmup_steps: must be 0..steps-1, got {self.warmup_steps!r}")
        if isinstance(self.compute_ms, bool) or not isinstance(self.compute_ms, (int, float)) \
                or not math.isfinite(self.compute_ms) or self.compute_ms < 0:
            raise SpecError(f"compute_ms: must be a finite number >= 0, got {self.compute_ms!r}")
        if not 0 < self.au_bar <= 100:
            raise SpecError(f"au_bar: must be in (0, 100], got {self.au_bar}")
        if self.reader_kind not in READER_KINDS:
            raise SpecError(f"reader_kind: {self.reader_kind!r}; known: "
                            f"{', '.join(READER_KINDS)}")
        if self.access not in ACCESS:
            raise SpecError(f"access: {self.access!r}; known: {', '.join(ACCESS)}")
        if not isinstance(self.read_kib, int) or not 4 <= self.read_kib <= 65536:
            raise SpecError(f"read_kib: must be 4..65536, got {self.read_kib!r}")


@dataclass(frozen=True)
class DatasetSpec:
    """The training set the storage site serves: `files` files of `file_kib` KiB in a
    format (raw bytes, numpy .npz, or length-prefixed record shards with
    `records_per_file` records), content seeded per file."""

    files: int = 64
    file_kib: int = 1024
    format: str = "raw"
    records_per_file: int = 8
    seed: int = 7

    def __post_init__(self) -> None:
        for name, lo in (("files", 1), ("file_kib", 4), ("records_per_file", 1)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < lo:
                raise SpecError(f"{name}: must be an integer >= {lo}, got {v!r}")
        if self.format not in FORMATS:
            raise SpecError(f"format: unknown {self.format!r}; known: {', '.join(FORMATS)}")

    @property
    def file_bytes(self) -> int:
        """Bytes of payload per file."""
        return self.file_kib * 1024

    @property
    def total_bytes(self) -> int:
        """Bytes of payload of the whole set."""
        return self.files * self.file_bytes

    def sample_bytes(self, access: str) -> int:
        """Bytes per sample: a file, or one record of a record shard."""
        return self.file_bytes if access == "file" else -(-self.file_bytes // self.records_per_file)

    def generate(self, root: Path) -> list[Path]:
        """Write the set under root (see generate())."""
        return generate(root, self.files, self.file_bytes, self.format, self.seed,
                        self.records_per_file)


def file_name(i: int, fmt: str) -> str:
    """The name of file i of a set in format fmt."""
    return f"sample_{i:06d}.{ {'raw': 'bin', 'npz': 'npz', 'record': 'rec'}[fmt] }"


def _content(i: int, size: int, seed: int) -> bytes:
    return np.random.default_rng((seed, i)).integers(0, 256, size, dtype=np.uint8).tobytes()


def generate(root: Path, files: int, file_bytes: int, fmt: str = "raw", seed: int = 7,
             records_per_file: int = 8) -> list[Path]:
    """Write `files` files of ~file_bytes under root; returns their paths (skips existing)."""
    if fmt not in FORMATS:
        raise SpecError(f"format: unknown {fmt!r}; known: {', '.join(FORMATS)}")
    if files < 1 or file_bytes < 1:
        raise SpecError("dataset: files and file size must be >= 1")
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(files):
        path = root / file_name(i, fmt)
        paths.append(path)
        if path.exists():
            continue
        data = _content(i, file_bytes, seed)
        tmp = path.with_suffix(".tmp")
        if fmt == "raw":
            tmp.write_bytes(data)
        elif fmt == "npz":
            with open(tmp, "wb") as fh:
                np.savez(fh, x=np.frombuffer(data, dtype=np.uint8))
        else:
            n = max(1, records_per_file)
            step = -(-len(data) // n)
            with open(tmp, "wb") as fh:
                for k in range(0, len(data), step):
                    rec = data[k:k + step]
                    fh.write(RECORD_HEADER.pack(len(rec)))
                    fh.write(rec)
        tmp.rename(path)
    return paths


def expected_digest(i: int, file_bytes: int, seed: int = 7) -> str:
    """The SHA-256 of file i's payload (to check what a worker read)."""
    return hashlib.sha256(_content(i, file_bytes, seed)).hexdigest()


# A sample: (path, offset, length); length -1 = the whole file from offset.
Sample = tuple[str, int, int]


_buffers = threading.local()


def _buffer(size: int) -> memoryview:
    """This reader's read buffer, reused across samples as fio reuses its own (a fresh
    1 MiB buffer per sample is an mmap and page faults that fio does not pay)."""
    view: memoryview | None = getattr(_buffers, "view", None)
    if view is None or len(view) != size:
        view = _buffers.view = memoryview(bytearray(size))
    return view


def _read_sample(sample: Sample, read_bytes: int = 1 << 20) -> int:
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
    return n


def samples_of(files: list[Path], access: str) -> list[Sample]:
    """File-level: a sample is a file. Record-level: a sample is one record of a
    record shard (8-byte length header + payload, written by generate(fmt="record")); the
    offsets are read from the headers once, as a TFRecord index would give them."""
    if access == "file":
        return [(str(f), 0, -1) for f in files]
    out: list[Sample] = []
    for f in files:
        size = f.stat().st_size
        with open(f, "rb") as fh:
            off = 0
            while off + RECORD_HEADER.size <= size:
                fh.seek(off)
                (length,) = RECORD_HEADER.unpack(fh.read(RECORD_HEADER.size))
                if off + RECORD_HEADER.size + length > size:
                    raise WorkloadError(f"{f} is not a record shard (access = \"record\" "
                                        "needs format = \"record\")")
                out.append((str(f), off + RECORD_HEADER.size, length))
                off += RECORD_HEADER.size + length
        if not out or out[-1][0] != str(f):
            raise WorkloadError(f"{f} is not a record shard (access = \"record\" needs "
                                "format = \"record\")")
    return out


PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In a forked reader: have the kernel SIGKILL us when the loader's process dies, so
    a killed run leaves no reader process behind (reading, or holding a mount busy)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0)


@dataclass
class Step:
    index: int
    wait_s: float
    compute_s: float
    bytes: int
    samples: int


@dataclass
class LoaderRun:
    steps: list[Step] = field(default_factory=list)
    error: str | None = None


def run_loader(root: Path, spec: WorkloadSpec, pattern: str = "sample_*") -> LoaderRun:
    """Feed an emulated accelerator from the files under root. Never raises for I/O errors:
    the run reports them (a dead server must not hang or crash the experiment)."""
    files = sorted(root.glob(pattern))
    if not files:
        raise WorkloadError(f"no dataset files under {root}")
    samples = samples_of(files, spec.access)
    rng = random.Random(spec.seed)
    order: list[Sample] = []
    need = spec.steps * spec.batch
    while len(order) < need:
        epoch = list(samples)
        if spec.shuffle:
            rng.shuffle(epoch)
        order.extend(epoch)
    batches = [order[i * spec.batch:(i + 1) * spec.batch] for i in range(spec.steps)]
    run = LoaderRun()
    read = functools.partial(_read_sample, read_bytes=spec.read_kib << 10)
    pool: Executor
    if spec.reader_kind == "process":
        # Forked before any of our threads start (as DataLoader workers are), warmed up so
        # that process start-up is not counted as I/O stall.
        pool = ProcessPoolExecutor(spec.readers, mp_context=multiprocessing.get_context("fork"),
                                   initializer=die_with_parent)
        list(pool.map(abs, range(spec.readers)))
    else:
        pool = ThreadPoolExecutor(max_workers=spec.readers)
    # As torch's DataLoader does: `prefetch` batches are requested ahead, and each batch the
    # accelerator takes is replaced by the next request, so the readers never idle while
    # work is queued. Samples, not batches, are the unit of work: one hand-off per sample.
    pending: collections.deque[list[Future[int]]] = collections.deque()

    def request(i: int) -> None:
        if i < len(batches):
            pending.append([pool.submit(read, sample) for sample in batches[i]])

    try:
        for i in range(spec.prefetch):
            request(i)
        for i in range(spec.steps):
            t0 = time.perf_counter()
            try:
                nbytes = sum(f.result() for f in pending.popleft())
            except OSError as exc:
                run.error = f"{type(exc).__name__}: {exc}"
                break
            wait = time.perf_counter() - t0
            request(i + spec.prefetch)
            t1 = time.perf_counter()
            time.sleep(spec.compute_ms / 1000.0)  # the emulated accelerator
            run.steps.append(Step(i, wait, time.perf_counter() - t1, nbytes, len(batches[i])))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return run


def summarise(run: LoaderRun, spec: WorkloadSpec) -> dict[str, float]:
    """AU %, samples/s, MB/s, stall and epoch time over the steps after warm-up."""
    steps = [s for s in run.steps if s.index >= spec.warmup_steps]
    if not steps:
        return {"au_pct": float("nan"), "samples_per_s": float("nan"),
                "throughput_MB_s": float("nan"), "stall_s": float("nan"),
                "wall_s": float("nan"), "step_wait_median_ms": float("nan")}
    wall = sum(s.wait_s + s.compute_s for s in steps)
    compute = sum(s.compute_s for s in steps)
    return {
        "au_pct": 100.0 * compute / wall if wall > 0 else float("nan"),
        "samples_per_s": sum(s.samples for s in steps) / wall,
        "throughput_MB_s": sum(s.bytes for s in steps) / wall / 1e6,
        "stall_s": sum(s.wait_s for s in steps),
        "wall_s": wall,
        "step_wait_median_ms": 1000 * statistics.median(s.wait_s for s in steps),
    }
