"""The lab scripts without a guest: lab/run's arguments, the guest's command script, KVM
detection, QEMU's command line, the shares, the image recipe and its initrd pieces."""

import lzma
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lab import build_uml, guest, qemu_vm, vm_boot, vm_box, vm_recipe, vm_rootfs
from lab import run as lab_run
from lab.build_step import ImageError
from lab.lab_paths import LAB


# ---- lab/run arguments -----------------------------------------------------------------

def test_defaults_differ_per_route():
    uml = lab_run.parse_args(["true"], {})
    vm = lab_run.parse_args(["--vm", "true"], {})
    assert (uml.vm, uml.mem_mb, uml.timeout) == (False, 1536, 1800)
    assert (vm.vm, vm.mem_mb, vm.kernel) == (True, 4096, None)
    assert uml.cmd == ["true"]


def test_command_arguments_are_not_options_of_lab_run():
    args = lab_run.parse_args(["--vm", "pytest", "--timeout", "3", "-k", "x"], {})
    assert args.cmd == ["pytest", "--timeout", "3", "-k", "x"] and args.timeout == 1800


def test_environment_knobs():
    args = lab_run.parse_args(["--vm", "true"], {"LAB_MEM": "2G", "LAB_TIMEOUT": "60",
                                                 "LAB_CPUS": "1", "LAB_VM_KERNEL": "forky"})
    assert (args.mem_mb, args.timeout, args.cpus, args.kernel) == (2048, 60, 1, "forky")


@pytest.mark.parametrize("argv, env, msg", [
    ([], {}, "no command"),
    (["--timeout", "0", "true"], {}, "positive"),
    (["--kernel", "forky", "true"], {}, "needs --vm"),
    (["true"], {"LAB_MEM": "lots"}, "not a size"),
    (["true"], {"LAB_MEM": "16M"}, "at least 64M"),
    (["--vm", "--cpus", "0", "true"], {}, "at least 1"),
])
def test_bad_arguments_are_one_line_errors(argv, env, msg):
    with pytest.raises(lab_run.UsageError, match=msg):
        lab_run.parse_args(argv, env)


def test_clock_picks_the_kernel_and_its_option(tmp_path):
    """--clock (or LAB_CLOCK) boots Debian's kernel on the host's clock, or lab/build-uml's
    kernel in time-travel mode; the guest learns which (APN_LAB_CLOCK)."""
    cases = {"real": ("uml", []), "virtual": ("uml-tt", ["time-travel"]),
             "infcpu": ("uml-tt", ["time-travel=inf-cpu"])}
    for clock, (folder, option) in cases.items():
        for argv, env in ((["--clock", clock, "true"], {}), (["true"], {"LAB_CLOCK": clock})):
            args = lab_run.parse_args(argv, env)
            uml_dir = lab_run.CLOCKS[args.clock][0]
            line = lab_run._uml_argv(uml_dir, args, tmp_path)
            assert uml_dir.name == folder and line[0] == str(uml_dir / "linux.uml")
            assert [a for a in line if a.startswith("time-travel")] == option
            assert f"apn_modules={uml_dir / 'modules'}" in line
        assert guest.guest_env(tmp_path, "uml", True, {}, clock=clock)["APN_LAB_CLOCK"] == clock
    assert lab_run.parse_args(["true"], {}).clock == "real"


def test_cpus_boot_the_smp_kernel_with_ncpus(tmp_path):
    """One CPU is Debian's kernel (no ncpus=); --cpus N (or LAB_CPUS) boots the kernel
    lab/build-uml --smp builds with ncpus=N; the VM keeps its own default."""
    one = lab_run.parse_args(["true"], {})
    assert one.cpus == 1 and lab_run.uml_kernel(one)[0] == lab_run.UML_DIR
    assert not [a for a in lab_run._uml_argv(lab_run.UML_DIR, one, tmp_path)
                if a.startswith("ncpus")]
    for argv, env in ((["--cpus", "2", "true"], {}), (["true"], {"LAB_CPUS": "2"})):
        args = lab_run.parse_args(argv, env)
        uml_dir, installer = lab_run.uml_kernel(args)
        assert uml_dir.name == "uml-smp" and "--smp" in installer
        assert "ncpus=2" in lab_run._uml_argv(uml_dir, args, tmp_path)
    assert lab_run.parse_args(["--vm", "true"], {}).cpus == min(os.cpu_count() or 1, 4)


