"""The lab VM image: Debian 12 with its stock kernel, built from Debian packages only.

One recipe serves two uses:
  - `lab/run --vm CMD` boots REPO/.lab/vm/disk.raw under QEMU (throw-away writes,
    snapshot=on) with the uncompressed kernel and a tiny busybox initrd built here;
  - `lab/vm-image --box` turns the same disk into a Vagrant box (libvirt, qcow2, GRUB in the
    MBR), the one CI gives `vagrant up`.

The root is made by mmdebstrap from the packages `lab/provision --vm --list` names plus what a
bootable Vagrant box needs (systemd, ssh, GRUB, DHCP), then `lab/provision --vm --no-venv` runs
inside it: the image IS the provisioned lab VM minus the project's venv. The image is rebuilt
only when the recipe changes: RECIPE holds a SHA-256 over the recipe's parts (recipe():
lab/provision, the mmdebstrap and mke2fs calls with suite and mirrors, the chroot
customisation, the initrd's init and modules, the host CA certificates copied in).

Only the Python standard library: it runs before any venv exists.
"""

from __future__ import annotations

import fcntl
import hashlib
import lzma
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

LAB = Path(__file__).resolve().parent
REPO = LAB.parent
VM_DIR = REPO / ".lab" / "vm"
SUITE = "bookworm"
MIRROR = os.environ.get("LAB_DEBIAN_MIRROR", "http://deb.debian.org/debian").rstrip("/")
SECURITY_MIRROR = os.environ.get("LAB_DEBIAN_SECURITY_MIRROR",
                                 "http://deb.debian.org/debian-security").rstrip("/")
DISK_GIB = 20  # the virtual size of Debian's own bookworm64 box
PART_OFFSET = 1 << 20  # the partition starts at 1 MiB (sector 2048): room for GRUB's core
ROOT_LABEL = "apnroot"
# Host CA certificates added with update-ca-certificates: a machine behind a TLS-inspecting
# proxy needs them in the VM too (apt and pip there reach the same mirrors).
EXTRA_CA_DIR = Path("/usr/local/share/ca-certificates")

# What a bootable box needs on top of the lab's packages.
BOX_PACKAGES = ("linux-image-amd64", "systemd", "systemd-sysv", "udev", "dbus",
                "openssh-server", "sudo", "ifupdown", "isc-dhcp-client", "grub-pc",
                "initramfs-tools", "ca-certificates", "rsync", "netbase", "less",
                "busybox-static")

# The initrd loads these (and what they depend on) to mount the root disk and the 9p shares.
INITRD_MODULES = ("virtio_pci", "virtio_blk", "crc32c_generic", "ext4", "9pnet_virtio", "9p")
# ext4 needs a crc32c driver, a module up to 6.x and part of the kernel's library later.
OPTIONAL_MODULES = frozenset({"crc32c_generic"})

# Run in the chroot after the packages are in: the system parts of a Vagrant box.
CUSTOMIZE = r"""
set -eu
root="$1"
echo apn-lab > "$root/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\tapn-lab\n::1\tlocalhost ip6-localhost ip6-loopback\n' \
    > "$root/etc/hosts"
printf 'LABEL=%(label)s / ext4 errors=remount-ro 0 1\n' > "$root/etc/fstab"
printf 'auto lo\niface lo inet loopback\n\nallow-hotplug eth0\niface eth0 inet dhcp\n' \
    > "$root/etc/network/interfaces"
cat > "$root/etc/default/grub" <<'EOF'
GRUB_DEFAULT=0
GRUB_TIMEOUT=1
GRUB_DISTRIBUTOR=Debian
GRUB_CMDLINE_LINUX_DEFAULT=""
GRUB_CMDLINE_LINUX="net.ifnames=0 biosdevname=0 console=tty0 console=ttyS0,115200"
GRUB_TERMINAL="console serial"
GRUB_SERIAL_COMMAND="serial --unit=0 --speed=115200"
GRUB_DISABLE_OS_PROBER=true
EOF
chroot "$root" useradd -m -s /bin/bash -U vagrant
echo vagrant:vagrant | chroot "$root" chpasswd
echo 'vagrant ALL=(ALL) NOPASSWD:ALL' > "$root/etc/sudoers.d/vagrant"
chmod 0440 "$root/etc/sudoers.d/vagrant"
install -d -m 0700 -o 1000 -g 1000 "$root/home/vagrant/.ssh"
echo 'UseDNS no' > "$root/etc/ssh/sshd_config.d/vagrant.conf"
# Host keys are made per box (lab/vm-image --box), never shared by every image.
rm -f "$root"/etc/ssh/ssh_host_*
# apt's daily jobs would take the dpkg lock during the first `vagrant up`.
for unit in apt-daily.timer apt-daily-upgrade.timer; do
    ln -sf /dev/null "$root/etc/systemd/system/$unit"
done
chroot "$root" systemctl enable ssh.service >/dev/null 2>&1 || true
if [ -d "$root/tmp/extra-ca" ]; then
    cp "$root"/tmp/extra-ca/*.crt "$root/usr/local/share/ca-certificates/" 2>/dev/null || true
    rm -rf "$root/tmp/extra-ca"
    chroot "$root" update-ca-certificates >/dev/null
fi
chroot "$root" bash /tmp/provision --vm --no-venv
rm -f "$root/tmp/provision"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*_Packages
"""


