"""Checkpoints as DLIO's checkpoint-only workflow writes and reads them (MLPerf Storage
v2.0's checkpointing benchmark), rank by rank, under a folder. Knows nothing of NFS or
namespaces: it writes and reads files under a path.

write        one rank's files of checkpoint N (DLIO's names, under global_epoch1_stepN/)
             in transfer_size writes, then fsync; the time writing and the time in
             fsync/close apart; a blake2b digest of the content. An I/O error
             (EIO, ENOSPC, a soft mount timing out) raises WorkloadError; the partial files
             of that checkpoint are REMOVED (the message names any that could not be).
drop_cache   POSIX_FADV_DONTNEED on every file (after fsync the pages are clean): the
             next read crosses the fibre, as MLPerf's "clear the cache" before reading.
read_back    reads the files back (time, digest) and compares every byte with what
             was written: the first difference, a missing or short file is a one-line
             problem.
verify       a write and its read-back: None, or the one-line reason the checkpoint failed.
run_checkpoints  DLIO's loop for several ranks (threads or processes, one per rank):
             num_write times {compute time_between_checkpoints; barrier; write}, caches
             dropped, num_read times {compute; barrier; read back}. A failed checkpoint
             is a result with ok False and its reason, never counted as written.
summarise    the slowest rank per checkpoint (MLPerf: duration the max over ranks,
             throughput the min), and the training time lost to blocking writes.

Content: units of UNIT bytes, each a header (magic, seed, rank, checkpoint, file, offset)
then a block drawn once per (seed, rank, checkpoint, file): cheap to make (a copy per
byte, as torch.save's serialisation of tensors in memory), compared byte for byte as it
is read back (a memcmp), and a unit found in the wrong place says where it came from.

Timing is wall time split into contiguous laps: nothing between two laps goes untimed,
so the page cache's writeback and the client's read-ahead, which run in the background,
are always inside a measured interval (time counted only inside the calls would let
bytes cross the fibre unmeasured). The blake2b digests (hashing costs ~3 ms/MiB of CPU,
as much as the fibre's time at 1 Gbit/s) are computed outside the timed laps, from the
content: a read-back that matched byte for byte has the written content's digest.
"""

from __future__ import annotations

import errno
import hashlib
import multiprocessing
import os
import queue
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from testbed.errors import SpecError, WorkloadError
from testbed.workload.checkpoint_size import ShardFile, folder_of, scaled, zero3_files
from testbed.workload.loader import die_with_parent

UNIT = 64 << 10
HEADER = struct.Struct("<8sQQQQQ")  # magic, seed, rank, checkpoint index, file number, offset
MAGIC = b"apnckpt1"
DIGEST_BYTES = 32
RANK_KINDS = ("thread", "process")
STALL_TIMEOUT_S = 300.0  # a rank that neither finishes nor fails in this time fails the run
FAILED_GRACE_S = 10.0  # once a rank failed, the others' time to stop before they are killed
PHASES = ("write", "read")


class Pattern:
    """The content of one file of one rank's checkpoint, at any offset."""

    def __init__(self, seed: int, rank: int, index: int, file_no: int) -> None:
        self.ident = (seed, rank, index, file_no)
        self.block = memoryview(np.random.default_rng(self.ident).bytes(UNIT))

    def fill(self, view: memoryview, offset: int) -> None:
        """Write the content of bytes [offset, offset + len(view)) into view."""
        pos, n = 0, len(view)
        while pos < n:
            unit, within = divmod(offset + pos, UNIT)
            take = min(UNIT - within, n - pos)
            view[pos:pos + take] = self.block[within:within + take]
            if within < HEADER.size:
                head = HEADER.pack(MAGIC, *self.ident, unit * UNIT)
                k = min(HEADER.size - within, take)
                view[pos:pos + k] = head[within:within + k]
            pos += take


def where_from(unit: bytes) -> str:
    """What a unit's header says it is ('' when it is not one of ours)."""
    if len(unit) < HEADER.size or unit[:len(MAGIC)] != MAGIC:
        return ""
    _, seed, rank, index, file_no, offset = HEADER.unpack(unit[:HEADER.size])
    return f"rank {rank}'s checkpoint {index}, file {file_no}, offset {offset}, seed {seed}"


