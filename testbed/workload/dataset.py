"""The training set: N files of a given size with deterministic content (seeded per
file), in one of three formats: raw bytes, numpy .npz, or record shards (8-byte length
header + payload per record, TFRecord-like). Generated on the storage side; a sample is a
file or one record of a shard."""

from __future__ import annotations

import hashlib
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

import numpy as np

from testbed import schema
from testbed.errors import SpecError, WorkloadError
from testbed.schema import FORMATS

RECORD_HEADER = struct.Struct("<Q")
# A sample: (path, offset, length); length -1 = the whole file from offset.
Sample = tuple[str, int, int]


@dataclass(frozen=True)
class DatasetSpec:
    """The training set the storage site serves: `files` files of `file_kib` KiB in a
    format (raw bytes, numpy .npz, or length-prefixed record shards with
    `records_per_file` records), content seeded per file."""

    files: int = schema.default("files")
    file_kib: int = schema.default("file_kib")
    format: str = schema.default("format")
    records_per_file: int = schema.default("records_per_file")
    seed: int = schema.default("dataset_seed")

    def __post_init__(self) -> None:
        for field, name in (("files", "files"), ("file_kib", "file_kib"), ("format", "format"),
                            ("records_per_file", "records_per_file"), ("seed", "dataset_seed")):
            object.__setattr__(self, field, schema.check(name, getattr(self, field), field))

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


CHUNK = 4 << 20  # generate and hash in chunks: a 146 MB sample never sits in memory


def _chunks(i: int, size: int, seed: int) -> Iterator[bytes]:
    """File i's payload, deterministic from (seed, i), in chunks of at most CHUNK bytes."""
    rng = np.random.default_rng((seed, i))
    for start in range(0, size, CHUNK):
        yield rng.integers(0, 256, min(CHUNK, size - start), dtype=np.uint8).tobytes()


class _Stream:
    """Reads a chunk iterator as a byte stream (for records that straddle chunks),
    without copying a chunk per record."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks, self.buf, self.pos = chunks, b"", 0

    def read(self, n: int) -> bytes:
        """The next n bytes of the stream (fewer at its end)."""
        parts = []
        while n > 0:
            if self.pos >= len(self.buf):
                self.buf, self.pos = next(self.chunks, b""), 0
                if not self.buf:
                    break
            take = self.buf[self.pos:self.pos + n]
            self.pos += len(take)
            n -= len(take)
            parts.append(take)
        return b"".join(parts)


def _write_raw(fh: BinaryIO, chunks: Iterator[bytes], size: int, records: int) -> None:
    for c in chunks:
        fh.write(c)


def _write_npz(fh: BinaryIO, chunks: Iterator[bytes], size: int, records: int) -> None:
    """An .npz (a zip of one uint8 .npy named x), written as it is generated."""
    with zipfile.ZipFile(fh, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        with z.open("x.npy", "w", force_zip64=True) as f:
            np.lib.format.write_array_header_1_0(
                f, {"descr": "|u1", "fortran_order": False, "shape": (size,)})
            for c in chunks:
                f.write(c)


def _write_records(fh: BinaryIO, chunks: Iterator[bytes], size: int, records: int) -> None:
    """`records` length-prefixed records splitting the payload."""
    step = -(-size // max(1, records))
    stream = _Stream(chunks)
    for k in range(0, size, step):
        rec = stream.read(min(step, size - k))
        fh.write(RECORD_HEADER.pack(len(rec)))
        fh.write(rec)


WRITERS: dict[str, Callable[[BinaryIO, Iterator[bytes], int, int], None]] = {
    "raw": _write_raw, "npz": _write_npz, "record": _write_records}


def generate(root: Path, files: int, file_bytes: int, fmt: str = "raw", seed: int = 7,
             records_per_file: int = 8) -> list[Path]:
    """Write `files` files of ~file_bytes under root; returns their paths (skips existing)."""
    if fmt not in FORMATS:
        raise SpecError(f"format: unknown {fmt!r}; known: {', '.join(FORMATS)}")
    schema.check("files", files)
    if file_bytes < 1:
        raise SpecError(f"file_bytes: must be >= 1, got {file_bytes!r}")
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(files):
        path = root / file_name(i, fmt)
        paths.append(path)
        if path.exists():
            continue
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as fh:
            WRITERS[fmt](fh, _chunks(i, file_bytes, seed), file_bytes, records_per_file)
        tmp.rename(path)
    return paths


def expected_digest(i: int, file_bytes: int, seed: int = 7) -> str:
    """The SHA-256 of file i's payload (to check what a worker read)."""
    h = hashlib.sha256()
    for c in _chunks(i, file_bytes, seed):
        h.update(c)
    return h.hexdigest()


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
