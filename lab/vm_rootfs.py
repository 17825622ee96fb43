"""The lab VM's root filesystem and disk: which Debian packages go in, the mmdebstrap call
that installs them and runs lab/image/customize.sh (the system parts of a Vagrant box, then
`lab/provision --vm --no-venv`) in the new root, and the sparse MBR disk made from that root
with mke2fs -d (no loop device, no mount).

Only the Python standard library plus mmdebstrap, mkfs.ext4 and sfdisk.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from lab.build_step import ImageError, run_step
from lab.lab_paths import IMAGE_SCRIPTS, LAB

SUITE = "bookworm"
MIRROR = os.environ.get("LAB_DEBIAN_MIRROR", "http://deb.debian.org/debian").rstrip("/")
SECURITY_MIRROR = os.environ.get("LAB_DEBIAN_SECURITY_MIRROR",
                                 "http://deb.debian.org/debian-security").rstrip("/")
DISK_GIB = 20  # the virtual size of Debian's own bookworm64 box
PART_OFFSET = 1 << 20  # the partition starts at 1 MiB (sector 2048): room for GRUB's core
ROOT_LABEL = "apnroot"
PROVISION = LAB / "provision"
# Run in the chroot after the packages are in: the system parts of a Vagrant box. A
# template: %(label)s is the root filesystem's label.
CUSTOMIZE = IMAGE_SCRIPTS / "customize.sh"
# Host CA certificates added with update-ca-certificates: a machine behind a TLS-inspecting
# proxy needs them in the VM too (apt and pip there reach the same mirrors).
EXTRA_CA_DIR = Path("/usr/local/share/ca-certificates")

# What a bootable box needs on top of the lab's packages.
BOX_PACKAGES = ("linux-image-amd64", "systemd", "systemd-sysv", "udev", "dbus",
                "openssh-server", "sudo", "ifupdown", "isc-dhcp-client", "grub-pc",
                "initramfs-tools", "ca-certificates", "rsync", "netbase", "less",
                "busybox-static")


def ca_files() -> list[Path]:
    """The host's extra CA certificates (EXTRA_CA_DIR), copied into the image."""
    if not EXTRA_CA_DIR.is_dir():
        return []
    return sorted(p for p in EXTRA_CA_DIR.rglob("*.crt") if p.is_file())


def customize_script() -> str:
    """The chroot customisation as the image build runs it (the label filled in)."""
    return CUSTOMIZE.read_text() % {"label": ROOT_LABEL}


def provision_packages() -> list[str]:
    """The lab VM's packages (`lab/provision --vm --list`) plus BOX_PACKAGES, sorted."""
    out = subprocess.run(["bash", str(PROVISION), "--vm", "--list"], check=True,
                         capture_output=True, text=True).stdout.split()
    return sorted(set(out) | set(BOX_PACKAGES))


def mmdebstrap_argv(root: Path, hook: Path, cas: list[Path]) -> list[str]:
    """The mmdebstrap call that makes the root: minbase plus the lab's and the box's
    packages, documentation left out, then the customisation (which runs lab/provision
    inside)."""
    argv = ["mmdebstrap", "--mode=root", "--variant=minbase", "--format=directory",
            "--include=" + ",".join(provision_packages()),
            "--aptopt=Acquire::Retries \"3\"",
            "--dpkgopt=path-exclude=/usr/share/doc/*",
            "--dpkgopt=path-exclude=/usr/share/man/*",
            "--dpkgopt=path-exclude=/usr/share/locale/*",
            f"--customize-hook=copy-in {PROVISION} /tmp"]
    if cas:
        argv.append("--customize-hook=mkdir -p \"$1/tmp/extra-ca\"")
        argv += [f"--customize-hook=copy-in {p} /tmp/extra-ca" for p in cas]
    argv += [f"--customize-hook=sh {hook} \"$1\"", SUITE, str(root),
             f"deb {MIRROR} {SUITE} main",
             f"deb {MIRROR} {SUITE}-updates main",
             f"deb {SECURITY_MIRROR} {SUITE}-security main"]
    return argv


def mkfs_argv(root: Path, disk: Path) -> list[str]:
    """The mke2fs call that writes an ext4 filesystem of `root` into the disk's one
    partition (from PART_OFFSET to the end), labelled ROOT_LABEL."""
    fs_kib = ((DISK_GIB << 30) - PART_OFFSET) // 1024
    return ["mkfs.ext4", "-q", "-F", "-L", ROOT_LABEL, "-d", str(root),
            "-E", f"offset={PART_OFFSET},lazy_itable_init=1,lazy_journal_init=1",
            str(disk), f"{fs_kib}k"]


def make_root(work: Path, log: Path) -> Path:
    """work/root: the Debian packages installed and customised by mmdebstrap."""
    root = work / "root"
    hook = work / "customize.sh"
    hook.write_text(customize_script())
    run_step(mmdebstrap_argv(root, hook, ca_files()), log, "mmdebstrap", timeout=3600)
    return root


def module_dir(root: Path) -> Path:
    """The one kernel's module folder in the root (its name is the kernel's release)."""
    base = root / "usr/lib/modules"
    mods = sorted(base.iterdir()) if base.is_dir() else sorted((root / "lib/modules").iterdir())
    if len(mods) != 1:
        raise ImageError(f"expected one kernel in the image, found {[m.name for m in mods]}")
    return mods[0]


def make_disk(root: Path, disk: Path, log: Path) -> None:
    """A sparse DISK_GIB disk: an MBR with one bootable partition from 1 MiB holding an
    ext4 filesystem of `root` (mke2fs -d: no loop device, no mount)."""
    with open(disk, "wb") as fh:
        fh.truncate(DISK_GIB << 30)
    run_step(mkfs_argv(root, disk), log, "mkfs.ext4")
    run_step(["sfdisk", "--quiet", "--no-reread", "--no-tell-kernel", "--wipe", "never",
              str(disk)], log, "sfdisk", input=f"label: dos\nstart={PART_OFFSET // 512}, "
              "type=83, bootable\n".encode())