@dataclass(frozen=True)
class WriteResult:
    """One rank's checkpoint written and flushed. write_s: the checkpoint folder's mkdir,
    each file's open and writes; fsync_s: each file's fsync and close (the two add up to
    the write's wall time); wall_s: that and the digest; digest: blake2b of the content."""

    rank: int
    index: int
    nbytes: int
    write_s: float
    fsync_s: float
    wall_s: float
    digest: str
    files: tuple[str, ...]

    @property
    def seconds(self) -> float:
        """What the training waits for: write and flush."""
        return self.write_s + self.fsync_s

    @property
    def MB_s(self) -> float:  # noqa: N802 (units in the name)
        """Throughput of the write and flush (1e6 bytes/s)."""
        return self.nbytes / self.seconds / 1e6 if self.seconds > 0 else float("nan")


@dataclass(frozen=True)
class ReadResult:
    """One rank's checkpoint read back: read_s its wall time (opens, reads and the
    comparison), the problem found (None when every byte is what was written) and the
    digest of what was read ('' when it differed)."""

    rank: int
    index: int
    nbytes: int
    read_s: float
    wall_s: float
    digest: str
    problem: str | None = None

    @property
    def MB_s(self) -> float:  # noqa: N802
        """Throughput of the read (1e6 bytes/s)."""
        return self.nbytes / self.read_s / 1e6 if self.read_s > 0 else float("nan")


def _layout(rank: int, size_bytes: int,
            files: Sequence[ShardFile] | None) -> tuple[ShardFile, ...]:
    """The rank's files holding size_bytes: DLIO's names and proportions when given,
    else the two files of a ZeRO-3 rank (see checkpoint_size.zero3_files)."""
    if not isinstance(size_bytes, int) or isinstance(size_bytes, bool) or size_bytes < 1:
        raise SpecError(f"checkpoint size: {size_bytes!r} bytes; must be an integer >= 1")
    return zero3_files(rank, size_bytes) if files is None else scaled(tuple(files), size_bytes)


def _check_transfer(transfer_size: int) -> None:
    if not isinstance(transfer_size, int) or isinstance(transfer_size, bool) or transfer_size < 1:
        raise SpecError(f"transfer_size: {transfer_size!r}; must be an integer >= 1 (bytes)")


class _Laps:
    """Wall time split into contiguous laps by kind: each lap runs from the end of the
    previous one, so no moment between the first and the last goes untimed."""

    def __init__(self) -> None:
        self.start = self.mark = time.perf_counter()
        self.spent: dict[str, float] = {}

    def lap(self, kind: str) -> None:
        """The time since the last lap, added to `kind`'s."""
        now = time.perf_counter()
        self.spent[kind] = self.spent.get(kind, 0.0) + now - self.mark
        self.mark = now

    def get(self, kind: str) -> float:
        """Seconds of `kind` so far."""
        return self.spent.get(kind, 0.0)


def write(folder: str | Path, rank: int, size_bytes: int, seed: int, transfer_size: int,
          fsync: bool = True, *, index: int = 1,
          files: Sequence[ShardFile] | None = None) -> WriteResult:
    """Write rank `rank`'s files of checkpoint `index` (size_bytes in all, in files named
    and proportioned as `files`, default a ZeRO-3 rank's two) under
    folder/global_epoch1_step<index>/.

    Returns the WriteResult; raises WorkloadError (one line) when an I/O error cuts the
    write off, after removing the partial files of this checkpoint; SpecError for bad
    arguments."""
    _check_transfer(transfer_size)
    layout = _layout(rank, size_bytes, files)
    where = Path(folder) / folder_of(index)
    done: list[Path] = []
    buf = memoryview(bytearray(transfer_size))
    laps = _Laps()
    try:
        _mkdir_step(where)
        for file_no, shard in enumerate(layout):
            path = where / shard.name
            done.append(path)
            _write_file(path, shard.nbytes, Pattern(seed, rank, index, file_no), buf,
                        laps, fsync)
    except OSError as exc:
        raise WorkloadError(f"checkpoint {index} rank {rank}: writing "
                            f"{done[-1].name if done else where}: {_reason(exc)}; "
                            f"{_remove(done)}") from None
    digest = content_digest(layout, seed, rank, index)
    return WriteResult(rank, index, sum(s.nbytes for s in layout), laps.get("write"),
                       laps.get("fsync"), time.perf_counter() - laps.start, digest,
                       tuple(str(p) for p in done))