def test_links_give_the_guest_vector_devices_on_host_interfaces(tmp_path):
    """--link HOSTIF (repeatable) joins a user-mode kernel to a host interface as vecN."""
    args = lab_run.parse_args(["--link", "apn2k-a", "--link", "apn2k-c", "true"], {})
    line = lab_run._uml_argv(lab_run.UML_DIR, args, tmp_path)
    assert [a for a in line if a.startswith("vec")] == [
        "vec0:transport=raw,ifname=apn2k-a,depth=128,gro=1",
        "vec1:transport=raw,ifname=apn2k-c,depth=128,gro=1"]
    with pytest.raises(lab_run.UsageError, match="needs user-mode Linux"):
        lab_run.parse_args(["--vm", "--link", "x", "true"], {})


def test_a_link_may_name_its_vector_options(tmp_path):
    """--link HOSTIF,KEY=VALUE,... overrides the vector device's defaults; a malformed
    option is a usage error before anything starts."""
    args = lab_run.parse_args(["--link", "apn2k-a,vec=0,gro=0", "true"], {})
    line = lab_run._uml_argv(lab_run.UML_DIR, args, tmp_path)
    assert [a for a in line if a.startswith("vec")] == [
        "vec0:transport=raw,ifname=apn2k-a,depth=128,gro=0,vec=0"]
    with pytest.raises(lab_run.UsageError, match="KEY=VALUE"):
        lab_run.parse_args(["--link", "apn2k-a,gro", "true"], {})


@given(st.text(max_size=40))
def test_any_link_text_is_one_blank_free_option_or_a_usage_error(text):
    """Whatever --link is given, the vector device's option string it makes is one token
    (UML joins its arguments into a command line split at blanks: a blank would pass the
    guest a parameter of its own) naming the interface it was given, or a UsageError."""
    try:
        line = lab_run.link_options(text)
    except lab_run.UsageError:
        return
    assert line.split() == [line] and line.isprintable()
    assert f"ifname={text.split(',')[0]}," in line


def test_a_link_on_a_tap_reads_the_tap(tmp_path, monkeypatch):
    """A host tap device is joined with transport=tap (a veth end's raw sockets drop
    bursts: docs/multi-cpu.md)."""
    (tmp_path / "apn2k-t").mkdir()
    (tmp_path / "apn2k-t" / "tun_flags").write_text("0x1002\n")
    monkeypatch.setattr(lab_run, "SYS_NET", tmp_path)
    assert lab_run.link_options("apn2k-t") == "transport=tap,ifname=apn2k-t,depth=128,gro=1"
    assert lab_run.link_options("apn2k-v").startswith("transport=raw,ifname=apn2k-v,")


def test_smp_fragment_turns_the_virtual_clock_off():
    """The SMP kernel's options: lab.config's, with SMP on and time travel off (it needs a
    uniprocessor kernel), and as many CPUs as lab/run allows."""
    fragments, dest, _ = build_uml.FLAVOURS["smp"]
    wanted = build_uml.wanted_options(fragments)
    assert wanted["CONFIG_SMP"] == "y" and wanted["CONFIG_UML_TIME_TRAVEL_SUPPORT"] == "n"
    assert int(wanted["CONFIG_NR_CPUS"]) == lab_run.MAX_UML_CPUS and dest.name == "uml-smp"
    assert build_uml.wanted_options(build_uml.FLAVOURS["tt"][0])["CONFIG_SMP"] == "n"


