"""The lab VM image: Debian 12 with its stock kernel, built from Debian packages only.

One recipe serves two uses:
  - `lab/run --vm CMD` boots REPO/.lab/vm/disk.raw under QEMU (throw-away writes,
    snapshot=on) with the uncompressed kernel and a tiny busybox initrd (vm_boot);
  - `lab/vm-image --box` turns the same disk into a Vagrant box (vm_box: libvirt, qcow2,
    GRUB in the MBR), the one CI gives `vagrant up`.

The root is made by mmdebstrap from the packages `lab/provision --vm --list` names plus what a
bootable Vagrant box needs (vm_rootfs), then `lab/provision --vm --no-venv` runs inside it: the
image IS the provisioned lab VM minus the project's venv. This module builds the image into
REPO/.lab/vm, one build at a time, only when the recipe (vm_recipe) changed.

Only the Python standard library: it runs before any venv exists.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from lab import vm_boot
from lab import vm_rootfs
from lab.build_step import ImageError, Progress, require_tools
from lab.lab_paths import VM_DIR
from lab.vm_recipe import Image, current, recipe_hash

# What a build leaves in the image's folder (moved there from its work folder at the end).
OUTPUTS = ("disk.raw", "vmlinux", "initrd.img", "busybox", "RELEASE", "build.log", "RECIPE")
# The box built from an older image (vm_box): removed when the image is rebuilt.
STALE = ("box", "box.RECIPE")


@contextmanager
def build_lock(vm_dir: Path = VM_DIR) -> Iterator[None]:
    """One build at a time per checkout (a second caller waits, then finds it built)."""
    vm_dir.mkdir(parents=True, exist_ok=True)
    with open(vm_dir / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _boot_files(root: Path, moddir: Path, work: Path) -> None:
    """work/vmlinux, work/initrd.img and work/busybox from the kernel and busybox in the
    root (busybox is kept for the initrds of other suites' kernels: vm_kernel)."""
    release = moddir.name
    (work / "vmlinux").write_bytes(
        vm_boot.uncompressed_kernel((root / "boot" / f"vmlinuz-{release}").read_bytes()))
    busybox = (root / "bin/busybox").read_bytes()
    (work / "busybox").write_bytes(busybox)
    (work / "initrd.img").write_bytes(vm_boot.build_initrd(moddir, busybox))


def _build_in(work: Path, recipe: str, say: Progress) -> None:
    """Every output of a build, in the work folder: root, boot files, disk, stamps."""
    log = work / "build.log"
    say("mmdebstrap: Debian packages into a root")
    root = vm_rootfs.make_root(work, log)
    moddir = vm_rootfs.module_dir(root)
    say(f"kernel {moddir.name}: uncompressed vmlinux and initrd")
    _boot_files(root, moddir, work)
    say("ext4 disk image")
    vm_rootfs.make_disk(root, work / "disk.raw", log)
    shutil.rmtree(root)
    (work / "RELEASE").write_text(moddir.name + "\n")
    (work / "RECIPE").write_text(recipe + "\n")


def _install(work: Path, vm_dir: Path) -> None:
    """Move a finished build's outputs into vm_dir and drop the box of the old image."""
    for name in OUTPUTS:
        os.replace(work / name, vm_dir / name)
    for stale in STALE:
        p = vm_dir / stale
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


def _remove_work(work: Path) -> None:
    """Remove a build's work folder; mmdebstrap may leave bind mounts behind only on
    crashes: unmount them first, never follow them."""
    if work.exists():
        subprocess.run(["umount", "-R", "-l", str(work / "root")], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


def build(vm_dir: Path = VM_DIR, progress: bool = True) -> Image:
    """Build the image into vm_dir (replacing an outdated one) and return it."""
    if os.geteuid() != 0:
        raise ImageError("building the lab VM image needs root (mmdebstrap, device nodes)")
    require_tools("mmdebstrap", "mkfs.ext4", "sfdisk")
    recipe = recipe_hash()
    vm_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="build-", dir=vm_dir))
    say = Progress("lab/vm-image", progress)
    try:
        _build_in(work, recipe, say)
        _install(work, vm_dir)
        say("done")
    except ImageError:
        if (work / "build.log").exists():
            shutil.copy(work / "build.log", vm_dir / "build-failed.log")  # errors point here
        raise
    finally:
        _remove_work(work)
    img = current(vm_dir)
    if img is None:
        raise ImageError(f"built image in {vm_dir} is incomplete")
    return img


def ensure(vm_dir: Path = VM_DIR, progress: bool = True) -> Image:
    """The current image, built first if missing or outdated."""
    img = current(vm_dir)
    if img is not None:
        return img
    with build_lock(vm_dir):
        img = current(vm_dir)
        if img is not None:
            return img
        return build(vm_dir, progress)
