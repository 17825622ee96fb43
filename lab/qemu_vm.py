"""Boot the lab VM image (lab/vm_image.py) under QEMU and run one command in it.

kvm_usable    whether /dev/kvm can run a stock kernel here (a PVM-only /dev/kvm cannot);
qemu_argv     the QEMU command line: KVM when usable, else TCG with the flags that make
              emulation fast (measured: -cpu max without the string/AVX features it
              emulates slowly, qboot firmware, uncompressed kernel, tiny initrd);
git_shares    the git directories outside the checkout (a worktree's), shared read-only so
              meta.json records the commit in the guest too;
run_vm        boots, waits (bounded), kills QEMU by its PID if needed, returns the exit code
              the guest wrote into the run folder (guest_process).

The checkout is shared both ways with 9p at its host path (security_model=none: files are
created as the user QEMU runs as; cache=mmap, see above Share why). Only the Python standard
library.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from lab import guest_process

KVM_GET_API_VERSION = 0xAE00
KVM_API_VERSION = 12
QBOOT = Path("/usr/share/qemu/qboot.rom")
# Features TCG emulates slowly (measured: iperf3 0.44 Gbit/s with plain -cpu max, 1.8-2.2
# without these): glibc then picks plain SSE string functions.
TCG_CPU = "max,-erms,-fsrm,-avx,-avx2,-avx512f"
# Where the guest sees the run folder (cmd.sh in, rc out): outside /tmp and /run, which the
# guest's init covers with tmpfs.
GUEST_RUN = Path("/apn-run")


# 9p's cache=loose imported the venv's pandas faster (14.6 s vs 19-20 s with mmap or none,
# measured 2026-12-03 under TCG), but on 6.1 a loose mount registers an FS-Cache volume: the
# first cachefiles cache of a boot then stays pinned after it is withdrawn, and the kernel
# binds later NFS fsc volumes to that dead cache (a second FS-Cache run in one boot cached
# nothing). mmap caches no metadata, registers no volume and keeps shared mmap coherent.


@dataclass(frozen=True)
class Share:
    """A host folder seen in the guest (9p), at the same path unless guest_path is set."""

    tag: str
    path: Path
    readonly: bool = False
    guest_path: Path | None = None  # where the guest mounts it (default: the host path)
    cache: str = "mmap"  # the 9p client's cache mode (see the comment above)

    @property
    def mountpoint(self) -> Path:
        """Where the guest mounts the share."""
        return self.guest_path or self.path

    def cmdline(self) -> str:
        """The kernel argument that tells the initrd to mount this share."""
        mode = "ro" if self.readonly else "rw"
        return f"apn_share={self.tag},{self.mountpoint},{mode},cache={self.cache}"


def kvm_api_version(dev: Path) -> int:
    """KVM_GET_API_VERSION of `dev` (OSError if it cannot be opened or asked)."""
    fd = os.open(dev, os.O_RDWR | os.O_CLOEXEC)
    try:
        return fcntl.ioctl(fd, KVM_GET_API_VERSION)
    finally:
        os.close(fd)


def kvm_usable(dev: Path = Path("/dev/kvm"), sys_module: Path = Path("/sys/module"),
               cpuinfo: Path = Path("/proc/cpuinfo"),
               api_version: Callable[[Path], int] = kvm_api_version) -> tuple[bool, str]:
    """(usable, why): KVM that runs stock kernels needs /dev/kvm open read-write with API
    version 12, the kvm_intel or kvm_amd module (a PVM-only host has just kvm_pvm, which
    runs specially built guest kernels only) and the CPU's vmx/svm flag."""
    if not dev.exists():
        return False, f"{dev} does not exist"
    try:
        version = api_version(dev)
    except OSError as exc:
        return False, f"{dev}: {exc.strerror or exc}"
    if version != KVM_API_VERSION:
        return False, f"{dev}: KVM API version {version}, not {KVM_API_VERSION}"
    vendors = [m for m in ("kvm_intel", "kvm_amd") if (sys_module / m).is_dir()]
    if not vendors:
        others = sorted(p.name for p in sys_module.glob("kvm_*")) if sys_module.is_dir() else []
        return False, (f"no kvm_intel/kvm_amd module (loaded: {', '.join(others) or 'none'}); "
                       "a stock kernel cannot run on it")
    try:
        flags = next((line.split(":", 1)[1].split() for line in cpuinfo.read_text().splitlines()
                      if line.startswith("flags")), [])
    except OSError:
        flags = []
    if not {"vmx", "svm"} & set(flags):
        return False, "the CPU shows no vmx/svm flag"
    return True, vendors[0]


