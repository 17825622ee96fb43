"""The GPU site's local read-through cache: the kernel's FS-Cache with cachefilesd.

Why this cache: it is the one the kernel NFS client itself offers (`mount -o fsc`), sold by
every Linux distribution for exactly this case (read-mostly data on a far NFS server), and
it keeps the real client in the data path: the first epoch reads through the fibre and
fills the cache, later epochs read the cache on the GPU site's local disk. Each worker
mounts with its own cache volume (fsc=<prefix>-<worker>), as each GPU server would.

CacheFiles  cachefilesd for one run. Its cache lives on a local filesystem of the GPU site:
            a folder the user names (a real disk: ext4/xfs, which cachefiles needs), or by
            default an ext4 filesystem of size_mib in a sparse image file of the run's,
            loop-mounted (a dedicated cache disk of known size; tmpfs cannot back
            cachefiles). Started before the fsc mounts, stopped after them (the kernel
            withdraws the cache when the daemon closes /dev/cachefiles); mount, image and
            folder are removed at teardown, and by `testbed clean` after a crash.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import subprocess
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from testbed import launch
from testbed.errors import ServiceError
from testbed.network.engine import Network

log = logging.getLogger(__name__)

DEVICE = Path("/dev/cachefiles")
STATS = Path("/proc/fs/fscache/stats")
# After cachefilesd stops, the kernel withdraws the cache in a work queue and holds its
# files until then: umount says "target is busy" for that long (seen on the virtual clock,
# experiments/poc.toml, 2026-12-05: the image left mounted then filled the run's memory).
UMOUNT_WAIT_S = 10.0


def _run(argv: list[str], what: str) -> None:
    """Run a tool through the launcher (bounded); ServiceError with its last line."""
    launch.run(argv, timeout=120, what=what)


def _load_module(module: str, device: Path, what: str) -> None:
    """Load `module` unless `device` (which it provides) exists already."""
    if device.exists():
        return
    proc = launch.run(["modprobe", module], timeout=30, what=f"modprobe {module}", check=False)
    if proc.returncode != 0 or not device.exists():
        raise ServiceError(f"the kernel has no {what}: "
                           f"{(proc.stderr or f'no {device}').strip()}")


def _has_user_xattrs(path: Path) -> bool:
    try:
        os.setxattr(path, "user.apn-testbed", b"1")
        os.removexattr(path, "user.apn-testbed")
        return True
    except OSError as exc:
        if exc.errno in (errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM):
            return False
        raise


def _remove(path: Path) -> None:
    """Remove a folder or file we created in a user's cache folder."""
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def fscache_stats() -> dict[str, int]:
    """The kernel's FS-Cache counters (/proc/fs/fscache/stats) as flat name -> value."""
    out: dict[str, int] = {}
    try:
        text = STATS.read_text()
    except OSError:
        return out
    for line in text.splitlines():
        head, _, rest = line.partition(":")
        for item in rest.split():
            key, eq, value = item.partition("=")
            if eq and value.isdigit():
                out[f"{head.strip()}.{key}"] = int(value)
    return out


def _fs_used(path: Path) -> int:
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