class ImageError(Exception):
    """The image cannot be built or used; the message says why and what to do."""


@dataclass(frozen=True)
class Image:
    """A built image: the disk, the kernel to boot it with, and our initrd."""

    dir: Path
    disk: Path
    kernel: Path
    initrd: Path
    release: str
    recipe: str


def ca_files() -> list[Path]:
    if not EXTRA_CA_DIR.is_dir():
        return []
    return sorted(p for p in EXTRA_CA_DIR.rglob("*.crt") if p.is_file())


def recipe() -> dict[str, str]:
    """What the image is made from, as text: the provisioning script, the host CA
    certificates copied in, the mmdebstrap and mke2fs calls (with placeholder paths), the
    chroot customisation and the initrd's init and modules. lab/vm-image --box adds the
    box's own steps."""
    parts = {
        "provision": (LAB / "provision").read_text(),
        "mmdebstrap": "\n".join(mmdebstrap_argv(Path("ROOT"), Path("HOOK"), [])),
        "mkfs": "\n".join(mkfs_argv(Path("ROOT"), Path("DISK"))),
        "customize": CUSTOMIZE % {"label": ROOT_LABEL},
        "initrd-init": INITRD_INIT,
        "initrd-modules": ",".join(INITRD_MODULES),
    }
    for path in ca_files():
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


# ---- kernel and initrd ----------------------------------------------------------------

_MAGICS = ((b"\xfd7zXZ\x00", "xz"), (b"\x28\xb5\x2f\xfd", "zstd"), (b"\x1f\x8b\x08", "gzip"))


def uncompressed_kernel(bzimage: bytes) -> bytes:
    """The ELF vmlinux inside a bzImage (QEMU boots it through PVH): decompressing once here
    saves every TCG boot the seconds the kernel's own decompressor takes."""
    if bzimage[0x202:0x206] != b"HdrS":
        raise ImageError("not a bzImage (no HdrS header)")
    setup_sects = bzimage[0x1F1] or 4
    payload_offset, payload_length = struct.unpack_from("<II", bzimage, 0x248)
    start = (setup_sects + 1) * 512 + payload_offset
    payload = bzimage[start:start + payload_length]
    for magic, kind in _MAGICS:
        if payload.startswith(magic):
            break
    else:
        raise ImageError(f"unknown kernel compression (payload starts {payload[:6].hex()})")
    if kind == "xz":
        out = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(payload)
    elif kind == "gzip":
        import zlib
        out = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(payload)
    else:
        # The build appends the uncompressed size (4 bytes) after the zstd frame.
        proc = subprocess.run(["zstd", "-dc"], input=payload[:-4], capture_output=True)
        if proc.returncode != 0:
            raise ImageError(f"zstd cannot decompress the kernel: {proc.stderr.strip()!r}")
        out = proc.stdout
    if not out.startswith(b"\x7fELF"):
        raise ImageError("the decompressed kernel is not an ELF image")
    return out