def choose_accel(request: str = "auto") -> tuple[str, str]:
    """("kvm" | "tcg", why) for LAB_VM_ACCEL=auto|kvm|tcg."""
    if request not in ("auto", "kvm", "tcg"):
        raise ValueError(f"accelerator must be auto, kvm or tcg, not {request!r}")
    if request != "auto":
        return request, "asked for"
    ok, why = kvm_usable()
    return ("kvm", why) if ok else ("tcg", why)


def git_shares(repo: Path) -> list[Share]:
    """The repository's git directory and common directory when they lie outside the
    checkout (a `git worktree`), read-only; none if git or the repository is missing."""
    if shutil.which("git") is None:
        return []
    try:
        proc = subprocess.run(["git", "-C", str(repo), "rev-parse", "--path-format=absolute",
                               "--git-common-dir"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if proc.returncode != 0 or not proc.stdout.strip():
        return []
    common = Path(proc.stdout.strip()).resolve()
    if common == repo or repo in common.parents:
        return []
    return [Share("git", common, readonly=True)]


def venv_shares(repo: Path) -> list[Share]:
    """The interpreter behind REPO/.venv when the image does not have it (a venv made with,
    e.g., a pyenv Python outside /usr): its prefix, read-only at the same path. The image
    is Debian 12 like the host, so the shared libraries it links against are there."""
    cfg = repo / ".venv" / "pyvenv.cfg"
    try:
        lines = cfg.read_text().splitlines()
    except OSError:
        return []
    home = next((line.split("=", 1)[1].strip() for line in lines
                 if line.split("=", 1)[0].strip() == "home"), "")
    if not home:
        return []
    prefix = Path(home).resolve().parent
    system = Path("/usr")
    if prefix == system or (system in prefix.parents and Path("/usr/local") != prefix
                            and Path("/usr/local") not in prefix.parents):
        return []
    return [Share("python", prefix, readonly=True)]


def qemu_argv(*, kernel: Path, initrd: Path, disk: Path, init: Path, shares: list[Share],
              accel: str, mem_mb: int, cpus: int, console_log: Path,
              snapshot: bool = True) -> list[str]:
    """The QEMU command line for one throw-away boot of the lab VM; one of the shares is the
    run folder, mounted at GUEST_RUN. snapshot=False keeps the guest's writes to the disk."""
    for share in shares:
        if any(c in str(share.path) + str(share.mountpoint) for c in " ,\t\n"):
            raise ValueError(f"cannot share {share.path}: spaces and commas are not supported")
    append = ["console=ttyS0", "quiet", "loglevel=3", "panic=-1", "mitigations=off",
              "8250.nr_uarts=1", "random.trust_cpu=on", "apn_root=/dev/vda1",
              f"apn_init={init}", f"apn_run={GUEST_RUN}", *[s.cmdline() for s in shares]]
    argv = ["qemu-system-x86_64", "-nodefaults", "-no-user-config", "-nographic",
            "-no-reboot", "-machine", "q35"]
    if accel == "kvm":
        argv += ["-accel", "kvm", "-cpu", "host"]
    else:
        argv += ["-accel", "tcg,thread=multi", "-cpu", TCG_CPU]
    if QBOOT.is_file():
        argv += ["-bios", str(QBOOT)]
    argv += ["-m", str(mem_mb), "-smp", str(cpus),
             "-kernel", str(kernel), "-initrd", str(initrd), "-append", " ".join(append),
             "-drive", f"file={disk},if=virtio,format=raw,"
                       + ("snapshot=on,cache=unsafe" if snapshot else "cache=writeback"),
             "-nic", "none",
             "-device", "virtio-serial-pci",
             "-chardev", "stdio,id=out,signal=off",
             "-device", "virtconsole,chardev=out",
             "-serial", f"file:{console_log}",
             "-device", "virtio-rng-pci"]
    for share in shares:
        opts = (f"local,path={share.path},mount_tag={share.tag},security_model=none,"
                f"multidevs=remap,id={share.tag}")
        if share.readonly:
            opts += ",readonly=on"
        argv += ["-virtfs", opts]
    return argv


def run_vm(argv: list[str], run_dir: Path, timeout_s: float, log: Path) -> int:
    """Run QEMU (its stdout is the guest command's output) until the guest powers off or
    timeout_s passes; return the guest command's exit code, 124 on timeout, 125 if the
    guest left none (the tail of the serial console is printed then)."""
    with open(log, "wb") as err:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stderr=err,
                                start_new_session=True)
    interrupted, old = guest_process.kill_on_signals(proc)
    try:
        return guest_process.wait_guest(proc, run_dir, timeout_s, guest_process.QEMU,
                                        [log, run_dir / "console.log"], interrupted)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
