"""The harness's own reading of whether a kernel is software-emulated (tests/emulation.py),
on the machines the tests run on, each written as its /proc and /sys show it: system
tests skip their model comparisons and widen their delay tolerances on this answer, so
it is tested here against what each machine is, not against the testbed's judgement."""

from pathlib import Path

import pytest

import emulation

HOST_FLAGS = "fpu vme de pse tsc msr pae sse sse2 ht syscall nx lm constant_tsc"

# (name, launched, /proc/cpuinfo's first CPU, clocksources, DMI vendor, emulated?)
MACHINES = [
    ("user-mode Linux (lab/run)", "uml",
     f"vendor_id\t: User Mode Linux\nmodel name\t: UML\nflags\t\t: {HOST_FLAGS} hypervisor",
     "timer", "", False),
    ("lab VM on TCG (lab/run --vm, -cpu max)", "qemu-tcg",
     f"vendor_id\t: AuthenticAMD\nmodel name\t: QEMU TCG CPU version 2.5+\n"
     f"flags\t\t: {HOST_FLAGS} hypervisor", "tsc hpet acpi_pm", "QEMU", True),
    ("lab VM on KVM (lab/run --vm, -cpu host)", "qemu-kvm",
     f"vendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\nflags\t\t: {HOST_FLAGS} hypervisor",
     "kvm-clock tsc hpet acpi_pm", "QEMU", False),
    ("Vagrant VM without KVM (Nehalem on TCG)", "",
     "vendor_id\t: GenuineIntel\nmodel name\t: Intel Core i7 9xx (Nehalem Class Core i7)\n"
     f"flags\t\t: {HOST_FLAGS} hypervisor", "tsc hpet acpi_pm", "QEMU", True),
    ("Vagrant VM with KVM (Nehalem)", "",
     "vendor_id\t: GenuineIntel\nmodel name\t: Intel Core i7 9xx (Nehalem Class Core i7)\n"
     f"flags\t\t: {HOST_FLAGS} hypervisor", "kvm-clock tsc hpet acpi_pm", "QEMU", False),
    ("this build machine (Firecracker, KVM)", "",
     f"vendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\nflags\t\t: {HOST_FLAGS} hypervisor",
     "tsc kvm-clock", "", False),
    ("bare metal", "", f"vendor_id\t: GenuineIntel\nmodel name\t: Intel Xeon\n"
     f"flags\t\t: {HOST_FLAGS}", "tsc hpet acpi_pm", "Dell Inc.", False),
    ("VMware", "", f"vendor_id\t: GenuineIntel\nmodel name\t: Intel Xeon\n"
     f"flags\t\t: {HOST_FLAGS} hypervisor", "tsc hpet acpi_pm", "VMware, Inc.", False),
]


def root_of(tmp_path: Path, cpuinfo: str, clocks: str, dmi: str) -> Path:
    """A folder laid out as / with the machine's /proc and /sys files (two CPUs: only
    the first counts)."""
    files = {"proc/cpuinfo": f"processor\t: 0\n{cpuinfo}\n\nprocessor\t: 1\nmodel name\t: X\n",
             "sys/devices/system/clocksource/clocksource0/available_clocksource": clocks + "\n"}
    if dmi:
        files["sys/class/dmi/id/sys_vendor"] = dmi + "\n"
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


@pytest.mark.parametrize("name,launched,cpuinfo,clocks,dmi,emulated", MACHINES,
                         ids=[m[0] for m in MACHINES])
def test_each_machine_is_read_as_what_it_is(tmp_path, name, launched, cpuinfo, clocks, dmi,
                                            emulated):
    m = emulation.read_machine({"APN_LAB_KERNEL": launched} if launched else {},
                               root_of(tmp_path, cpuinfo, clocks, dmi))
    v = emulation.decide(m)
    assert v.emulated is emulated, v.why
    assert (launched in v.why) if launched else v.why


@pytest.mark.parametrize("launched", ["uml", "qemu-kvm"])
def test_a_launch_the_kernel_contradicts_stops_the_session(tmp_path, launched):
    """lab/run saying a direct kernel where the CPU is QEMU's TCG (or the reverse) is
    an environment the harness cannot trust either way."""
    _, _, cpuinfo, clocks, dmi, _ = MACHINES[1]  # the TCG lab VM
    m = emulation.read_machine({"APN_LAB_KERNEL": launched},
                               root_of(tmp_path, cpuinfo, clocks, dmi))
    with pytest.raises(emulation.Disagreement, match=launched):
        emulation.decide(m)
    m = emulation.read_machine({"APN_LAB_KERNEL": "qemu-tcg"}, root_of(tmp_path, *MACHINES[2][2:5]))
    with pytest.raises(emulation.Disagreement, match="qemu-tcg"):
        emulation.decide(m)


def test_an_unknown_launch_is_refused(tmp_path):
    m = emulation.read_machine({"APN_LAB_KERNEL": "qemu"}, root_of(tmp_path, *MACHINES[1][2:5]))
    with pytest.raises(emulation.Disagreement, match="'qemu'"):
        emulation.decide(m)


def test_the_system_tests_ask_the_harness_not_the_testbed():
    """No system test (nor its conftest) decides emulation with the testbed's judgement."""
    system = Path(__file__).parents[1] / "system"
    users = [p.name for p in system.glob("*.py") if "software_emulated" in p.read_text()
             and p.name != "test_kernel.py"]  # test_kernel.py holds the testbed to it
    assert not users, users

