"""lab/run [--vm] CMD [ARGS...]: run CMD as root, in the repository root, inside a real Linux kernel.

Two routes, one interface:

- default: Debian's user-mode Linux (package user-mode-linux, unpacked by lab/fetch-uml into
  REPO/.lab/uml), a Linux kernel running as an ordinary host process, with its own network
  stack (netem, htb, veth, bridges, network namespaces) and filesystems (kernel nfsd and NFS
  client), loaded as modules from REPO/.lab/uml/modules. It boots the HOST's root filesystem
  through hostfs, so the checkout, its .venv and host-installed Debian packages are visible
  inside without building an image; lab/uml-init (PID 1 in the guest) builds a writable root
  and runs the command. The fastest route here (docs/lab.md).
- --vm: a Debian 12 VM with Debian's stock kernel (the Vagrant box's), under QEMU: KVM when
  /dev/kvm really works, software emulation (TCG) otherwise. Its disk is built once from
  Debian packages by lab/vm-image (the `lab/provision --vm` recipe) into REPO/.lab/vm and
  rebuilt only when the recipe changes; each run's writes to it are thrown away. The
  checkout is shared both ways (9p, same path), so the host's .venv is used and results
  land on the host. lab/vm-init is PID 1 there.

Output of CMD streams to stdout (stderr merged into it); lab/run exits with CMD's exit code
and prints nothing of its own when it succeeds. The guest learns whether the host's stdout
is a terminal (APN_STDOUT_TTY; if not, CMD's output goes through a pipe). A guest that does
not finish within --timeout seconds is killed by the PID we started and lab/run exits 124;
125 means the guest left no exit code. Nothing is left running on the host afterwards.

--vm --kernel SUITE boots the kernel of another Debian suite (lab/vm_kernel.py) with the
same image, e.g. to try a feature newer than 6.1.

--clock (user-mode Linux only) picks the guest's clock: `real` (default) is the host's clock
and Debian's kernel; `virtual` boots the kernel lab/build-uml builds with `time-travel`: the
guest's clock jumps to the next timer event whenever nothing is runnable, so waiting (the
fibre's delay, the emulated accelerator's compute) costs no wall time, and CPU work costs
at most the time to the next event; `infcpu` (`time-travel=inf-cpu`) makes CPU work take
no guest time at all (NFS mounts hung in it). What each changes, measured:
docs/virtual-clock.md.

--cpus N boots user-mode Linux with N virtual CPUs (`ncpus=N`, each a host thread): the
kernel lab/build-uml --smp builds (REPO/.lab/uml-smp), on the host's clock (the virtual clock
needs one CPU). One CPU, Debian's kernel, is the default. What N CPUs carry, measured:
docs/multi-cpu.md.

Environment knobs: LAB_CLOCK (as --clock), LAB_MEM (guest RAM, default 1536M for UML, 4G for
the VM), LAB_TIMEOUT (seconds, default 1800), LAB_CPUS (as --cpus; default 1 for UML, the
host's CPUs, at most 4, for the VM), LAB_VM_ACCEL (auto|kvm|tcg, default auto),
LAB_VM_KERNEL (a suite, as --kernel). This module only uses the Python standard library (and testbed.labkernel, which does too): it runs
before any venv exists, as `python3 -m lab.run` from the repository root (what the shell
script lab/run does), where lab and testbed import without a venv or a sys.path edit.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from lab.guest import RC_TIMEOUT, guest_script
from lab.guest_process import UML, kill_on_signals, wait_guest
from lab.lab_paths import LAB, REPO, UML_DIR, UML_SMP_DIR, UML_TT_DIR
from testbed.labkernel import HOST_METER_FILE, HostMeter  # standard library only, as lab is

if TYPE_CHECKING:
    from lab.qemu_vm import Share
    from lab.vm_recipe import Image

INIT = LAB / "uml-init"
VM_INIT = LAB / "vm-init"

# --clock: the kernel folder, its command-line option, and what installs that kernel.
CLOCKS: dict[str, tuple[Path, list[str], str]] = {
    "real": (UML_DIR, [], "lab/provision --host (it runs lab/fetch-uml)"),
    "virtual": (UML_TT_DIR, ["time-travel"], "lab/build-uml (6-9 minutes)"),
    "infcpu": (UML_TT_DIR, ["time-travel=inf-cpu"], "lab/build-uml (6-9 minutes)"),
}
# --cpus N > 1 under user-mode Linux: the SMP kernel (host's clock) and what installs it.
SMP = (UML_SMP_DIR, "lab/build-uml --smp (6-9 minutes)")
MAX_UML_CPUS = 8  # CONFIG_NR_CPUS of lab/uml-tt/smp.config


class UsageError(Exception):
    """Bad arguments or environment: one line on stderr, exit 2."""


def parse_mem(text: str) -> int:
    """Guest memory in MiB from "1536M", "2G", "512K" or a plain number of MiB."""
    text = text.strip().upper()
    mult = {"K": 1 / 1024, "M": 1, "G": 1024}.get(text[-1:], None)
    try:
        value = int(float(text[:-1]) * mult) if mult else int(text)
    except ValueError:
        raise UsageError(f"LAB_MEM={text!r} is not a size like 1536M or 2G") from None
    if value < 64:
        raise UsageError(f"LAB_MEM={text!r}: at least 64M")
    return value


def build_parser() -> argparse.ArgumentParser:
    """lab/run's options (their environment defaults are applied by parse_args)."""
    parser = argparse.ArgumentParser(
        prog="lab/run",
        description="Run a command as root inside the lab kernel (user-mode Linux, or with "
                    "--vm a Debian VM with its stock kernel under QEMU).")
    parser.add_argument("--vm", action="store_true",
                        help="boot the Debian 12 lab VM (stock kernel) instead of user-mode "
                             "Linux; its image is built on first use (lab/vm-image)")
    parser.add_argument("--timeout", type=int, default=None,
                        help="seconds before the guest is killed (default LAB_TIMEOUT or 1800)")
    parser.add_argument("--mem", default=None,
                        help="guest memory (default LAB_MEM or 1536M; 4G with --vm)")
    parser.add_argument("--kernel", default=None, metavar="SUITE",
                        help="with --vm: boot the kernel of another Debian suite (e.g. forky) "
                             "instead of the image's own 6.1 (default LAB_VM_KERNEL)")
    parser.add_argument("--cpus", type=int, default=None,
                        help="guest CPUs (default LAB_CPUS, else 1 for user-mode Linux and "
                             "the host's, at most 4, for the VM); more than 1 under user-mode "
                             "Linux boots the kernel lab/build-uml --smp builds")
    parser.add_argument("--clock", default=None, metavar="|".join(CLOCKS),
                        help="the guest's clock: real (the host's), virtual (skips idle "
                             "time), infcpu (CPU work takes none); default LAB_CLOCK or real")
    parser.add_argument("--link", action="append", default=[], metavar="HOSTIF",
                        help="user-mode Linux: give the guest a network device vecN on the "
                             "host interface HOSTIF (UML's vector transport, raw socket; "
                             "HOSTIF,KEY=VALUE,... sets the device's options); "
                             "repeatable. Joins lab kernels through the host (e.g. the two "
                             "ends of a host veth pair): docs/multi-cpu.md")
    parser.add_argument("cmd", nargs=argparse.REMAINDER, help="command and arguments")
    return parser


