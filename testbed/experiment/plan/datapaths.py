"""Data paths: where a point's training reads come from. One small class per path,
named in one table, REGISTRY (the `data_path` knob's values); a new path is one class
and one entry there.

Each path may act before the workers mount (before_mount: e.g. start the GPU site's cache
daemon) and after (prepare: fill the cache, stage a copy), returning per worker the folder
the loader reads and the preparation time it cost. Everything it sets up is pushed on the
point's teardown stack, so a failing point is torn down fully and the next starts clean.

direct   every epoch reads over the fibre
cache    the kernel NFS client's FS-Cache (fsc mounts + cachefilesd) on the GPU site:
         one pass fills it through the fibre (prep), training then reads it locally
staged   the set is copied to the GPU site before training (prep), then read locally
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from testbed.services.fscache import CacheFiles
from testbed.services.nfs import NfsMount
from testbed.services.stage import StagedCopy

if TYPE_CHECKING:
    from testbed.network.engine import Network


class Point(Protocol):
    """What a data path reads of a point: a knob's value by name (the plan's Point)."""

    def value(self, name: str) -> Any:
        """The point's value of knob `name`."""


@dataclass(frozen=True)
class Prepared:
    """What a worker's loader reads, and what getting it there cost (seconds)."""

    root: Path
    prep_s: float = 0.0


class DataPath:
    """Base class: a direct read of the mount, nothing before or after mounting."""

    name: ClassVar[str] = ""
    fsc: ClassVar[bool] = False  # whether mounts need the `fsc` option

    def before_mount(self, net: Network, point: Point, stack: ExitStack) -> None:
        """Set up what the mounts need (nothing by default)."""

    def prepare(self, net: Network, point: Point, mounts: list[NfsMount],
                stack: ExitStack) -> list[Prepared]:
        """Per worker, the folder the loader reads and its preparation time."""
        return [Prepared(m.path) for m in mounts]


def drop_caches() -> None:
    """Drop the kernel's page, dentry and inode caches: the next reads are cold."""
    with open("/proc/sys/vm/drop_caches", "w") as fh:
        fh.write("3")


def read_all(root: Path) -> float:
    """Read every file under root once, in order; seconds taken."""
    t0 = time.monotonic()
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        with open(f, "rb", buffering=0) as fh:
            while fh.read(1 << 20):
                pass
    return time.monotonic() - t0


class Direct(DataPath):
    """Every epoch reads over the fibre."""

    name = "direct"


class Cache(DataPath):
    """A fresh FS-Cache per point; one pass per worker fills it through the fibre."""

    name = "cache"
    fsc = True

    def before_mount(self, net: Network, point: Point, stack: ExitStack) -> None:
        """Start cachefilesd on a new cache volume (fsc mounts need it first)."""
        stack.enter_context(CacheFiles(net, size_mib=int(point.value("cache_mib"))))

    def prepare(self, net: Network, point: Point, mounts: list[NfsMount],
                stack: ExitStack) -> list[Prepared]:
        """Fill every worker's cache volume in parallel, then drop the page cache so
        training reads the cache, not memory."""
        with ThreadPoolExecutor(len(mounts)) as pool:
            times = list(pool.map(lambda m: read_all(m.path), mounts))
        drop_caches()
        return [Prepared(m.path, t) for m, t in zip(mounts, times)]


class Staged(DataPath):
    """A copy of the set on the GPU site, made before training."""

    name = "staged"

    def prepare(self, net: Network, point: Point, mounts: list[NfsMount],
                stack: ExitStack) -> list[Prepared]:
        """Copy the set to each worker's local folder (in parallel); removed at teardown."""
        copies = [StagedCopy(net, m.worker, m.path, int(point.value("stage_parallel"))) for m in mounts]
        for c in copies:
            stack.callback(c.remove)
        with ThreadPoolExecutor(len(copies)) as pool:
            results = list(pool.map(lambda c: c.stage(), copies))
        return [Prepared(c.path, r.seconds) for c, r in zip(copies, results)]


REGISTRY: dict[str, type[DataPath]] = {cls.name: cls for cls in (Direct, Cache, Staged)}