def content_digest(layout: Sequence[ShardFile], seed: int, rank: int, index: int) -> str:
    """blake2b of a rank's checkpoint content, file after file (what write() writes)."""
    digest = hashlib.blake2b(digest_size=DIGEST_BYTES)
    buf = memoryview(bytearray(16 * UNIT))
    for file_no, shard in enumerate(layout):
        pattern = Pattern(seed, rank, index, file_no)
        for off in range(0, shard.nbytes, len(buf)):
            chunk = buf[:min(len(buf), shard.nbytes - off)]
            pattern.fill(chunk, off)
            digest.update(chunk)
    return digest.hexdigest()


def make_folder(path: str | Path) -> None:
    """Create a folder and its parents from the top down, a folder that exists (made by
    another client meanwhile) being fine: DLIO's create_namespace, done by every rank
    before its first checkpoint.

    Never looks a name up before creating it: an NFS client caches a lookup that found
    nothing, and trusts it while the parent's attributes are cached, even after its own
    mkdir of that name answered EEXIST (measured with two clients at 1,000 km: Python's
    mkdir(parents=True, exist_ok=True), which tries the deepest folder first, failed with
    EEXIST, and the folder stayed invisible to that client for 60-90 s)."""
    p = Path(path).absolute()
    for level in [*reversed(p.parents), p]:
        try:
            os.mkdir(level)
        except FileExistsError:
            pass


def _mkdir_step(where: Path) -> None:
    """The checkpoint's own folder (DLIO's create_node, timed: one round trip on NFS),
    made by whichever rank comes first; its parents too when they are missing."""
    try:
        os.mkdir(where)
    except FileExistsError:
        pass
    except FileNotFoundError:
        make_folder(where)  # one client alone: nothing cached can be stale


def _write_file(path: Path, nbytes: int, pattern: Pattern, buf: memoryview, laps: _Laps,
                fsync: bool) -> None:
    """One file in len(buf) writes (a short write is continued), then fsync and close
    (close's own flush when fsync is off)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        off = 0
        while off < nbytes:
            chunk = buf[:min(len(buf), nbytes - off)]
            pattern.fill(chunk, off)
            sent = 0
            while sent < len(chunk):
                n = os.write(fd, chunk[sent:])
                if n <= 0:
                    raise OSError(errno.EIO, f"write returned {n} at byte {off + sent}")
                sent += n
            off += len(chunk)
        laps.lap("write")
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
        laps.lap("fsync")


def _reason(exc: OSError) -> str:
    """An OSError in a few words: its errno's name and text."""
    name = errno.errorcode.get(exc.errno or 0, "")
    text = exc.strerror or str(exc)
    return f"{name} ({text})" if name else text


def _remove(paths: list[Path]) -> str:
    """Remove a cut-off checkpoint's files; say what became of them."""
    left = []
    for p in paths:
        try:
            p.unlink(missing_ok=True)
        except OSError as exc:
            left.append(f"{p.name} ({_reason(exc)})")
    return "partial files removed" if not left else \
        f"partial files NOT removed: {', '.join(left)}"


def drop_cache(path: str | Path) -> int:
    """Drop a file's pages, or every file's under a folder, from the page cache
    (POSIX_FADV_DONTNEED; pages still dirty stay); returns how many files."""
    p = Path(path)
    targets = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file())
    for f in targets:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return len(targets)


def read_back(folder: str | Path, rank: int, size_bytes: int, seed: int, transfer_size: int,
              *, index: int = 1, files: Sequence[ShardFile] | None = None) -> ReadResult:
    """Read rank `rank`'s checkpoint `index` back in transfer_size reads and compare each
    byte with what write() wrote (same arguments). Returns the ReadResult (problem set
    for a missing, short, long or differing file); WorkloadError on an I/O error."""
    _check_transfer(transfer_size)
    layout = _layout(rank, size_bytes, files)
    where = Path(folder) / folder_of(index)
    got, exp = bytearray(transfer_size), bytearray(transfer_size)
    laps, total, problem = _Laps(), 0, None
    try:
        for file_no, shard in enumerate(layout):
            n, problem = _read_file(where / shard.name, shard.nbytes,
                                    Pattern(seed, rank, index, file_no), got, exp)
            total += n
            if problem:
                break
    except OSError as exc:
        raise WorkloadError(f"checkpoint {index} rank {rank}: reading: {_reason(exc)}") from None
    laps.lap("read")
    digest = "" if problem else content_digest(layout, seed, rank, index)
    return ReadResult(rank, index, total, laps.get("read"), time.perf_counter() - laps.start,
                      digest, problem)