def module_closure(moddir: Path, names: tuple[str, ...]) -> list[str]:
    """Module files (relative to moddir) for `names` and their dependencies, in load order
    (dependencies first). Modules built into the kernel are skipped."""
    deps: dict[str, list[str]] = {}
    for line in (moddir / "modules.dep").read_text().splitlines():
        mod, _, rest = line.partition(":")
        deps[mod] = rest.split()
    by_name = {Path(m).name.split(".ko")[0].replace("-", "_"): m for m in deps}
    builtin = {Path(m).name.split(".ko")[0].replace("-", "_")
               for m in (moddir / "modules.builtin").read_text().split()} \
        if (moddir / "modules.builtin").exists() else set()
    order: list[str] = []

    def visit(mod: str) -> None:
        if mod in order:
            return
        # modules.dep lists every (transitive) dependency, nearest last: load them reversed.
        for dep in reversed(deps.get(mod, [])):
            visit(dep)
        order.append(mod)

    for name in names:
        key = name.replace("-", "_")
        if key in builtin:
            continue
        if key not in by_name:
            if key in OPTIONAL_MODULES:
                continue
            raise ImageError(f"module {name} is neither built in nor in {moddir}")
        visit(by_name[key])
    return order


def _module_bytes(path: Path) -> bytes:
    data = path.read_bytes()
    if path.name.endswith(".xz"):
        return lzma.decompress(data)
    if path.name.endswith(".zst"):
        return subprocess.run(["zstd", "-dc"], input=data, capture_output=True,
                              check=True).stdout
    return data


INITRD_INIT = r"""#!/bin/busybox sh
# /init of the lab VM's initrd (lab/vm_image.py): load the disk and 9p drivers, mount the
# image's root and the host's shares at their host paths, then hand over to REPO/lab/vm-init.
/bin/busybox mkdir -p /proc /sys /dev /newroot
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t devtmpfs devtmpfs /dev
for m in $(/bin/busybox cat /modules.order); do /bin/busybox insmod "/modules/$m"; done
fail() {
    echo "lab VM initrd: $*"
    /bin/busybox dmesg | /bin/busybox tail -n 5
    /bin/busybox sleep 1; echo o > /proc/sysrq-trigger
}
root= shares= init=
for arg in $(/bin/busybox cat /proc/cmdline); do
    case "$arg" in
        apn_root=*) root=${arg#apn_root=} ;;
        apn_share=*) shares="$shares ${arg#apn_share=}" ;;
        apn_init=*) init=${arg#apn_init=} ;;
    esac
done
i=0
while [ ! -b "$root" ] && [ $i -lt 200 ]; do /bin/busybox usleep 20000; i=$((i+1)); done
/bin/busybox mount -t ext4 -o rw,noinit_itable "$root" /newroot || fail "cannot mount $root"
for share in $shares; do
    tag=${share%%,*}; rest=${share#*,}; path=${rest%%,*}; mode=${rest#*,}
    /bin/busybox mkdir -p "/newroot$path"
    /bin/busybox mount -t 9p -o "trans=virtio,version=9p2000.L,msize=512000,$mode" \
        "$tag" "/newroot$path" || fail "cannot mount share $tag at $path"
done
/bin/busybox umount /proc
/bin/busybox umount /dev
exec /bin/busybox switch_root /newroot "$init"
fail "switch_root to $init failed"
"""


def cpio_newc(entries: list[tuple[str, int, bytes, int]]) -> bytes:
    """A newc cpio archive of (name, mode, data, rdev) entries, as the kernel unpacks an
    initramfs; rdev is (major << 8 | minor) for device nodes."""
    out = bytearray()
    for ino, (name, mode, data, rdev) in enumerate(entries + [("TRAILER!!!", 0, b"", 0)], 1):
        fields = (ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdev >> 8, rdev & 0xFF,
                  len(name) + 1, 0)
        out += b"070701" + b"".join(f"{v:08x}".encode() for v in fields)
        out += name.encode() + b"\0"
        out += b"\0" * (-len(out) % 4)
        out += data
        out += b"\0" * (-len(out) % 4)
    return bytes(out)