@pytest.mark.parametrize("argv, env, msg", [
    (["--cpus", "2", "--clock", "virtual", "true"], {}, "needs a kernel with one CPU"),
    (["--cpus", "9", "true"], {}, "at most 8"),
    (["--clock", "fast", "true"], {}, "one of real, virtual, infcpu"),
    (["true"], {"LAB_CLOCK": "warp"}, "one of real"),
    (["--vm", "--clock", "virtual", "true"], {}, "needs user-mode Linux"),
])
def test_bad_clocks_are_one_line_errors(argv, env, msg):
    with pytest.raises(lab_run.UsageError, match=msg):
        lab_run.parse_args(argv, env)


@pytest.mark.parametrize("text, mib", [("1536M", 1536), ("2G", 2048), ("4096", 4096),
                                       ("1048576K", 1024)])
def test_parse_mem(text, mib):
    assert lab_run.parse_mem(text) == mib


# ---- lab/build-uml --------------------------------------------------------------------------



class FakeArchive:
    """An Archive whose index holds the given packages."""

    def __init__(self, *names: str) -> None:
        self.index = {n: {"Package": n, "Version": "1", "SHA256": n} for n in names}

    def packages(self, wanted=None):
        return self.index


def test_build_uml_takes_the_newest_kernel_source(monkeypatch):
    monkeypatch.delenv("LAB_UML_SOURCE", raising=False)
    archive = FakeArchive("linux-source-6.12", "linux-source-7.2", "linux-source-7.10",
                          "linux-source", "linux-doc-7.2")
    assert build_uml.pick_source(archive)["Package"] == "linux-source-7.10"
    monkeypatch.setenv("LAB_UML_SOURCE", "linux-source-6.12")
    assert build_uml.pick_source(archive)["Package"] == "linux-source-6.12"
    monkeypatch.setenv("LAB_UML_SOURCE", "linux-source-5.10")
    with pytest.raises(build_uml.BuildError, match="not in"):
        build_uml.pick_source(archive)


def test_build_uml_fragment_asks_for_the_clock_and_the_lab():
    wanted = build_uml.wanted_options(build_uml.FLAVOURS["tt"][0])
    assert wanted["CONFIG_UML_TIME_TRAVEL_SUPPORT"] == "y" and wanted["CONFIG_SMP"] == "n"
    for option in ("NET_SCH_NETEM", "NFSD", "NFS_FS", "VETH", "BRIDGE", "NET_SCH_HTB",
                   "CACHEFILES", "HOSTFS", "OVERLAY_FS"):
        assert wanted[f"CONFIG_{option}"] == "y"


def test_build_uml_recipe_follows_source_and_fragment(tmp_path):
    source = {"Package": "linux-source-7.2", "Version": "7.2.12-1", "SHA256": "a"}
    fragments = build_uml.FLAVOURS["tt"][0]
    first = build_uml.recipe(source, fragments)
    assert build_uml.recipe(dict(source, SHA256="b"), fragments) != first
    fragment = tmp_path / "lab.config"
    fragment.write_text(build_uml.FRAGMENT.read_text() + "CONFIG_X=y\n")
    assert build_uml.recipe(source, (fragment,)) != first
    assert first.startswith("linux-source-7.2 7.2.12-1")
    assert build_uml.recipe(source, build_uml.FLAVOURS["smp"][0]) != first


# ---- the guest's command script ----------------------------------------------------------