def parse_args(argv: list[str], environ: dict[str, str]) -> argparse.Namespace:
    """lab/run's options and command, with the environment's knobs as defaults; a
    UsageError for what does not make sense."""
    args = build_parser().parse_args(argv)
    if not args.cmd:
        raise UsageError("no command given")
    try:
        if args.timeout is None:
            args.timeout = int(environ.get("LAB_TIMEOUT", "1800"))
        if args.cpus is None:
            default = min(os.cpu_count() or 1, 4) if args.vm else 1
            args.cpus = int(environ.get("LAB_CPUS") or default)
    except ValueError as exc:
        raise UsageError(f"not a number: {exc}") from None
    if args.timeout <= 0:
        raise UsageError("--timeout must be a positive number of seconds")
    if args.cpus <= 0:
        raise UsageError("--cpus must be at least 1")
    _pick_kernel(args, environ)
    for link in args.link:
        link_options(link)  # a UsageError now, before anything is created
    args.mem_mb = parse_mem(args.mem or environ.get("LAB_MEM") or ("4G" if args.vm else "1536M"))
    return args


def _pick_kernel(args: argparse.Namespace, environ: dict[str, str]) -> None:
    """--kernel (a Debian suite, VM only) and --clock (user-mode Linux only), with their
    environment defaults; UsageError for a combination that does not exist."""
    if args.kernel is None:
        args.kernel = environ.get("LAB_VM_KERNEL") or None
    if args.kernel and not args.vm:
        raise UsageError("--kernel needs --vm (user-mode Linux has its own kernel)")
    args.clock = args.clock or environ.get("LAB_CLOCK") or "real"
    if args.clock not in CLOCKS:
        raise UsageError(f"clock {args.clock!r}: one of {', '.join(CLOCKS)}")
    if args.vm and args.clock != "real":
        raise UsageError(f"--clock {args.clock} needs user-mode Linux (the VM keeps the "
                         "host's clock)")
    if not args.vm and args.cpus > 1 and args.clock != "real":
        raise UsageError(f"--cpus {args.cpus} with --clock {args.clock}: the virtual clock "
                         "needs a kernel with one CPU")
    if args.vm and args.link:
        raise UsageError("--link needs user-mode Linux (the VM's network is QEMU's)")
    if not args.vm and args.cpus > MAX_UML_CPUS:
        raise UsageError(f"--cpus {args.cpus}: user-mode Linux is built for at most "
                         f"{MAX_UML_CPUS}")