def _read_file(path: Path, nbytes: int, pattern: Pattern, got: bytearray,
               exp: bytearray) -> tuple[int, str | None]:
    """Read one file through; (bytes read, problem or None). Buffers are compared as
    bytearrays (memcmp; memoryviews compare element by element, 30x slower)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return 0, f"{path.name} is missing"
    try:
        off = 0
        while True:
            n = os.readv(fd, [got])
            if n == 0:
                break
            if off < nbytes:
                want = min(n, nbytes - off)
                pattern.fill(memoryview(exp)[:want], off)
                if (got != exp) if want == len(got) else (got[:want] != exp[:want]):
                    return off + n, _difference(path, off, got[:want], exp[:want])
            off += n
    finally:
        os.close(fd)
    if off != nbytes:
        return off, f"{path.name} is {off} bytes, {nbytes} were written"
    return off, None


def _difference(path: Path, off: int, got: bytearray, exp: bytearray) -> str:
    """Where two equal-length buffers first differ, and what the unit there says it is."""
    a, b = np.frombuffer(got, np.uint8), np.frombuffer(exp, np.uint8)
    first = off + int(np.flatnonzero(a != b)[0])
    start = first - first % UNIT - off
    origin = where_from(bytes(got[start:start + HEADER.size])) if start >= 0 else ""
    return (f"{path.name}: byte {first} differs from what was written"
            + (f" (the unit there is {origin})" if origin else ""))


def verify(written: WriteResult | None, read: ReadResult) -> str | None:
    """None when the read-back holds exactly what was written; else the reason, one line."""
    if read.problem:
        return read.problem
    if written is None:
        return None  # compared byte by byte with the content itself
    if read.nbytes != written.nbytes:
        return f"read {read.nbytes} bytes, {written.nbytes} were written"
    if read.digest != written.digest:
        return f"digest of the read-back {read.digest[:16]} != written {written.digest[:16]}"
    return None


def training_time_lost_pct(write_s: float, interval_s: float) -> float:
    """The share of wall time the training waits for checkpoints: each period is
    interval_s of training compute then write_s of blocking write (every rank waits for
    the slowest), so 100 x write_s / (interval_s + write_s)."""
    if write_s < 0 or interval_s < 0 or write_s + interval_s <= 0:
        raise SpecError(f"write_s {write_s!r} and interval_s {interval_s!r}: >= 0, not both 0")
    return 100.0 * write_s / (interval_s + write_s)


@dataclass(frozen=True)
class CheckpointResult:
    """One rank's checkpoint in one phase ("write" or "read"): its times, its bytes (0
    when it failed: a failed checkpoint is never counted) and the reason it failed."""

    rank: int
    index: int
    phase: str
    nbytes: int
    write_s: float = 0.0
    fsync_s: float = 0.0
    read_s: float = 0.0
    ok: bool = True
    reason: str = ""

    @property
    def seconds(self) -> float:
        """The phase's blocking time: write + fsync, or read."""
        return self.write_s + self.fsync_s + self.read_s

    @property
    def MB_s(self) -> float:  # noqa: N802
        """Throughput (1e6 bytes/s); 0 for a failed checkpoint."""
        return self.nbytes / self.seconds / 1e6 if self.ok and self.seconds > 0 else 0.0


@dataclass(frozen=True)
class CheckpointPlan:
    """What every rank does: `layouts[r]` are rank r's files (names, bytes); checkpoints
    written, then read, with interval_s of emulated compute before each; a rank that
    neither finishes nor fails a checkpoint within stall_s fails the run."""

    layouts: tuple[tuple[ShardFile, ...], ...]
    seed: int = 0
    transfer_size: int = 1 << 20
    num_write: int = 1
    num_read: int = 1
    interval_s: float = 0.0
    fsync: bool = True
    stall_s: float = STALL_TIMEOUT_S  # a checkpoint not done in this time fails the run

    def __post_init__(self) -> None:
        _check_transfer(self.transfer_size)
        if not self.layouts or any(sum(f.nbytes for f in lay) < 1 for lay in self.layouts):
            raise SpecError("checkpoint plan: every rank needs files of >= 1 byte")
        if min(self.num_write, self.num_read) < 0:
            raise SpecError("num_checkpoints_write and num_checkpoints_read must be >= 0")
        if 0 < self.num_write < self.num_read:  # DLIO's own rule
            raise SpecError(f"num_checkpoints_read {self.num_read} is more than "
                            f"num_checkpoints_write {self.num_write}")
        if not self.interval_s >= 0:
            raise SpecError(f"time_between_checkpoints {self.interval_s!r}: must be >= 0")
        if not self.stall_s > 0:
            raise SpecError(f"stall_s {self.stall_s!r}: must be > 0")

    def args(self, rank: int) -> tuple[Any, ...]:
        """(rank, size_bytes, seed, transfer_size) for write/read_back, files by keyword."""
        lay = self.layouts[rank]
        return rank, sum(f.nbytes for f in lay), self.seed, self.transfer_size