def run_script(script: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """Run a guest script on this host with sh (its `cd` goes to tmp_path)."""
    path = tmp_path / "cmd.sh"
    path.write_text(script)
    return subprocess.run(["sh", str(path)], capture_output=True, text=True, timeout=30)


def test_script_keeps_the_exit_code_through_the_pipe(tmp_path, monkeypatch):
    script = guest.guest_script(["sh", "-c", "echo out; echo err >&2; exit 7"], 30, tmp_path,
                                "uml", stdout_tty=False, environ={})
    script = script.replace("/run/apn-cmd-rc", str(tmp_path / "rc"))
    proc = run_script(script, tmp_path)
    assert proc.returncode == 7
    assert proc.stdout.split() == ["out", "err"]  # stderr joins stdout, as on the console


def test_script_tells_the_guest_about_the_terminal(tmp_path):
    for tty in (True, False):
        script = guest.guest_script(["sh", "-c", "echo $APN_STDOUT_TTY $APN_LAB_KERNEL"], 30,
                                    tmp_path, "qemu-tcg", stdout_tty=tty, environ={})
        script = script.replace("/run/apn-cmd-rc", str(tmp_path / "rc"))
        assert run_script(script, tmp_path).stdout.strip() == f"{int(tty)} qemu-tcg"


def test_script_environment_is_explicit(tmp_path):
    env = guest.guest_env(tmp_path, "uml", True, {"PYTEST_ADDOPTS": "-x", "SECRET": "no",
                                                  "TERM": "xterm", "APN_X": "1"})
    assert env["PYTEST_ADDOPTS"] == "-x" and env["TERM"] == "xterm" and env["APN_X"] == "1"
    assert "SECRET" not in env
    assert env["PATH"].startswith(f"{tmp_path}/.venv/bin:")
    assert env["GIT_CONFIG_VALUE_0"] == str(tmp_path)  # git accepts the shared checkout


def test_script_quotes_arguments(tmp_path):
    script = guest.guest_script(["printf", "%s|", "a b", "$HOME", "'q'"], 30, tmp_path, "uml",
                                stdout_tty=True, environ={})
    assert run_script(script, tmp_path).stdout == "a b|$HOME|'q'|"


def test_script_bounds_the_command(tmp_path):
    script = guest.guest_script(["sleep", "30"], 1, tmp_path, "uml", stdout_tty=True,
                                environ={})
    assert run_script(script, tmp_path).returncode == guest.RC_TIMEOUT


# ---- KVM detection -------------------------------------------------------------------------

def fake_host(tmp_path: Path, modules: list[str], flags: str) -> tuple[Path, Path, Path]:
    dev = tmp_path / "kvm"
    dev.write_text("")
    sysmod = tmp_path / "module"
    for m in modules:
        (sysmod / m).mkdir(parents=True)
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: fpu sse2 {flags}\n")
    return dev, sysmod, cpuinfo


@pytest.mark.parametrize("modules, flags, api, ok, why", [
    (["kvm", "kvm_intel"], "vmx", 12, True, "kvm_intel"),
    (["kvm", "kvm_amd"], "svm", 12, True, "kvm_amd"),
    (["kvm", "kvm_pvm"], "", 12, False, "loaded: kvm_pvm"),  # a PVM-only host, like CI's
    (["kvm", "kvm_intel"], "", 12, False, "no vmx/svm"),
    (["kvm", "kvm_intel"], "vmx", 11, False, "API version 11"),
])
def test_kvm_usable(tmp_path, modules, flags, api, ok, why):
    dev, sysmod, cpuinfo = fake_host(tmp_path, modules, flags)
    got, reason = qemu_vm.kvm_usable(dev, sysmod, cpuinfo, api_version=lambda _: api)
    assert got is ok and why in reason


def test_kvm_missing_or_unopenable(tmp_path):
    dev, sysmod, cpuinfo = fake_host(tmp_path, ["kvm_intel"], "vmx")
    assert qemu_vm.kvm_usable(tmp_path / "nope", sysmod, cpuinfo)[0] is False

    def refuse(_: Path) -> int:
        raise PermissionError(13, "Permission denied")

    ok, why = qemu_vm.kvm_usable(dev, sysmod, cpuinfo, api_version=refuse)
    assert not ok and "Permission denied" in why


def test_choose_accel_honours_a_request():
    assert qemu_vm.choose_accel("tcg")[0] == "tcg"
    assert qemu_vm.choose_accel("kvm")[0] == "kvm"
    with pytest.raises(ValueError):
        qemu_vm.choose_accel("hvf")


# ---- QEMU's command line and the shares ----------------------------------------------------

def argv_for(accel: str, shares=None, snapshot=True) -> list[str]:
    p = Path("/x")
    return qemu_vm.qemu_argv(kernel=p / "vmlinux", initrd=p / "initrd", disk=p / "disk",
                             init=p / "init", shares=shares or [], accel=accel, mem_mb=2048,
                             cpus=2, console_log=p / "log", snapshot=snapshot)


def test_tcg_and_kvm_command_lines():
    tcg, kvm = argv_for("tcg"), argv_for("kvm")
    assert tcg[tcg.index("-accel") + 1] == "tcg,thread=multi"
    assert "-erms" in tcg[tcg.index("-cpu") + 1] and "-avx2" in tcg[tcg.index("-cpu") + 1]
    assert kvm[kvm.index("-accel") + 1] == "kvm" and kvm[kvm.index("-cpu") + 1] == "host"
    assert "-no-reboot" in tcg and tcg[tcg.index("-nic") + 1] == "none"
    drive = tcg[tcg.index("-drive") + 1]
    assert "snapshot=on" in drive
    assert "snapshot=on" not in argv_for("tcg", snapshot=False)[tcg.index("-drive") + 1]


def test_shares_become_virtfs_and_kernel_arguments():
    shares = [qemu_vm.Share("repo", Path("/work/r")),
              qemu_vm.Share("run", Path("/tmp/run1"), guest_path=qemu_vm.GUEST_RUN),
              qemu_vm.Share("git", Path("/work/main/.git"), readonly=True)]
    argv = argv_for("tcg", shares)
    virtfs = [argv[i + 1] for i, a in enumerate(argv) if a == "-virtfs"]
    assert len(virtfs) == 3 and "readonly=on" in virtfs[2] and "readonly" not in virtfs[0]
    assert all("security_model=none" in v for v in virtfs)
    append = argv[argv.index("-append") + 1].split()
    assert "apn_share=repo,/work/r,rw,cache=mmap" in append
    assert "apn_share=run,/apn-run,rw,cache=mmap" in append
    assert "apn_share=git,/work/main/.git,ro,cache=mmap" in append
    assert "apn_run=/apn-run" in append


def test_paths_with_spaces_or_commas_are_refused():
    with pytest.raises(ValueError, match="spaces and commas"):
        argv_for("tcg", [qemu_vm.Share("repo", Path("/work/my repo"))])


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_git_worktree_shares_its_repository(tmp_path):
    main, wt = tmp_path / "main", tmp_path / "wt"
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")
    for argv in (["git", "init", "-q", str(main)],
                 ["git", "-C", str(main), "commit", "-q", "--allow-empty", "-m", "x"],
                 ["git", "-C", str(main), "worktree", "add", "-q", str(wt)]):
        subprocess.run(argv, check=True, env=env, capture_output=True)
    assert qemu_vm.git_shares(main) == []  # .git inside the checkout: nothing extra
    (share,) = qemu_vm.git_shares(wt)
    assert share.path == (main / ".git").resolve() and share.readonly


def test_venv_interpreter_outside_usr_is_shared(tmp_path):
    (tmp_path / ".venv").mkdir()
    cfg = tmp_path / ".venv" / "pyvenv.cfg"
    cfg.write_text("home = /usr/bin\nversion = 3.11.2\n")
    assert qemu_vm.venv_shares(tmp_path) == []
    cfg.write_text("home = /opt/py/3.11.7/bin\n")
    (share,) = qemu_vm.venv_shares(tmp_path)
    assert share.path == Path("/opt/py/3.11.7") and share.readonly
    cfg.write_text("home = /usr/local/bin\n")  # not in the image either
    assert qemu_vm.venv_shares(tmp_path)[0].path == Path("/usr/local")


# ---- the image recipe and its pieces --------------------------------------------------------

def test_recipe_hash_follows_every_part():
    parts = {"provision": "a", "customize": "b"}
    h = vm_recipe.recipe_hash(parts)
    assert h == vm_recipe.recipe_hash(dict(parts)) and len(h) == 64
    assert vm_recipe.recipe_hash({**parts, "customize": "c"}) != h
    assert vm_recipe.recipe_hash({**parts, "ca x.crt": ""}) != h
    # a part's boundary matters: moving text between parts changes the hash
    assert vm_recipe.recipe_hash({"provision": "ab", "customize": ""}) != \
        vm_recipe.recipe_hash({"provision": "a", "customize": "b"})


def test_recipe_names_the_lab_packages_and_the_provision_script():
    parts = vm_recipe.recipe()
    assert parts["provision"] == (LAB / "provision").read_text()
    for pkg in ("openvswitch-testcontroller", "rdma-core", "git", "linux-image-amd64",
                "grub-pc", "openssh-server"):
        assert pkg in parts["mmdebstrap"]


def test_recipe_covers_the_image_scripts(tmp_path, monkeypatch):
    """The shell scripts the build runs are files under lab/image, read when used: an
    edited script is a new recipe (and a new box recipe)."""
    parts = vm_recipe.recipe()
    assert parts["initrd-init"] == (LAB / "image" / "initrd-init").read_text()
    assert parts["customize"] == (LAB / "image" / "customize.sh").read_text() % {
        "label": vm_rootfs.ROOT_LABEL}
    key = tmp_path / "vagrant.pub"
    key.write_text("ssh-rsa AAAA vagrant\n")
    monkeypatch.setattr(vm_box, "vagrant_public_key", lambda: key)
    before = (vm_recipe.recipe_hash(), vm_box.box_recipe_hash())
    for module, attr, changes in ((vm_boot, "INITRD_INIT", (True, True)),
                                  (vm_rootfs, "CUSTOMIZE", (True, True)),
                                  (vm_box, "BOX_FINALIZE", (False, True))):
        edited = tmp_path / attr
        edited.write_text(getattr(module, attr).read_text() + "# edited\n")
        with monkeypatch.context() as m:
            m.setattr(module, attr, edited)
            after = (vm_recipe.recipe_hash(), vm_box.box_recipe_hash())
        assert tuple(a != b for a, b in zip(after, before)) == changes, attr


def test_current_rejects_another_recipe(tmp_path):
    for name in ("disk.raw", "vmlinux", "initrd.img", "busybox"):
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "RELEASE").write_text("6.1.0-57-amd64\n")
    (tmp_path / "RECIPE").write_text("0" * 64 + "\n")
    assert vm_recipe.current(tmp_path) is None
    (tmp_path / "RECIPE").write_text(vm_recipe.recipe_hash() + "\n")
    img = vm_recipe.current(tmp_path)
    assert img is not None and img.release == "6.1.0-57-amd64"
    (tmp_path / "busybox").unlink()
    assert vm_recipe.current(tmp_path) is None


