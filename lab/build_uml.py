"""lab/build-uml: build a user-mode Linux kernel with a virtual clock into REPO/.lab/uml-tt.

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
from lab.lab_paths import LAB, UML_TT_DIR as DEST

MIRROR = os.environ.get("LAB_DEBIAN_MIRROR", "https://deb.debian.org/debian").rstrip("/")
SUITE = os.environ.get("LAB_UML_SUITE", "forky")
FRAGMENT = LAB / "uml-tt" / "lab.config"
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


def recipe(source: dict[str, str]) -> str:
    """What the kernel is built from, as one hash: the source package, the config fragment
    and this script."""
    h = hashlib.sha256()
    h.update(source["SHA256"].encode())
    h.update(FRAGMENT.read_bytes())
    h.update(Path(__file__).read_bytes())
    return f"{source['Package']} {source['Version']} recipe {h.hexdigest()[:16]}"


def wanted_options() -> dict[str, str]:
    """The fragment's options: name -> "y" (or "n" for `# CONFIG_X is not set`)."""
    out: dict[str, str] = {}
    for line in FRAGMENT.read_text().splitlines():
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


def configure(tree: Path, log: Path) -> None:
    """defconfig, the fragment merged over it, olddefconfig; a BuildError for any of the
    fragment's options that did not hold (a symbol renamed or a dependency missing)."""
    make(tree, "defconfig", log=log)
    subprocess.run(["sh", "scripts/kconfig/merge_config.sh", "-m", ".config", str(FRAGMENT)],
                   cwd=tree, env=dict(os.environ, ARCH="um"), check=True,
                   stdout=subprocess.DEVNULL)
    make(tree, "olddefconfig", log=log)
    config = (tree / ".config").read_text()
    got = {m.group(1): m.group(2) for m in re.finditer(r"^(CONFIG_\w+)=(\S+)$", config, re.M)}
    wrong = [f"{k}={v}" for k, v in wanted_options().items() if got.get(k, "n") != v]
    if wrong:
        raise BuildError(f"the kernel's config does not hold {', '.join(wrong)} "
                         f"(renamed or a dependency missing; see {FRAGMENT})")


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


def install() -> None:
    """Build and install the kernel into DEST, unless its recipe is there already."""
    archive = Archive(MIRROR, SUITE)
    source = pick_source(archive)
    version = recipe(source)
    stamp = DEST / "RECIPE"
    if stamp.exists() and stamp.read_text().strip() == version:
        say(f"{version} already in {DEST}")
        return
    start = time.monotonic()
    DEST.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="build-uml-", dir=DEST.parent) as tmpname:
        tmp = Path(tmpname)
        tree = unpack_source(archive, source, tmp)
        log = DEST.parent / "build-uml.log"
        log.write_text("")
        say(f"configuring and compiling {tree.name} (log: {log})")
        configure(tree, log)
        staged = tmp / "uml-tt"
        build(tree, staged, log)
        (staged / "RECIPE").write_text(version + "\n")
        if DEST.exists():
            shutil.rmtree(DEST)
        shutil.move(str(staged), DEST)
    kvers = ", ".join(p.name for p in (DEST / "modules").iterdir())
    say(f"kernel {kvers} with a virtual clock built in {time.monotonic() - start:.0f} s, "
        f"installed in {DEST}")


def main() -> None:
    """Check the host and its tools, then build (or fail with one line, exit 2)."""
    argparse.ArgumentParser(prog="lab/build-uml",
                            description=__doc__.splitlines()[0].split(": ", 1)[1]).parse_args()
    if os.uname().machine != "x86_64":
        print(f"lab/build-uml: only x86_64 hosts are supported", file=sys.stderr)
        raise SystemExit(2)
    missing = [t for t in TOOLS if shutil.which(t) is None]
    try:
        if missing:
            raise BuildError(f"{', '.join(missing)} not found (lab/provision --host installs "
                             "the build tools)")
        install()
    except (BuildError, ArchiveError) as exc:
        print(f"lab/build-uml: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