def even_layouts(ranks: int, size_bytes: int) -> tuple[tuple[ShardFile, ...], ...]:
    """Every rank the two files of a ZeRO-3 rank holding size_bytes (llama3_8b's shape)."""
    return tuple(zero3_files(r, size_bytes) for r in range(ranks))


def _rank_loop(folder: Path, plan: CheckpointPlan, rank: int, barrier: Any,
               put: Callable[[CheckpointResult], None]) -> None:
    """One rank's whole run (DLIO's _checkpoint_write then _checkpoint_read)."""
    written: dict[int, WriteResult] = {}
    try:
        make_folder(folder)
        for i in range(1, plan.num_write + 1):
            _sync(plan, barrier)
            w = write(folder, *plan.args(rank), plan.fsync, index=i, files=plan.layouts[rank])
            written[i] = w
            put(CheckpointResult(rank, i, "write", w.nbytes, w.write_s, w.fsync_s))
        _drop_reads(folder, plan, rank)
        for i in range(1, plan.num_read + 1):
            _sync(plan, barrier)
            r = read_back(folder, *plan.args(rank), index=i, files=plan.layouts[rank])
            reason = verify(written.get(i), r)
            put(CheckpointResult(rank, i, "read", 0 if reason else r.nbytes, read_s=r.read_s,
                                 ok=reason is None, reason=reason or ""))
    except Exception as exc:  # noqa: BLE001 (any failure must release the other ranks)
        phase = "read" if len(written) == plan.num_write else "write"
        why = "a barrier broke: another rank failed or stalled" \
            if isinstance(exc, threading.BrokenBarrierError) else \
            str(exc) if isinstance(exc, WorkloadError) else f"{type(exc).__name__}: {exc}"
        put(CheckpointResult(rank, 0, phase, 0, ok=False, reason=why))
        barrier.abort()


def _drop_reads(folder: Path, plan: CheckpointPlan, rank: int) -> None:
    """Drop the rank's files of every checkpoint it will read from the page cache."""
    for i in range(1, plan.num_read + 1):
        for shard in plan.layouts[rank]:
            path = folder / folder_of(i) / shard.name
            if path.exists():
                drop_cache(path)


def _sync(plan: CheckpointPlan, barrier: Any) -> None:
    """DLIO's compute(time_between_checkpoints) then barrier before each checkpoint."""
    time.sleep(plan.interval_s)
    barrier.wait(timeout=plan.stall_s + plan.interval_s)


@dataclass
class CheckpointRun:
    """Every rank's results, and the first failure's reason (None when none failed)."""

    results: list[CheckpointResult] = field(default_factory=list)
    error: str | None = None

    def of(self, phase: str, index: int) -> list[CheckpointResult]:
        """The ranks' results of one checkpoint in one phase."""
        return [r for r in self.results if r.phase == phase and r.index == index]


def run_checkpoints(folder: str | Path | Sequence[str | Path], plan: CheckpointPlan,
                    kind: str = "thread") -> CheckpointRun:
    """Run the plan's ranks at once, one thread or forked process each (kind), under
    folder (one for all, or one per rank: each rank's worker has its own mount). Never
    raises for I/O errors: a failed rank ends its run, the others stop at their next
    barrier, and the run says why (CheckpointRun.error)."""
    if kind not in RANK_KINDS:
        raise SpecError(f"rank kind {kind!r}: one of {', '.join(RANK_KINDS)}")
    folders = [Path(folder)] * len(plan.layouts) if isinstance(folder, (str, Path)) \
        else [Path(f) for f in folder]
    if len(folders) != len(plan.layouts):
        raise SpecError(f"{len(folders)} folders for {len(plan.layouts)} ranks")
    deadline_s = (plan.num_write + plan.num_read + 1) * (plan.stall_s + plan.interval_s)
    run = CheckpointRun()
    ranks = len(plan.layouts)
    runner = _run_threads if kind == "thread" else _run_processes
    stuck = runner(folders, plan, ranks, run.results.append, deadline_s)
    failed = [r for r in run.results if not r.ok]
    run.error = failed[0].reason if failed else \
        f"ranks {stuck} did not finish within {deadline_s:g} s" if stuck else None
    run.results.sort(key=lambda r: (PHASES.index(r.phase), r.index, r.rank))
    return run