def memory_dir(mem_mb: int) -> str:
    """UML keeps guest RAM in an unlinked file in TMPDIR: pick a tmpfs big enough for it."""
    for cand in ("/dev/shm", tempfile.gettempdir()):
        try:
            if shutil.disk_usage(cand).free > mem_mb * 1024 * 1024 * 1.1:
                return cand
        except OSError:
            continue
    raise UsageError(f"no room for {mem_mb} MiB of guest memory in /dev/shm or "
                     f"{tempfile.gettempdir()}")


def no_core_dumps() -> None:
    """A UML panic aborts the process: do not leave a 1.5 GiB core file behind."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def uml_kernel(args: argparse.Namespace) -> tuple[Path, str]:
    """The user-mode kernel's folder for --clock and --cpus, and what installs it."""
    if args.cpus > 1:
        return SMP
    uml_dir, _, installer = CLOCKS[args.clock]
    return uml_dir, installer


# --link's vector-device options unless the link names its own (HOSTIF,KEY=VALUE,...).
LINK_DEFAULTS = {"depth": "128", "gro": "1"}
SYS_NET = Path("/sys/class/net")
# A host interface's name (IFNAMSIZ: at most 15 bytes, no '/' or blank) and an option's
# key and value: UML joins its arguments into one command line split at blanks, so a
# blank, or anything past these, could pass the guest kernel a parameter of its own.
IFNAME = re.compile(r"[A-Za-z0-9_.-]{1,15}")
OPTION = re.compile(r"[A-Za-z0-9_.:/-]+")


def link_options(link: str) -> str:
    """The UML vector device options for one --link: `HOSTIF` or `HOSTIF,KEY=VALUE,...`
    (e.g. `veth0,gro=0,vec=0`; `tap0,transport=tap`), over LINK_DEFAULTS."""
    name, *pairs = link.split(",")
    if not IFNAME.fullmatch(name):
        raise UsageError(f"--link {link!r}: the interface is 1-15 of A-Z a-z 0-9 _ . -")
    # A host tap device is read through its own file (transport=tap); anything else
    # (a veth end, a NIC) through a raw socket, whose 208 KiB buffer drops bursts.
    tap = (SYS_NET / name / "tun_flags").exists()
    opts = {"transport": "tap" if tap else "raw", "ifname": name, **LINK_DEFAULTS}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not OPTION.fullmatch(key) or not OPTION.fullmatch(value):
            raise UsageError(f"--link {link!r}: options are KEY=VALUE after the interface "
                             "(each of A-Z a-z 0-9 _ . : / -)")
        opts[key] = value
    return ",".join(f"{k}={v}" for k, v in opts.items())


def _uml_argv(uml_dir: Path, args: argparse.Namespace, run_dir: Path) -> list[str]:
    """The UML kernel's command line: the host's root read-only through hostfs, our init,
    the console on our stdout, the run folder, the modules folder, the clock and the
    CPUs."""
    # SMP needs the seccomp-based userspace (arch/um: "SMP is not supported with PTRACE
    # userspace")
    cpus = [f"ncpus={args.cpus}", "seccomp=on"] if args.cpus > 1 else []
    links = [f"vec{i}:{link_options(link)}" for i, link in enumerate(args.link)]
    return [
        str(uml_dir / "linux.uml"), f"mem={args.mem_mb}M", "root=/dev/root",
        "rootfstype=hostfs", "rootflags=/", "ro", f"init={INIT}", "con0=null,fd:1",
        "con=null", "quiet", "loglevel=1", *CLOCKS[args.clock][1], *cpus, *links,
        f"apn_run={run_dir}", f"apn_modules={uml_dir / 'modules'}",
    ]


def run_uml(args: argparse.Namespace, run_dir: Path, stdout_tty: bool) -> int:
    """Run args.cmd in a user-mode Linux kernel; the command's exit code (or lab/run's
    own: timeout, interrupted, no result)."""
    uml_dir, installer = uml_kernel(args)
    if not (uml_dir / "linux.uml").is_file():
        raise UsageError(f"no lab kernel for --clock {args.clock} --cpus {args.cpus} in "
                         f"{uml_dir}: run {installer}")
    (run_dir / "repo").write_text(str(REPO))
    (run_dir / "cmd.sh").write_text(guest_script(args.cmd, args.timeout, REPO, "uml",
                                                 stdout_tty,
                                                 host_meter=run_dir / HOST_METER_FILE,
                                                 clock=args.clock))
    argv = _uml_argv(uml_dir, args, run_dir)
    env = dict(os.environ, TMPDIR=memory_dir(args.mem_mb))
    with open(run_dir / "uml.log", "wb") as uml_log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stderr=uml_log, env=env,
                                cwd=run_dir, start_new_session=True,
                                preexec_fn=no_core_dumps)
    # The handlers stay until lab/run exits: a signal during its cleanup still only kills
    # what is left of the guest.
    interrupted, _ = kill_on_signals(proc)
    return wait_guest(proc, run_dir, args.timeout + 30, UML, [run_dir / "uml.log"],
                      interrupted)