def build_initrd(moddir: Path, busybox: bytes) -> bytes:
    """The initrd for the kernel whose modules are in moddir: busybox, INITRD_INIT and the
    modules it loads, uncompressed."""
    mods = module_closure(moddir, INITRD_MODULES)
    entries: list[tuple[str, int, bytes, int]] = [
        ("bin", 0o40755, b"", 0), ("dev", 0o40755, b"", 0), ("modules", 0o40755, b"", 0),
        ("dev/console", 0o20600, b"", (5 << 8) | 1),
        ("bin/busybox", 0o100755, busybox, 0),
        ("init", 0o100755, INITRD_INIT.encode(), 0),
    ]
    names = []
    for mod in mods:
        name = Path(mod).name.split(".ko")[0] + ".ko"
        names.append(name)
        entries.append((f"modules/{name}", 0o100644, _module_bytes(moddir / mod), 0))
    entries.append(("modules.order", 0o100644, ("\n".join(names) + "\n").encode(), 0))
    return cpio_newc(entries)


# ---- the build ---------------------------------------------------------------------------

def _run(argv: list[str], log: Path, what: str, timeout: float = 1800, **kw: object) -> None:
    with open(log, "a") as fh:
        fh.write(f"\n$ {' '.join(argv)}\n")
        fh.flush()
        try:
            proc = subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout,
                                  **kw)  # type: ignore[call-overload]
        except subprocess.TimeoutExpired:
            raise ImageError(f"{what}: no result within {timeout:.0f} s (log: {log})") from None
        except FileNotFoundError:
            raise ImageError(f"{what}: {argv[0]} not found; run: lab/provision "
                             "--host-vm") from None
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        raise ImageError(f"{what} failed (exit {proc.returncode}): {' | '.join(tail)} "
                         f"(log: {log.parent.parent / 'build-failed.log'})")


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


def provision_packages() -> list[str]:
    out = subprocess.run(["bash", str(LAB / "provision"), "--vm", "--list"], check=True,
                         capture_output=True, text=True).stdout.split()
    return sorted(set(out) | set(BOX_PACKAGES))


def mmdebstrap_argv(root: Path, hook: Path, cas: list[Path]) -> list[str]:
    """The mmdebstrap call that makes the root: minbase plus the lab's and the box's
    packages, documentation left out, then CUSTOMIZE (which runs lab/provision inside)."""
    argv = ["mmdebstrap", "--mode=root", "--variant=minbase", "--format=directory",
            "--include=" + ",".join(provision_packages()),
            "--aptopt=Acquire::Retries \"3\"",
            "--dpkgopt=path-exclude=/usr/share/doc/*",
            "--dpkgopt=path-exclude=/usr/share/man/*",
            "--dpkgopt=path-exclude=/usr/share/locale/*",
            f"--customize-hook=copy-in {LAB / 'provision'} /tmp"]
    if cas:
        argv.append("--customize-hook=mkdir -p \"$1/tmp/extra-ca\"")
        argv += [f"--customize-hook=copy-in {p} /tmp/extra-ca" for p in cas]
    argv += [f"--customize-hook=sh {hook} \"$1\"", SUITE, str(root),
             f"deb {MIRROR} {SUITE} main",
             f"deb {MIRROR} {SUITE}-updates main",
             f"deb {SECURITY_MIRROR} {SUITE}-security main"]
    return argv


def mkfs_argv(root: Path, disk: Path) -> list[str]:
    fs_kib = ((DISK_GIB << 30) - PART_OFFSET) // 1024
    return ["mkfs.ext4", "-q", "-F", "-L", ROOT_LABEL, "-d", str(root),
            "-E", f"offset={PART_OFFSET},lazy_itable_init=1,lazy_journal_init=1",
            str(disk), f"{fs_kib}k"]


def make_disk(root: Path, disk: Path, log: Path) -> None:
    """A sparse DISK_GIB disk: an MBR with one bootable partition from 1 MiB holding an
    ext4 filesystem of `root` (mke2fs -d: no loop device, no mount)."""
    with open(disk, "wb") as fh:
        fh.truncate(DISK_GIB << 30)
    _run(mkfs_argv(root, disk), log, "mkfs.ext4")
    _run(["sfdisk", "--quiet", "--no-reread", "--no-tell-kernel", "--wipe", "never",
          str(disk)], log, "sfdisk", input=f"label: dos\nstart={PART_OFFSET // 512}, "
          "type=83, bootable\n".encode())


