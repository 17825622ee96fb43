"""The lab VM image's recipe and the check that a built image still follows it.

RECIPE (in the image's folder) holds a SHA-256 over the recipe's parts: lab/provision, the
mmdebstrap and mke2fs calls with suite and mirrors, the chroot customisation
(lab/image/customize.sh), the initrd's init (lab/image/initrd-init) and modules, and the
host CA certificates copied in. Each script's part is its contents as read now, so editing
one rebuilds the image; the image is rebuilt only when the recipe changes. The Vagrant box
adds its own parts (vm_box).

Only the Python standard library.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from lab import vm_boot
from lab import vm_rootfs
from lab.lab_paths import VM_DIR


@dataclass(frozen=True)
class Image:
    """A built image: the disk, the kernel to boot it with, and our initrd."""

    dir: Path
    disk: Path
    kernel: Path
    initrd: Path
    release: str
    recipe: str


def recipe() -> dict[str, str]:
    """What the image is made from, as text: the provisioning script, the host CA
    certificates copied in, the mmdebstrap and mke2fs calls (with placeholder paths), the
    chroot customisation and the initrd's init and modules. lab/vm-image --box adds the
    box's own steps."""
    parts = {
        "provision": vm_rootfs.PROVISION.read_text(),
        "mmdebstrap": "\n".join(vm_rootfs.mmdebstrap_argv(Path("ROOT"), Path("HOOK"), [])),
        "mkfs": "\n".join(vm_rootfs.mkfs_argv(Path("ROOT"), Path("DISK"))),
        "customize": vm_rootfs.customize_script(),
        "initrd-init": vm_boot.initrd_init(),
        "initrd-modules": ",".join(vm_boot.INITRD_MODULES),
    }
    for path in vm_rootfs.ca_files():
        parts[f"ca {path.name}"] = path.read_text(errors="replace")
    return parts


def recipe_hash(parts: dict[str, str] | None = None) -> str:
    """SHA-256 over the recipe's parts (names and contents, in name order)."""
    parts = recipe() if parts is None else parts
    h = hashlib.sha256()
    for name in sorted(parts):
        data = parts[name].encode()
        h.update(f"{name} {len(data)}\n".encode())
        h.update(data)
    return h.hexdigest()


def current(vm_dir: Path = VM_DIR) -> Image | None:
    """The built image if its recipe is today's, else None."""
    try:
        recipe = (vm_dir / "RECIPE").read_text().strip()
        release = (vm_dir / "RELEASE").read_text().strip()
    except OSError:
        return None
    img = Image(vm_dir, vm_dir / "disk.raw", vm_dir / "vmlinux", vm_dir / "initrd.img",
                release, recipe)
    if recipe != recipe_hash() or not all(p.is_file() for p in (img.disk, img.kernel,
                                                                 img.initrd,
                                                                 vm_dir / "busybox")):
        return None
    return img
