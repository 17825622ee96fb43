"""Whether the kernel the tests run on is software-emulated (QEMU's TCG), decided by the
test harness from the environment and never asked of the testbed: system tests skip
or widen their tolerances on this answer, so it must not come from the code under test
(`testbed.experiment.resolve.explain.software_emulated`, which marks points `tcg`); a test
instead holds the testbed's answer to this one.

Two witnesses, each a table of rules tried in order (the first that speaks decides):
  launch  what lab/run launched, handed to the guest as APN_LAB_KERNEL (`qemu-tcg`
          when QEMU ran with `-accel tcg` because /dev/kvm could not run a stock
          kernel, `qemu-kvm` with `-accel kvm`, `uml` for user-mode Linux); absent on a
          kernel of its own (the Vagrant VM, bare metal).
  kernel  what the running kernel reports of its CPU: QEMU's TCG names its CPU models
          "QEMU TCG CPU version ..." (`-cpu max` and `qemu64`, lab/run --vm's); user-mode
          Linux runs on the host's CPU; a CPU without the `hypervisor` flag is bare metal;
          KVM (and VirtualBox's KVM interface) gives the guest its `kvm-clock`; a QEMU
          machine (DMI vendor "QEMU") without kvm-clock runs on TCG with a named CPU
          model (the Vagrant VM without KVM: Nehalem); any other hypervisor (VMware,
          Hyper-V, Xen) virtualises the CPU in hardware.
When both speak they must agree, or the session stops: a harness that cannot tell which
machine it is on must not decide which checks run.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

LAUNCHED = {"qemu-tcg": True, "qemu-kvm": False, "uml": False}


@dataclass(frozen=True)
class Machine:
    """What the environment shows of the CPU the kernel runs on."""

    launched: str  # APN_LAB_KERNEL ("" when lab/run did not start this kernel)
    vendor: str  # /proc/cpuinfo vendor_id
    model: str  # /proc/cpuinfo model name
    flags: frozenset[str]  # /proc/cpuinfo flags
    clocksources: frozenset[str]  # the kernel's available clocksources
    dmi_vendor: str  # /sys/class/dmi/id/sys_vendor ("" without DMI)


@dataclass(frozen=True)
class Verdict:
    """The harness's answer and the evidence it rests on."""

    emulated: bool
    why: str


class Disagreement(Exception):
    """The launch and the kernel say different things about the machine."""


KERNEL_RULES: tuple[tuple[str, Callable[[Machine], bool], bool], ...] = (
    ("model name is QEMU's TCG CPU", lambda m: m.model.startswith("QEMU TCG CPU"), True),
    ("user-mode Linux runs on the host's CPU", lambda m: m.vendor == "User Mode Linux",
     False),
    ("no hypervisor flag: bare metal", lambda m: "hypervisor" not in m.flags, False),
    ("kvm-clock: KVM virtualises the CPU", lambda m: "kvm-clock" in m.clocksources, False),
    ("a QEMU machine without kvm-clock: TCG", lambda m: m.dmi_vendor == "QEMU", True),
    ("another hypervisor virtualises the CPU", lambda m: True, False),
)


def _cpuinfo(text: str) -> dict[str, str]:
    """The first CPU's fields of /proc/cpuinfo."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def _read(path: Path) -> str:
    """A file's text, "" where it does not exist or cannot be read."""
    try:
        return path.read_text()
    except OSError:
        return ""


def read_machine(environ: Mapping[str, str] = os.environ, root: Path = Path("/")) -> Machine:
    """This machine as the environment shows it (root: where /proc and /sys are)."""
    cpu = _cpuinfo(_read(root / "proc/cpuinfo"))
    clocks = _read(root / "sys/devices/system/clocksource/clocksource0/available_clocksource")
    return Machine(environ.get("APN_LAB_KERNEL", ""), cpu.get("vendor_id", ""),
                   cpu.get("model name", ""), frozenset(cpu.get("flags", "").split()),
                   frozenset(clocks.split()), _read(root / "sys/class/dmi/id/sys_vendor").strip())


def by_kernel(m: Machine) -> Verdict:
    """What the kernel's view of its CPU says."""
    for why, rule, emulated in KERNEL_RULES:
        if rule(m):
            return Verdict(emulated, f"{why} (model {m.model or '?'!r})")
    raise AssertionError("the last rule always speaks")


def decide(m: Machine) -> Verdict:
    """The harness's verdict: the launch's and the kernel's, which must agree.

    Raises Disagreement when they do not (or lab/run named a kind this table lacks)."""
    kernel = by_kernel(m)
    if not m.launched:
        return kernel
    if m.launched not in LAUNCHED:
        raise Disagreement(f"APN_LAB_KERNEL={m.launched!r}: not one of {sorted(LAUNCHED)}")
    if LAUNCHED[m.launched] != kernel.emulated:
        raise Disagreement(f"lab/run launched {m.launched}, but the kernel says "
                           f"{'TCG' if kernel.emulated else 'not TCG'}: {kernel.why}")
    return Verdict(kernel.emulated, f"lab/run launched {m.launched}; {kernel.why}")


@functools.cache
def verdict() -> Verdict:
    """This machine's verdict, read once per test session (Disagreement: see decide)."""
    return decide(read_machine())