def parse_cpio(data: bytes) -> dict[str, tuple[int, bytes, int]]:
    out, i = {}, 0
    while True:
        assert data[i:i + 6] == b"070701"
        f = [int(data[i + 6 + 8 * k:i + 14 + 8 * k], 16) for k in range(13)]
        mode, size, namesize = f[1], f[6], f[11]
        rdev = (f[9] << 8) | f[10]
        name = data[i + 110:i + 110 + namesize - 1].decode()
        i += 110 + namesize
        i += -i % 4
        body = data[i:i + size]
        i += size
        i += -i % 4
        if name == "TRAILER!!!":
            return out
        out[name] = (mode, body, rdev)


def test_cpio_newc_round_trip():
    arc = vm_boot.cpio_newc([("init", 0o100755, b"#!/bin/sh\n", 0), ("dev", 0o40755, b"", 0),
                              ("dev/console", 0o20600, b"", (5 << 8) | 1)])
    got = parse_cpio(arc)
    assert got["init"] == (0o100755, b"#!/bin/sh\n", 0)
    assert got["dev/console"][2] == (5 << 8) | 1
    assert len(arc) % 4 == 0


def fake_modules(tmp_path: Path) -> Path:
    d = tmp_path / "6.1.0-test"
    (d / "kernel").mkdir(parents=True)
    dep = {"kernel/virtio.ko": [], "kernel/virtio_ring.ko": [],
           "kernel/virtio_pci.ko": ["kernel/virtio_ring.ko", "kernel/virtio.ko"],
           "kernel/virtio_blk.ko.xz": ["kernel/virtio_ring.ko", "kernel/virtio.ko"],
           "kernel/jbd2.ko": [], "kernel/ext4.ko": ["kernel/jbd2.ko"],
           "kernel/9pnet.ko": [], "kernel/9pnet_virtio.ko": ["kernel/9pnet.ko"],
           "kernel/9p.ko": ["kernel/9pnet.ko"]}
    (d / "modules.dep").write_text("".join(f"{m}: {' '.join(v)}\n" for m, v in dep.items()))
    (d / "modules.builtin").write_text("kernel/crc32c_generic.ko\n")
    for m in dep:
        data = f"module {m}".encode()
        (d / m).write_bytes(lzma.compress(data) if m.endswith(".xz") else data)
    return d


