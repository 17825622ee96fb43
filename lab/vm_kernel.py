"""Another Debian kernel for the lab VM: `lab/run --vm --kernel SUITE` (e.g. forky, testing).

The lab VM image runs Debian 12's own kernel (6.1, the Vagrant box's). Some features are
newer than that: soft-RoCE devices whose UDP socket lives in their own network namespace
(rxe_ns, so that two namespaces can be RDMA endpoints) are one. This module takes the
linux-image package the suite's linux-image-amd64 points at, verified like lab/fetch-uml
(debian_archive), and unpacks into REPO/.lab/vm/kernels/SUITE: the uncompressed kernel, an
initrd made like the image's (same busybox, same init: vm_boot), and the modules, which the
guest mounts read-only at /usr/lib/modules/RELEASE. The image's user space stays Debian 12's.
Idempotent: nothing is downloaded again while the suite's version is unchanged.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from lab import vm_boot
from lab.build_step import ImageError, run_step
from lab.debian_archive import Archive, ArchiveError
from lab.lab_paths import VM_DIR

MIRROR = os.environ.get("LAB_DEBIAN_MIRROR", "https://deb.debian.org/debian")
KERNELS = VM_DIR / "kernels"

Packages = dict[str, dict[str, str]]  # package name -> its fields in the suite's index


@dataclass(frozen=True)
class Kernel:
    """One suite's kernel as unpacked under KERNELS: what QEMU boots and the modules the
    guest mounts."""

    suite: str
    release: str
    kernel: Path
    initrd: Path
    modules: Path  # the folder of this release's modules


def _load(dest: Path, suite: str) -> Kernel | None:
    """The kernel unpacked in dest, or None if it is missing or incomplete."""
    try:
        release = (dest / "RELEASE").read_text().strip()
    except OSError:
        return None
    k = Kernel(suite, release, dest / "vmlinux", dest / "initrd.img", dest / "modules" / release)
    return k if k.kernel.is_file() and k.initrd.is_file() and k.modules.is_dir() else None


def _depends(fields: dict[str, str], prefix: str) -> list[str]:
    """The package names in a Depends field that start with `prefix` (no alternatives)."""
    return [d.split()[0] for d in fields.get("Depends", "").split(",")
            if d.strip().startswith(prefix) and "|" not in d]


def _kernel_packages(archive: Archive, suite: str) -> tuple[str, Packages, str]:
    """(the linux-image package linux-image-amd64 points at, it and the linux-* packages
    it depends on, "PACKAGE VERSION") in the suite."""
    meta = archive.packages({"linux-image-amd64"}).get("linux-image-amd64")
    if meta is None:
        raise ImageError(f"{suite} has no linux-image-amd64")
    image_pkg = next((d.split()[0] for d in meta.get("Depends", "").split(",")
                      if d.strip().startswith("linux-image-")), None)
    if image_pkg is None:
        raise ImageError(f"linux-image-amd64 in {suite} depends on no kernel")
    fields = archive.packages({image_pkg}).get(image_pkg)
    if fields is None:
        raise ImageError(f"{image_pkg} is not in {suite}")
    # Newer kernels split the image package into linux-base/-binary/-modules-ABI.
    found = archive.packages({image_pkg} | set(_depends(fields, "linux-")))
    return image_pkg, found, f"{image_pkg} {fields['Version']}"


def _kernel_in(root: Path, image_pkg: str) -> tuple[Path, bytes]:
    """(the module folder, the bzImage) of the one kernel unpacked under root."""
    moddirs = [p for base in ("usr/lib/modules", "lib/modules")
               if (root / base).is_dir() for p in (root / base).iterdir()]
    if len(moddirs) != 1:
        raise ImageError(f"{image_pkg}: expected one module folder, found "
                         f"{[p.name for p in moddirs]}")
    release = moddirs[0].name
    # /boot/vmlinuz-RELEASE, or (newer packaging) the module folder's vmlinuz.
    images = [p for p in (root / "boot" / f"vmlinuz-{release}", moddirs[0] / "vmlinuz")
              if p.is_file()]
    if not images:
        raise ImageError(f"{image_pkg}: no vmlinuz in its packages")
    return moddirs[0], images[0].read_bytes()


def _stage(archive: Archive, found: Packages, image_pkg: str, version: str, busybox: Path,
           tmp: Path) -> Path:
    """tmp/staged: the packages unpacked and turned into what KERNELS/SUITE holds."""
    root = tmp / "root"
    for name in sorted(found):
        archive.unpack(found[name], root, tmp)
    moddir, bzimage = _kernel_in(root, image_pkg)
    release = moddir.name
    staged = tmp / "staged"
    (staged / "modules").mkdir(parents=True)
    shutil.move(str(moddir), staged / "modules" / release)
    # depmod's indexes are not in the package (its postinst makes them).
    _depmod(staged / "modules", release, tmp)
    (staged / "vmlinux").write_bytes(vm_boot.uncompressed_kernel(bzimage))
    (staged / "initrd.img").write_bytes(
        vm_boot.build_initrd(staged / "modules" / release, busybox.read_bytes()))
    (staged / "RELEASE").write_text(release + "\n")
    (staged / "VERSION").write_text(version + "\n")
    return staged


def _fetch(suite: str, dest: Path, busybox: Path, progress: bool) -> None:
    """Unpack the suite's current kernel into dest unless that version is there already."""
    archive = Archive(MIRROR, suite)
    image_pkg, found, version = _kernel_packages(archive, suite)
    if _load(dest, suite) is not None and (dest / "VERSION").read_text().strip() == version:
        return
    if progress:
        print(f"lab/run: fetching {version} from {suite}", flush=True)
    KERNELS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"kernel-{suite}-", dir=KERNELS) as tmpname:
        staged = _stage(archive, found, image_pkg, version, busybox, Path(tmpname))
        if dest.exists():
            shutil.rmtree(dest)
        shutil.move(str(staged), dest)


def ensure(suite: str, busybox: Path, progress: bool = False) -> Kernel:
    """The suite's current amd64 kernel, unpacked under KERNELS/suite."""
    if not suite.replace("-", "").isalnum():
        raise ImageError(f"not a Debian suite name: {suite!r}")
    dest = KERNELS / suite
    try:
        _fetch(suite, dest, busybox, progress)
    except ArchiveError as exc:
        raise ImageError(str(exc)) from None
    got = _load(dest, suite)
    if got is None:
        raise ImageError(f"kernel of {suite} in {dest} is incomplete")
    return got


def _depmod(moddir_root: Path, release: str, tmp: Path) -> None:
    """modules.dep and friends for a module tree at moddir_root/RELEASE (depmod wants the
    tree at BASE/lib/modules/RELEASE: point a temporary BASE at it)."""
    base = tmp / "depmod-base"
    (base / "lib").mkdir(parents=True)
    (base / "lib" / "modules").symlink_to(moddir_root)
    run_step(["depmod", "-b", str(base), release], tmp / "depmod.log", "depmod")
