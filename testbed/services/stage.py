"""The pre-staged data path: copy the training set from the NFS mount to the GPU site's
local storage before training, and report how long that took.

This is what sites without a cache do (rsync/cp/fpsync to local NVMe before a job): the
copy crosses the fibre once, training then reads locally. Its cost is the staging time,
which an experiment reports next to the training time. Files are copied by `parallel`
threads (as parallel copy tools do, to keep several reads in flight over a long RTT); the
local copy lives in the run's folder (tmpfs here, standing in for local NVMe) and is
removed at teardown.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from testbed.errors import ServiceError
from testbed.network.engine import Network


@dataclass(frozen=True)
class StageResult:
    """What staging copied and how long it took."""
    files: int
    bytes: int
    seconds: float

    @property
    def MB_s(self) -> float:
        """The copy's rate (MB/s)."""
        return self.bytes / 1e6 / self.seconds if self.seconds > 0 else float("nan")


def copy_tree(src: Path, dest: Path, parallel: int = 4,
              on_file: Callable[[int], None] | None = None) -> StageResult:
    """Copy every regular file under src to dest (same relative paths), `parallel` at once."""
    if parallel < 1:
        raise ServiceError(f"staging: parallel must be >= 1, got {parallel}")
    files = sorted(p for p in src.rglob("*") if p.is_file())
    if not files:
        raise ServiceError(f"staging: no files under {src}")
    for d in {f.parent for f in files}:
        (dest / d.relative_to(src)).mkdir(parents=True, exist_ok=True)

    def one(f: Path) -> int:
        target = dest / f.relative_to(src)
        try:
            shutil.copyfile(f, target)
        except OSError as exc:
            raise ServiceError(f"staging {f} -> {target}: {exc.strerror or exc}") from None
        size = target.stat().st_size
        if on_file:
            on_file(size)
        return size

    t0 = time.monotonic()
    with ThreadPoolExecutor(parallel) as pool:
        total = sum(pool.map(one, files))
    return StageResult(len(files), total, time.monotonic() - t0)


class StagedCopy:
    """A worker's local copy of the training set, staged from its NFS mount."""

    def __init__(self, net: Network, worker: str, source: Path, parallel: int = 4) -> None:
        self.net = net
        self.worker = worker
        self.source = source
        self.parallel = parallel
        self.path = net.run_dir / f"stage-{worker}"
        self.result: StageResult | None = None

    def stage(self, on_file: Callable[[int], None] | None = None) -> StageResult:
        """Copy the set into a fresh scratch folder of the run; returns files, bytes, time."""
        self.remove()
        self.path = self.net.scratch(f"stage-{self.worker}")
        self.result = copy_tree(self.source, self.path, self.parallel, on_file)
        return self.result

    def remove(self) -> None:
        """Delete the local copy (idempotent)."""
        self.net.remove_scratch(self.path)