def build(vm_dir: Path = VM_DIR, progress: bool = True) -> Image:
    """Build the image into vm_dir (replacing an outdated one) and return it."""
    if os.geteuid() != 0:
        raise ImageError("building the lab VM image needs root (mmdebstrap, device nodes)")
    for tool in ("mmdebstrap", "mkfs.ext4", "sfdisk"):
        if shutil.which(tool) is None:
            raise ImageError(f"{tool} not found; run: lab/provision --host-vm")
    recipe = recipe_hash()
    vm_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="build-", dir=vm_dir))
    log = work / "build.log"
    t0 = time.monotonic()

    def say(msg: str) -> None:
        if progress:
            print(f"lab/vm-image: {msg} ({time.monotonic() - t0:.0f} s)", file=sys.stderr,
                  flush=True)

    try:
        root = work / "root"
        hook = work / "customize.sh"
        hook.write_text(CUSTOMIZE % {"label": ROOT_LABEL})
        argv = mmdebstrap_argv(root, hook, ca_files())
        say("mmdebstrap: Debian packages into a root")
        _run(argv, log, "mmdebstrap", timeout=3600)
        mods = sorted((root / "usr/lib/modules").iterdir()) if (root / "usr/lib/modules").is_dir() \
            else sorted((root / "lib/modules").iterdir())
        if len(mods) != 1:
            raise ImageError(f"expected one kernel in the image, found {[m.name for m in mods]}")
        release = mods[0].name
        say(f"kernel {release}: uncompressed vmlinux and initrd")
        (work / "vmlinux").write_bytes(
            uncompressed_kernel((root / "boot" / f"vmlinuz-{release}").read_bytes()))
        moddir = mods[0]
        busybox = (root / "bin/busybox").read_bytes()
        (work / "busybox").write_bytes(busybox)  # for initrds of other kernels (vm_kernel)
        (work / "initrd.img").write_bytes(build_initrd(moddir, busybox))
        say("ext4 disk image")
        make_disk(root, work / "disk.raw", log)
        shutil.rmtree(root)
        (work / "RELEASE").write_text(release + "\n")
        (work / "RECIPE").write_text(recipe + "\n")
        for name in ("disk.raw", "vmlinux", "initrd.img", "busybox", "RELEASE", "build.log",
                     "RECIPE"):
            os.replace(work / name, vm_dir / name)
        for stale in ("box", "box.RECIPE"):
            p = vm_dir / stale
            if p.is_dir():
                shutil.rmtree(p)
            elif p.exists():
                p.unlink()
        say("done")
    except ImageError:
        if log.exists():
            shutil.copy(log, vm_dir / "build-failed.log")  # the error points here
        raise
    finally:
        if work.exists():
            # mmdebstrap may leave bind mounts behind only on crashes; never follow them.
            subprocess.run(["umount", "-R", "-l", str(work / "root")], capture_output=True)
            shutil.rmtree(work, ignore_errors=True)
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


# ---- the Vagrant box -----------------------------------------------------------------------

BOX_NAME = "apn-bookworm64"
# Run once inside the VM (lab/vm-init, disk writable): what a BIOS boot under libvirt needs.
BOX_FINALIZE = r"""set -eu
grub-install --target=i386-pc /dev/vda
update-grub
ssh-keygen -A
install -m 0600 -o vagrant -g vagrant /apn-run/vagrant.pub /home/vagrant/.ssh/authorized_keys
rm -f /var/lib/dbus/machine-id
: > /etc/machine-id
sync
"""
BOX_METADATA = '{"provider": "libvirt", "format": "qcow2", "virtual_size": %d}\n' % DISK_GIB
VAGRANT_KEY_GLOBS = ("/usr/share/rubygems-integration/all/gems/vagrant-*/keys/vagrant.pub",
                     "/usr/lib/ruby/vendor_ruby/vagrant/keys/vagrant.pub",
                     "/opt/vagrant/embedded/gems/gems/vagrant-*/keys/vagrant.pub")


def vagrant_public_key() -> Path:
    """Vagrant's well-known insecure public key, from the installed vagrant package: the key
    `vagrant up` first logs in with (and then replaces by a key of its own)."""
    import glob
    for pattern in VAGRANT_KEY_GLOBS:
        found = sorted(glob.glob(pattern))
        if found:
            return Path(found[-1])
    raise ImageError("vagrant's keys/vagrant.pub not found: install vagrant "
                     "(lab/provision --vagrant)")