def _run_threads(folders: list[Path], plan: CheckpointPlan, ranks: int,
                 put: Callable[[CheckpointResult], None], deadline_s: float) -> list[int]:
    """Ranks as threads; returns the ranks still running at the deadline."""
    barrier, lock = threading.Barrier(ranks), threading.Lock()

    def locked(r: CheckpointResult) -> None:
        with lock:
            put(r)
    threads = [threading.Thread(target=_rank_loop, args=(folders[r], plan, r, barrier, locked),
                                name=f"ckpt-rank-{r}", daemon=True) for r in range(ranks)]
    for t in threads:
        t.start()
    end = time.monotonic() + deadline_s
    for t in threads:
        t.join(max(0.0, end - time.monotonic()))
    return [r for r, t in enumerate(threads) if t.is_alive()]


def _run_processes(folders: list[Path], plan: CheckpointPlan, ranks: int,
                   put: Callable[[CheckpointResult], None], deadline_s: float) -> list[int]:
    """Ranks as forked processes (killed with the parent); returns those killed at the
    deadline, or FAILED_GRACE_S after a rank failed (one stuck in a hard mount's I/O
    would otherwise hold the point to the deadline)."""
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(ranks), ctx.Queue()
    procs = [ctx.Process(target=_process_main, args=(folders[r], plan, r, barrier, results),
                         name=f"ckpt-rank-{r}", daemon=True) for r in range(ranks)]
    for p in procs:
        p.start()
    end, stuck, failed = time.monotonic() + deadline_s, [], []

    def noted(r: CheckpointResult) -> None:
        """Pass a result on; a failure leaves the others FAILED_GRACE_S to stop."""
        if not r.ok and not failed:
            failed.append(r)
        put(r)
    while any(p.is_alive() for p in procs) and time.monotonic() < end:
        _drain_queue(results, noted, 0.2)
        if failed:  # min: the grace counts from the first failure seen
            end = min(end, time.monotonic() + FAILED_GRACE_S)
    for r, p in enumerate(procs):
        if p.is_alive():
            p.kill()  # our own child, by its handle
            stuck.append(r)
        p.join()
    _drain_queue(results, put, 0.0)
    return stuck


def _process_main(folder: Path, plan: CheckpointPlan, rank: int, barrier: Any,
                  results: Any) -> None:
    """A forked rank: dies with its parent, sends each result back, then flushes."""
    die_with_parent()
    _rank_loop(folder, plan, rank, barrier, results.put)
    results.close()
    results.join_thread()


def _drain_queue(results: Any, put: Callable[[CheckpointResult], None],
                 wait_s: float) -> None:
    """Move every result waiting on the queue to put (waiting up to wait_s for one)."""
    try:
        put(results.get(timeout=wait_s) if wait_s > 0 else results.get_nowait())
        while True:
            put(results.get_nowait())
    except queue.Empty:
        return


def summarise(run: CheckpointRun, interval_s: float) -> dict[str, float]:
    """Per phase, the mean over checkpoints of the slowest rank's duration (s) and of the
    lowest rank throughput (MB/s), as MLPerf reports them; the bytes of one checkpoint
    over all ranks (MB); the training time lost to writes; the failed checkpoints."""
    out: dict[str, float] = {"failed": float(sum(not r.ok for r in run.results))}
    for phase in PHASES:
        indices = sorted({r.index for r in run.results if r.phase == phase and r.index > 0})
        shares = [run.of(phase, i) for i in indices]
        shares = [s for s in shares if s and all(r.ok for r in s)]
        durations = [max(r.seconds for r in s) for s in shares]
        out[f"{phase}_duration_s"] = float(np.mean(durations)) if durations else float("nan")
        out[f"{phase}_MB_s"] = float(np.mean([min(r.MB_s for r in s) for s in shares])) \
            if shares else float("nan")
        out[f"{phase}_checkpoint_MB"] = sum(r.nbytes for r in shares[0]) / 1e6 \
            if shares else float("nan")
    write_s = out["write_duration_s"]
    out["training_time_lost_pct"] = training_time_lost_pct(write_s, interval_s) \
        if write_s == write_s else float("nan")
    return out