class CacheFiles:
    """cachefilesd serving one run's FS-Cache (see the module docstring)."""

    def __init__(self, net: Network, cache_dir: str | Path | None = None,
                 size_mib: int = 1024) -> None:
        if size_mib < 64:
            raise ServiceError(f"cache size_mib must be >= 64, got {size_mib}")
        self.net = net
        self.wanted_dir = Path(cache_dir) if cache_dir else None
        self.size_mib = size_mib
        self.dir: Path | None = None
        self.proc: subprocess.Popen[Any] | None = None
        self._stack = ExitStack()  # this cache's own teardown (a run may use several)
        self._base_used: int | None = None  # bytes in use on the cache fs at start

    def __enter__(self) -> CacheFiles:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _make_dir(self, folder: Path) -> Path:
        """The cache's filesystem: the user's folder, or an ext4 image of size_mib in the
        run's scratch folder, loop-mounted."""
        if self.wanted_dir is not None:
            self.wanted_dir.mkdir(parents=True, exist_ok=True)
            if not _has_user_xattrs(self.wanted_dir):
                raise ServiceError(f"cache folder {self.wanted_dir} has no user xattrs: "
                                   "cachefiles needs ext4, xfs or btrfs")
            # The user's folder: remove only what cachefilesd adds.
            self._stack.callback(_remove, self.wanted_dir / "cache")
            self._stack.callback(_remove, self.wanted_dir / "graveyard")
            return self.wanted_dir
        image, mnt = folder / "cache.img", folder / "mnt"
        with open(image, "wb") as fh:
            fh.truncate(self.size_mib << 20)  # sparse: memory is used as the cache fills
        _run(["mkfs.ext4", "-q", "-F", "-L", "apn-fscache", str(image)], "mkfs.ext4 cache")
        _load_module("loop", Path("/dev/loop-control"), "loop devices")
        mnt.mkdir()
        # mount -o loop sets up the loop device with autoclear: umount frees it. Recorded
        # before it exists, so a crash in between leaves nothing clean cannot find.
        self.net.state.add_mount(str(mnt))
        self._stack.callback(self._umount, mnt)
        _run(["mount", "-t", "ext4", "-o", "loop,noatime", str(image), str(mnt)],
             "mount the cache filesystem")
        return mnt

    def _umount(self, mnt: Path) -> None:
        """Unmount the cache filesystem if it is mounted (retried while the kernel still
        withdraws the cache, up to UMOUNT_WAIT_S), and forget it."""
        deadline = time.monotonic() + UMOUNT_WAIT_S
        while str(mnt) in Path("/proc/mounts").read_text():
            try:
                _run(["umount", str(mnt)], f"umount {mnt}")
            except ServiceError as e:
                if "busy" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        self.net.state.drop_mount(str(mnt))

    def start(self) -> None:
        """Make the cache filesystem, start cachefilesd and wait until it binds the cache.

        Raises ServiceError when the kernel lacks cachefiles or the daemon fails."""
        self.net.callback(self.close)
        _load_module("cachefiles", DEVICE, "cachefiles (FS-Cache) support")
        if shutil.which("cachefilesd") is None:
            raise ServiceError("cachefilesd not found (Debian package cachefilesd: "
                               "lab/provision)")
        folder = self.net.scratch("fscache")
        self._stack.callback(self.net.remove_scratch, folder)
        self.dir = self._make_dir(folder)
        conf, log_path = folder / "cachefilesd.conf", folder / "cachefilesd.log"
        # Cull only when the cache's filesystem is nearly full (the defaults of Debian's
        # config): a run's dataset is sized to fit.
        conf.write_text(f"dir {self.dir}\ntag {self.net.prefix}\nbrun 10%\nbcull 7%\n"
                        "bstop 3%\nfrun 10%\nfcull 7%\nfstop 3%\n")
        with open(log_path, "w") as log_file:
            self.proc = self.net.procs.popen_raw(["cachefilesd", "-n", "-s", "-f", str(conf)],
                                                 stdout=log_file, stderr=subprocess.STDOUT)
        self._wait_bound(log_path, time.monotonic() + 15)

    def _wait_bound(self, log_path: Path, deadline: float) -> None:
        """cachefilesd creates its cache/ and graveyard/ folders once the kernel accepted
        the cache: wait for them, or raise ServiceError with the daemon's last words."""
        assert self.proc is not None and self.dir is not None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = log_path.read_text().strip().splitlines()[-1:] or ["(no output)"]
                raise ServiceError(f"cachefilesd exited ({self.proc.returncode}): {tail[0]}")
            if (self.dir / "cache").is_dir() and (self.dir / "graveyard").is_dir():
                log.info("FS-Cache active in %s", self.dir)
                self._base_used = _fs_used(self.dir)
                return
            time.sleep(0.05)
        raise ServiceError(f"cachefilesd did not bind the cache in {self.dir} within 15 s")

    def used_bytes(self) -> int:
        """Bytes the cache holds on its filesystem.

        On the run's own cache filesystem: the blocks in use beyond those in use when the
        cache started (statvfs). Objects still in use are unlinked temporary files on
        kernels before the netfs rewrite (Debian 12's 6.1: cachefiles links them in only
        when the cookie is withdrawn), so walking the folder finds nothing while the cache
        fills. In a folder of the user's: the allocated blocks of the files under it."""
        if self.dir is None:
            return 0
        if self.wanted_dir is None and self._base_used is not None:
            return max(0, _fs_used(self.dir) - self._base_used)
        total = 0
        for root, _dirs, files in os.walk(self.dir):
            for name in files:
                try:
                    total += os.lstat(os.path.join(root, name)).st_blocks * 512
                except OSError:
                    pass
        return total

    def stop(self) -> None:
        """Stop the daemon (the kernel withdraws the cache); the cache's files stay."""
        if self.proc is not None:
            self.net.procs.stop(self.proc)
            self.proc = None

    def close(self) -> None:
        """Stop the daemon, then unmount and remove the cache (idempotent)."""
        self.stop()
        self._stack.close()