def box_recipe_hash() -> str:
    parts = recipe()
    parts.update({"box-finalize": BOX_FINALIZE, "box-metadata": BOX_METADATA,
                  "vagrant-key": vagrant_public_key().read_text()})
    return recipe_hash(parts)


def current_box(vm_dir: Path = VM_DIR) -> Path | None:
    box = vm_dir / "box" / f"{BOX_NAME}.box"
    try:
        if box.is_file() and (vm_dir / "box" / "RECIPE").read_text().strip() == \
                box_recipe_hash():
            return box
    except OSError:
        pass
    return None


def build_box(vm_dir: Path = VM_DIR, progress: bool = True) -> Path:
    """REPO/.lab/vm/box/apn-bookworm64.box: the image's disk with GRUB in its MBR, ssh host
    keys and Vagrant's key, as a libvirt box (qcow2 + metadata.json). Built once per recipe."""
    import qemu_vm
    from guest import guest_script

    box = current_box(vm_dir)
    if box is not None:
        return box
    key = vagrant_public_key()
    for tool in ("qemu-img", "qemu-system-x86_64"):
        if shutil.which(tool) is None:
            raise ImageError(f"{tool} not found; run: lab/provision --host-vm")
    img = ensure(vm_dir, progress)
    t0 = time.monotonic()

    def say(msg: str) -> None:
        if progress:
            print(f"lab/vm-image: box: {msg} ({time.monotonic() - t0:.0f} s)", file=sys.stderr,
                  flush=True)

    out = vm_dir / "box"
    work = Path(tempfile.mkdtemp(prefix="box-", dir=vm_dir))
    try:
        say("copy of the disk")
        disk = work / "box.raw"
        subprocess.run(["cp", "--sparse=always", str(img.disk), str(disk)], check=True)
        run = work / "run"
        run.mkdir()
        shutil.copy(key, run / "vagrant.pub")
        (run / "finalize.sh").write_text(BOX_FINALIZE)
        (run / "cmd.sh").write_text(guest_script(["sh", "/apn-run/finalize.sh"], 600, REPO,
                                                 "qemu", False))
        accel, _ = qemu_vm.choose_accel(os.environ.get("LAB_VM_ACCEL", "auto"))
        argv = qemu_vm.qemu_argv(
            kernel=img.kernel, initrd=img.initrd, disk=disk, init=LAB / "vm-init",
            shares=[qemu_vm.Share("repo", REPO),
                    qemu_vm.Share("run", run, guest_path=qemu_vm.GUEST_RUN)],
            accel=accel, mem_mb=1024, cpus=2, console_log=run / "console.log",
            snapshot=False)
        say("GRUB, ssh host keys and Vagrant's key, in the VM")
        with open(work / "finalize.log", "wb") as log_out:
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=log_out,
                                  stderr=subprocess.STDOUT, timeout=900)
        rc = (run / "rc").read_text().strip() if (run / "rc").exists() else "none"
        if rc != "0":
            tail = (work / "finalize.log").read_text(errors="replace").strip().splitlines()[-5:]
            raise ImageError(f"finalizing the box failed (exit {rc}, QEMU {proc.returncode}): "
                             f"{' | '.join(tail)}")
        say("qcow2 and box")
        _run(["qemu-img", "convert", "-O", "qcow2", str(disk), str(work / "box.img")],
             work / "build.log", "qemu-img convert")
        disk.unlink()
        (work / "metadata.json").write_text(BOX_METADATA)
        _run(["tar", "-C", str(work), "-cf", str(work / f"{BOX_NAME}.box"), "metadata.json",
              "box.img"], work / "build.log", "tar")
        if out.exists():
            shutil.rmtree(out)
        out.mkdir()
        os.replace(work / f"{BOX_NAME}.box", out / f"{BOX_NAME}.box")
        (out / "RECIPE").write_text(box_recipe_hash() + "\n")
        say("done")
    except subprocess.TimeoutExpired:
        raise ImageError("finalizing the box: the VM did not finish within 900 s") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out / f"{BOX_NAME}.box"