def _vm_kernel(args: argparse.Namespace, image: Image) -> tuple[Path, Path, list[Share]]:
    """(kernel, initrd, extra shares) to boot the image with: its own kernel, or with
    --kernel SUITE that suite's kernel and its modules folder."""
    from lab import qemu_vm
    from lab import vm_kernel
    from lab.build_step import ImageError

    if not args.kernel:
        return image.kernel, image.initrd, []
    try:
        k = vm_kernel.ensure(args.kernel, image.dir / "busybox", sys.stderr.isatty())
    except ImageError as exc:
        raise UsageError(str(exc)) from None
    return k.kernel, k.initrd, [qemu_vm.Share("modules", k.modules, readonly=True,
                                              guest_path=Path("/usr/lib/modules") / k.release)]


def _vm_accel_and_image() -> tuple[str, str, Image]:
    """(accelerator, why, the current lab VM image, built first if needed)."""
    from lab import qemu_vm
    from lab import vm_image
    from lab.build_step import ImageError

    if shutil.which("qemu-system-x86_64") is None:
        raise UsageError("qemu-system-x86_64 not found: run lab/provision --host-vm")
    try:
        accel, why = qemu_vm.choose_accel(os.environ.get("LAB_VM_ACCEL", "auto"))
    except ValueError as exc:
        raise UsageError(f"LAB_VM_ACCEL: {exc}") from None
    try:
        return accel, why, vm_image.ensure(progress=sys.stderr.isatty())
    except ImageError as exc:
        raise UsageError(str(exc)) from None


def run_qemu(args: argparse.Namespace, run_dir: Path, stdout_tty: bool) -> int:
    """Run args.cmd in the lab VM under QEMU; the command's exit code (or lab/run's own)."""
    from lab import qemu_vm

    accel, why, image = _vm_accel_and_image()
    kernel, initrd, extra = _vm_kernel(args, image)
    (run_dir / "cmd.sh").write_text(guest_script(
        args.cmd, args.timeout, REPO, f"qemu-{accel}", stdout_tty,
        host_meter=qemu_vm.GUEST_RUN / HOST_METER_FILE))
    shares = [qemu_vm.Share("repo", REPO), qemu_vm.Share("run", run_dir,
                                                         guest_path=qemu_vm.GUEST_RUN),
              *qemu_vm.git_shares(REPO), *qemu_vm.venv_shares(REPO), *extra]
    try:
        argv = qemu_vm.qemu_argv(kernel=kernel, initrd=initrd, disk=image.disk,
                                 init=VM_INIT, shares=shares, accel=accel,
                                 mem_mb=args.mem_mb, cpus=args.cpus,
                                 console_log=run_dir / "console.log")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    (run_dir / "accel").write_text(f"{accel}: {why}\n")
    # Boot and power-off take seconds under TCG; the guest's own timeout bounds CMD.
    return qemu_vm.run_vm(argv, run_dir, args.timeout + 120, run_dir / "qemu.log")


def main(argv: list[str] | None = None) -> int:
    """lab/run: the command's exit code, or 2 with one line on stderr for a usage error."""
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv, dict(os.environ))
        run_dir = Path(tempfile.mkdtemp(prefix="apn-lab-"))
        try:
            os.chmod(run_dir, 0o755)
            stdout_tty = sys.stdout.isatty()
            sys.stdout.flush()
            # What the host's scheduler gives the lab kernel (lab/run's process tree),
            # for the guest to mark points the machine starved (testbed.labkernel).
            with HostMeter(os.getpid(), run_dir / HOST_METER_FILE):
                rc = (run_qemu if args.vm else run_uml)(args, run_dir, stdout_tty)
            if rc == RC_TIMEOUT and (run_dir / "rc").exists():
                # The guest's own `timeout` stopped CMD (not the host's kill).
                print(f"lab/run: the command timed out after {args.timeout} s",
                      file=sys.stderr)
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)
    except UsageError as exc:
        print(f"lab/run: {exc}", file=sys.stderr)
        return 2
    return rc


if __name__ == "__main__":
    sys.exit(main())
