"""lab/build-uml [--smp]: build a user-mode Linux kernel with a virtual clock (REPO/.lab/uml-tt) or with several CPUs (REPO/.lab/uml-smp).

Debian's user-mode-linux package (lab/fetch-uml) runs on the host's clock. Linux's
CONFIG_UML_TIME_TRAVEL_SUPPORT (arch/um, since 5.4) gives UML a clock of its own: with
`time-travel` on its command line the guest's clock jumps ahead whenever nothing is runnable
(waiting on the fibre's round trips costs no wall time, and host load cannot stretch a wait);
with `time-travel=inf-cpu` CPU work takes no guest time either. Debian does not build it, so
this script builds it from Debian's own kernel source package (linux-source-X.Y from
LAB_UML_SUITE, default forky: the same kernel line as lab/fetch-uml's), with
`make ARCH=um defconfig` plus the lab's needs (lab/uml-tt/lab.config: netem, htb, veth,
bridges, nfsd, the NFS client, FS-Cache, ...) all built in. lab/run --clock virtual boots it.

The result is cached by its recipe: the source package's SHA256, the config fragment and this
script. Running it again does nothing unless one of them changed. Build time on a 2-core
Debian 12 VM (2026-12-05, linux-source-7.2 7.2.12): 350-516 s, plus ~20 s to fetch the source.
Needs build-essential, flex, bison, bc, libelf-dev, gpgv and dpkg-deb (lab/provision --host
installs them). Only the Python standard library.

--smp builds the same kernel with CONFIG_SMP instead of the virtual clock (Linux's UML has
SMP since the "um: Add SMP support" series of 2025; the virtual clock needs a uniprocessor
kernel): each virtual CPU is a host thread, so nfsd, the NFS client, TCP and netem, which are
what a lab kernel spends its CPU on, spread over the host's CPUs. lab/run --cpus N boots it
with `ncpus=N`. Its fragment is lab/uml-tt/smp.config, merged over lab.config.

Environment: LAB_UML_SUITE (default forky), LAB_UML_SOURCE (a source package name such as
linux-source-7.2; default the suite's newest), LAB_DEBIAN_MIRROR, LAB_BUILD_JOBS (default:
the host's CPUs).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lab.debian_archive import Archive, ArchiveError
from lab.lab_paths import LAB, UML_SMP_DIR, UML_TT_DIR

MIRROR = os.environ.get("LAB_DEBIAN_MIRROR", "https://deb.debian.org/debian").rstrip("/")
SUITE = os.environ.get("LAB_UML_SUITE", "forky")
FRAGMENT = LAB / "uml-tt" / "lab.config"
SMP_FRAGMENT = LAB / "uml-tt" / "smp.config"
# What each flavour is: its fragments (later ones win), where it goes, what it is called.
FLAVOURS: dict[str, tuple[tuple[Path, ...], Path, str]] = {
    "tt": ((FRAGMENT,), UML_TT_DIR, "with a virtual clock"),
    "smp": ((FRAGMENT, SMP_FRAGMENT), UML_SMP_DIR, "with several CPUs (SMP)"),
}
TOOLS = ("gcc", "make", "flex", "bison", "bc", "dpkg-deb", "gpgv", "strip", "depmod")
SOURCE_NAME = re.compile(r"linux-source-(\d+)\.(\d+)")


class BuildError(Exception):
    """The build cannot go on: one line on stderr, exit 2."""


def say(msg: str) -> None:
    """A progress line on stdout."""
    print(f"lab/build-uml: {msg}", flush=True)


def pick_source(archive: Archive) -> dict[str, str]:
    """The suite's kernel source package: LAB_UML_SOURCE, or the newest linux-source-X.Y."""
    found = {name: fields for name, fields in archive.packages().items()
             if SOURCE_NAME.fullmatch(name)}
    wanted = os.environ.get("LAB_UML_SOURCE")
    if wanted:
        if wanted not in found:
            raise BuildError(f"{wanted} is not in {SUITE} (it has {', '.join(sorted(found))})")
        return found[wanted]
    if not found:
        raise BuildError(f"no linux-source-X.Y package in {SUITE}")
    newest = max(found, key=lambda n: tuple(int(g) for g in SOURCE_NAME.fullmatch(n).groups()))
    return found[newest]


def recipe(source: dict[str, str], fragments: tuple[Path, ...]) -> str:
    """What the kernel is built from, as one hash: the source package, the config fragments
    and this script."""
    h = hashlib.sha256()
    h.update(source["SHA256"].encode())
    for fragment in fragments:
        h.update(fragment.read_bytes())
    h.update(Path(__file__).read_bytes())
    return f"{source['Package']} {source['Version']} recipe {h.hexdigest()[:16]}"


def wanted_options(fragments: tuple[Path, ...]) -> dict[str, str]:
    """The fragments' options, later ones winning: name -> "y" (or "n" for
    `# CONFIG_X is not set`)."""
    out: dict[str, str] = {}
    lines = [line for fragment in fragments for line in fragment.read_text().splitlines()]
    for line in lines:
        if m := re.fullmatch(r"(CONFIG_\w+)=(\S+)", line.strip()):
            out[m.group(1)] = m.group(2)
        elif m := re.fullmatch(r"# (CONFIG_\w+) is not set", line.strip()):
            out[m.group(1)] = "n"
    return out


