"""The Vagrant box of the lab VM image: REPO/.lab/vm/box/apn-bookworm64.box, the one CI
gives `vagrant up`. The image's disk is booted once, writable, to run
lab/image/box-finalize.sh (GRUB in the MBR for a BIOS boot under libvirt, ssh host keys,
Vagrant's insecure key), then converted to qcow2 and packed with libvirt's metadata.
Built once per box recipe: the image's recipe plus the finalize script, the metadata and
the Vagrant key.

Only the Python standard library plus QEMU, qemu-img and tar.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from lab import qemu_vm
from lab import vm_image
from lab import vm_rootfs
from lab.build_step import ImageError, Progress, require_tools, run_step
from lab.guest import guest_script
from lab.lab_paths import IMAGE_SCRIPTS, LAB, REPO, VM_DIR
from lab.vm_recipe import Image, recipe, recipe_hash

BOX_NAME = "apn-bookworm64"
# Run once inside the VM (lab/vm-init, disk writable): what a BIOS boot under libvirt needs.
BOX_FINALIZE = IMAGE_SCRIPTS / "box-finalize.sh"
BOX_METADATA = ('{"provider": "libvirt", "format": "qcow2", "virtual_size": %d}\n'
                % vm_rootfs.DISK_GIB)
VAGRANT_KEY_GLOBS = ("/usr/share/rubygems-integration/all/gems/vagrant-*/keys/vagrant.pub",
                     "/usr/lib/ruby/vendor_ruby/vagrant/keys/vagrant.pub",
                     "/opt/vagrant/embedded/gems/gems/vagrant-*/keys/vagrant.pub")
FINALIZE_TIMEOUT_S = 900


def vagrant_public_key() -> Path:
    """Vagrant's well-known insecure public key, from the installed vagrant package: the key
    `vagrant up` first logs in with (and then replaces by a key of its own)."""
    for pattern in VAGRANT_KEY_GLOBS:
        found = sorted(glob.glob(pattern))
        if found:
            return Path(found[-1])
    raise ImageError("vagrant's keys/vagrant.pub not found: install vagrant "
                     "(lab/provision --vagrant)")


def box_recipe_hash() -> str:
    """The image's recipe hash with the box's own parts added."""
    parts = recipe()
    parts.update({"box-finalize": BOX_FINALIZE.read_text(), "box-metadata": BOX_METADATA,
                  "vagrant-key": vagrant_public_key().read_text()})
    return recipe_hash(parts)


def current_box(vm_dir: Path = VM_DIR) -> Path | None:
    """The built box if its recipe is today's, else None."""
    box = vm_dir / "box" / f"{BOX_NAME}.box"
    try:
        if box.is_file() and (vm_dir / "box" / "RECIPE").read_text().strip() == \
                box_recipe_hash():
            return box
    except OSError:
        pass
    return None


def _finalize_argv(img: Image, disk: Path, run: Path, key: Path) -> list[str]:
    """The run folder (Vagrant's key, the finalize script, the guest's command) and the
    QEMU command line that boots `disk` writable to run it."""
    run.mkdir()
    shutil.copy(key, run / "vagrant.pub")
    (run / "finalize.sh").write_text(BOX_FINALIZE.read_text())
    (run / "cmd.sh").write_text(guest_script(["sh", "/apn-run/finalize.sh"], 600, REPO,
                                             "qemu", False))
    accel, _ = qemu_vm.choose_accel(os.environ.get("LAB_VM_ACCEL", "auto"))
    return qemu_vm.qemu_argv(
        kernel=img.kernel, initrd=img.initrd, disk=disk, init=LAB / "vm-init",
        shares=[qemu_vm.Share("repo", REPO),
                qemu_vm.Share("run", run, guest_path=qemu_vm.GUEST_RUN)],
        accel=accel, mem_mb=1024, cpus=2, console_log=run / "console.log",
        snapshot=False)


def _finalize(img: Image, disk: Path, work: Path, key: Path) -> None:
    """Boot a copy of the image's disk once to run the finalize script in it; an
    ImageError with QEMU's last lines unless the script exited 0."""
    run = work / "run"
    argv = _finalize_argv(img, disk, run, key)
    try:
        with open(work / "finalize.log", "wb") as log_out:
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=log_out,
                                  stderr=subprocess.STDOUT, timeout=FINALIZE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ImageError(f"finalizing the box: the VM did not finish within "
                         f"{FINALIZE_TIMEOUT_S} s") from None
    rc = (run / "rc").read_text().strip() if (run / "rc").exists() else "none"
    if rc != "0":
        tail = (work / "finalize.log").read_text(errors="replace").strip().splitlines()[-5:]
        raise ImageError(f"finalizing the box failed (exit {rc}, QEMU {proc.returncode}): "
                         f"{' | '.join(tail)}")


def _package(work: Path, disk: Path, out: Path) -> Path:
    """The finalized disk as qcow2, packed with its metadata into out/BOX_NAME.box (out
    replaced), stamped with the box recipe."""
    log = work / "build.log"
    run_step(["qemu-img", "convert", "-O", "qcow2", str(disk), str(work / "box.img")], log,
             "qemu-img convert")
    disk.unlink()
    (work / "metadata.json").write_text(BOX_METADATA)
    run_step(["tar", "-C", str(work), "-cf", str(work / f"{BOX_NAME}.box"), "metadata.json",
              "box.img"], log, "tar")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir()
    os.replace(work / f"{BOX_NAME}.box", out / f"{BOX_NAME}.box")
    (out / "RECIPE").write_text(box_recipe_hash() + "\n")
    return out / f"{BOX_NAME}.box"


def build_box(vm_dir: Path = VM_DIR, progress: bool = True) -> Path:
    """REPO/.lab/vm/box/apn-bookworm64.box: the image's disk with GRUB in its MBR, ssh host
    keys and Vagrant's key, as a libvirt box (qcow2 + metadata.json). Built once per recipe."""
    box = current_box(vm_dir)
    if box is not None:
        return box
    key = vagrant_public_key()
    require_tools("qemu-img", "qemu-system-x86_64")
    img = vm_image.ensure(vm_dir, progress)
    say = Progress("lab/vm-image: box", progress)
    work = Path(tempfile.mkdtemp(prefix="box-", dir=vm_dir))
    try:
        say("copy of the disk")
        disk = work / "box.raw"
        subprocess.run(["cp", "--sparse=always", str(img.disk), str(disk)], check=True)
        say("GRUB, ssh host keys and Vagrant's key, in the VM")
        _finalize(img, disk, work, key)
        say("qcow2 and box")
        box = _package(work, disk, vm_dir / "box")
        say("done")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return box