def test_module_closure_loads_dependencies_first(tmp_path):
    d = fake_modules(tmp_path)
    order = vm_boot.module_closure(d, vm_boot.INITRD_MODULES)
    names = [Path(m).name for m in order]
    assert names.index("virtio.ko") < names.index("virtio_pci.ko")
    assert names.index("jbd2.ko") < names.index("ext4.ko")
    assert names.index("9pnet.ko") < names.index("9pnet_virtio.ko") < names.index("9p.ko")
    assert len(names) == len(set(names)) and "crc32c_generic.ko" not in names  # built in
    with pytest.raises(ImageError, match="neither built in"):
        vm_boot.module_closure(d, ("nosuchmod",))


def test_initrd_holds_init_busybox_and_uncompressed_modules(tmp_path):
    d = fake_modules(tmp_path)
    got = parse_cpio(vm_boot.build_initrd(d, b"BUSYBOX"))
    assert got["bin/busybox"][1] == b"BUSYBOX" and got["init"][0] == 0o100755
    assert got["init"][1] == (LAB / "image" / "initrd-init").read_bytes()
    assert got["modules/virtio_blk.ko"][1] == b"module kernel/virtio_blk.ko.xz"
    order = got["modules.order"][1].decode().split()
    assert order[-1] == "9p.ko" and "virtio_blk.ko" in order
    assert got["dev/console"][2] == (5 << 8) | 1