def unpack_source(archive: Archive, source: dict[str, str], tmp: Path) -> Path:
    """The kernel tree, from the verified .deb's tarball."""
    root = tmp / "pkg"
    say(f"{source['Package']} {source['Version']} from {SUITE}")
    archive.unpack(source, root, tmp)
    tarballs = sorted((root / "usr/src").glob("linux-source-*.tar.*"))
    if not tarballs:
        raise BuildError(f"{source['Package']} holds no linux-source tarball")
    subprocess.run(["tar", "-xf", str(tarballs[0]), "-C", str(tmp)], check=True)
    shutil.rmtree(root)
    return next(p for p in tmp.iterdir() if p.is_dir() and p.name.startswith("linux-source"))


def make(tree: Path, *targets: str, log: Path, jobs: int = 1) -> None:
    """`make ARCH=um TARGETS` in the tree at low priority, its output in log; a BuildError
    naming the log's last line when it fails."""
    argv = ["nice", "-n", "10", "make", "ARCH=um", f"-j{jobs}", *targets]
    with open(log, "a") as out:
        proc = subprocess.run(argv, cwd=tree, stdout=out, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        last = log.read_text(errors="replace").strip().splitlines()[-1:]
        raise BuildError(f"make {' '.join(targets)} failed ({log}): {last}")


def configure(tree: Path, fragments: tuple[Path, ...], log: Path) -> None:
    """defconfig, the fragments merged over it, olddefconfig; a BuildError for any of the
    fragments' options that did not hold (a symbol renamed or a dependency missing)."""
    make(tree, "defconfig", log=log)
    subprocess.run(["sh", "scripts/kconfig/merge_config.sh", "-m", ".config",
                    *map(str, fragments)],
                   cwd=tree, env=dict(os.environ, ARCH="um"), check=True,
                   stdout=subprocess.DEVNULL)
    make(tree, "olddefconfig", log=log)
    config = (tree / ".config").read_text()
    got = {m.group(1): m.group(2) for m in re.finditer(r"^(CONFIG_\w+)=(\S+)$", config, re.M)}
    wrong = [f"{k}={v}" for k, v in wanted_options(fragments).items() if got.get(k, "n") != v]
    if wrong:
        raise BuildError(f"the kernel's config does not hold {', '.join(wrong)} "
                         f"(renamed or a dependency missing; see {fragments[-1]})")


def build(tree: Path, staged: Path, log: Path) -> None:
    """Compile, strip and stage the kernel and its (module-less) modules folder."""
    jobs = int(os.environ.get("LAB_BUILD_JOBS") or os.cpu_count() or 1)
    make(tree, "linux", "modules", log=log, jobs=jobs)
    staged.mkdir()
    subprocess.run(["strip", "-o", str(staged / "linux.uml"), str(tree / "linux")], check=True)
    make(tree, "modules_install", f"INSTALL_MOD_PATH={staged / 'root'}", log=log)
    shutil.move(str(staged / "root/lib/modules"), staged / "modules")
    shutil.rmtree(staged / "root")
    shutil.copy2(tree / ".config", staged / "config")


def install(flavour: str) -> None:
    """Build and install the flavour's kernel into its folder, unless its recipe is there
    already."""
    fragments, dest, what = FLAVOURS[flavour]
    archive = Archive(MIRROR, SUITE)
    source = pick_source(archive)
    version = recipe(source, fragments)
    stamp = dest / "RECIPE"
    if stamp.exists() and stamp.read_text().strip() == version:
        say(f"{version} already in {dest}")
        return
    start = time.monotonic()
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="build-uml-", dir=dest.parent) as tmpname:
        tmp = Path(tmpname)
        tree = unpack_source(archive, source, tmp)
        log = dest.parent / f"build-uml-{flavour}.log"
        log.write_text("")
        say(f"configuring and compiling {tree.name} {what} (log: {log})")
        configure(tree, fragments, log)
        staged = tmp / dest.name
        build(tree, staged, log)
        (staged / "RECIPE").write_text(version + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        shutil.move(str(staged), dest)
    kvers = ", ".join(p.name for p in (dest / "modules").iterdir())
    say(f"kernel {kvers} {what} built in {time.monotonic() - start:.0f} s, installed in {dest}")


def main() -> None:
    """Check the host and its tools, then build (or fail with one line, exit 2)."""
    parser = argparse.ArgumentParser(prog="lab/build-uml",
                                     description=__doc__.splitlines()[0].split(": ", 1)[1])
    parser.add_argument("--smp", action="store_true",
                        help="build the multi-CPU kernel (lab/run --cpus N) instead of the one "
                             "with a virtual clock")
    args = parser.parse_args()
    if os.uname().machine != "x86_64":
        print(f"lab/build-uml: only x86_64 hosts are supported", file=sys.stderr)
        raise SystemExit(2)
    missing = [t for t in TOOLS if shutil.which(t) is None]
    try:
        if missing:
            raise BuildError(f"{', '.join(missing)} not found (lab/provision --host installs "
                             "the build tools)")
        install("smp" if args.smp else "tt")
    except (BuildError, ArchiveError) as exc:
        print(f"lab/build-uml: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