def fake_bzimage(payload: bytes) -> bytes:
    setup_sects = 4
    head = bytearray((setup_sects + 1) * 512)
    head[0x1F1] = setup_sects
    head[0x202:0x206] = b"HdrS"
    offset = 64
    struct.pack_into("<II", head, 0x248, offset, len(payload))
    return bytes(head) + b"\0" * offset + payload + b"tail"


def test_uncompressed_kernel_from_an_xz_bzimage():
    elf = b"\x7fELF" + os.urandom(1000)
    assert vm_boot.uncompressed_kernel(fake_bzimage(lzma.compress(elf))) == elf
    with pytest.raises(ImageError, match="compression"):
        vm_boot.uncompressed_kernel(fake_bzimage(b"\x00\x01\x02\x03\x04\x05"))
    with pytest.raises(ImageError, match="bzImage"):
        vm_boot.uncompressed_kernel(b"\0" * 4096)


# ---- lab/provision ---------------------------------------------------------------------------

def provision_list(role: str) -> list[str]:
    return subprocess.run(["bash", str(LAB / "provision"), role, "--list"], check=True,
                          capture_output=True, text=True).stdout.split()


def test_provision_lists_what_each_role_needs():
    vm = provision_list("--vm")
    assert {"openvswitch-switch", "openvswitch-testcontroller", "mininet", "git", "rdma-core",
            "nfs-kernel-server"} <= set(vm)
    host = provision_list("--host")
    assert "patchelf" in host and "qemu-system-x86" not in host
    assert {"qemu-system-x86", "mmdebstrap"} <= set(provision_list("--host-vm"))
    assert {"vagrant", "vagrant-libvirt", "libvirt-daemon-system"} <= \
        set(provision_list("--vagrant"))


def test_provision_refuses_unknown_arguments():
    proc = subprocess.run(["bash", str(LAB / "provision"), "--bogus"], capture_output=True,
                          text=True)
    assert proc.returncode == 2 and "usage" in proc.stderr


def test_script_names_the_host_meter_file(tmp_path):
    script = guest.guest_script(["true"], 60, tmp_path, "uml", False, {},
                                host_meter=tmp_path / "host-meter.json")
    assert f"export APN_HOST_METER={tmp_path / 'host-meter.json'}" in script
    assert "APN_HOST_METER" not in guest.guest_script(["true"], 60, tmp_path, "uml", False, {})


def test_host_meter_writes_what_the_guest_reads(tmp_path, monkeypatch):
    """lab/run's meter of its own process tree, read back as the guest does: a busy child
    shows as CPU time (its 0.5 s of CPU, however busy the host: not a share of wall time,
    which another load on the machine would shrink), and two samples give shares of the
    wall time."""
    from testbed import labkernel
    path = tmp_path / labkernel.HOST_METER_FILE
    monkeypatch.setenv(labkernel.HOST_METER_ENV, str(path))
    with labkernel.HostMeter(os.getpid(), path):
        first = labkernel.host_sample()
        child = subprocess.Popen([sys.executable, "-c", "import time\n"
                                  "while time.process_time() < 0.5: pass\n"
                                  "print('spun', flush=True)\ntime.sleep(60)"],
                                 stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None and child.stdout.readline() == "spun\n"
        import time
        time.sleep(2 * labkernel.HOST_METER_PERIOD_S + 0.2)  # sampled while it lives
        second = labkernel.host_sample()
        child.kill()
        child.wait()
    assert first is not None and second is not None and second[0] > first[0]
    assert second[1] - first[1] >= 0.45, (first, second)  # the child's 0.5 s of CPU
    share = labkernel.host_share(first, second)
    assert share["host_cpu_pct"] > 0 and share["host_wait_pct"] >= 0
    assert share["host_steal_pct"] >= 0 and second[3] >= first[3]
    monkeypatch.delenv(labkernel.HOST_METER_ENV)
    assert labkernel.host_sample() is None


STAT = """cpu  {user} 0 500 {idle} 40 0 7 {steal} 0 0
cpu0 {user} 0 250 {idle} 20 0 3 {steal} 0 0
cpu1 0 0 250 0 20 0 4 0 0 0
intr 1 2 3
"""


def test_steal_is_seconds_per_cpu_from_proc_stat(tmp_path):
    """/proc/stat's 8th figure (steal, in USER_HZ ticks summed over the CPUs) over the
    CPUs it sums: 2 CPUs with 4 s stolen between them is 2 s a CPU; unreadable is 0."""
    from testbed import procfs
    stat = tmp_path / "stat"
    stat.write_text(STAT.format(user=100, idle=900, steal=4 * procfs.USER_HZ))
    assert procfs.steal_s(stat) == 2.0
    stat.write_text("cpu  1 2 3\n")
    assert procfs.steal_s(stat) == 0.0
    assert procfs.steal_s(tmp_path / "absent") == 0.0


def test_host_share_names_the_stolen_share_of_wall_time():
    """Two meter samples 10 s apart with 1.5 s stolen from each CPU: 15 % steal, beside
    the kernel's own CPU and wait shares."""
    from testbed import labkernel
    share = labkernel.host_share((100.0, 5.0, 1.0, 20.0), (110.0, 9.0, 2.0, 21.5))
    assert share == {"host_cpu_pct": 40.0, "host_wait_pct": 10.0, "host_steal_pct": 15.0}


def test_lab_run_and_the_hosts_lab_kernels_start_the_same_code():
    """The lab/run script and testbed's LabKernel both run the module lab.run from the
    repository root (where lab and testbed import with no sys.path edit), the script
    with the machine's python3 before any venv exists."""
    from testbed.labkernel import LAB_RUN, LabKernel
    assert LabKernel(["true"], console=Path("/dev/null"), timeout_s=5).argv[3:6] == \
        [sys.executable, *LAB_RUN]
    module = subprocess.run([sys.executable, *LAB_RUN, "--help"], cwd=LAB.parent,
                            capture_output=True, text=True, timeout=60)
    script = subprocess.run([str(LAB / "run"), "--help"], cwd="/",  # from any folder
                            capture_output=True, text=True, timeout=60)
    for proc in (module, script):
        assert proc.returncode == 0 and proc.stdout.startswith("usage: lab/run"), proc.stderr
