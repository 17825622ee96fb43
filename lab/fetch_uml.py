"""lab/fetch-uml: install a user-mode Linux kernel that runs on this host into REPO/.lab/uml.

Why not Debian 12's own package (user-mode-linux 6.1)? UML up to 6.12 saves the guest's FPU
state with a fixed-size XSAVE buffer, and hosts whose CPUs have AMX (Sapphire Rapids and
later: 10-11 KB of XSAVE state) refuse it, so every guest process dies with SIGSEGV before
init runs. UML 6.13+ sizes the buffer from the host. So we take Debian testing's
user-mode-linux package (same kernel configuration, newer kernel) together with the C
library it was built against (it needs glibc >= 2.38, Debian 12 has 2.36), unpack both
into REPO/.lab/uml without touching the system, and point the kernel binary at that C
library with patchelf.

Trust chain, all from Debian's archive: the suite's InRelease is checked with gpgv against
Debian's archive keyring, Packages.xz against InRelease's SHA256, each .deb against the
Packages SHA256. Idempotent: does nothing if the wanted version is already unpacked.

Environment: LAB_UML_SUITE (default forky), LAB_DEBIAN_MIRROR (default deb.debian.org).
Only the Python standard library plus dpkg-deb, gpgv and patchelf (Debian 12 packages).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from lab.debian_archive import Archive, ArchiveError
from lab.lab_paths import UML_DIR as DEST

MIRROR = os.environ.get("LAB_DEBIAN_MIRROR", "https://deb.debian.org/debian").rstrip("/")
SUITE = os.environ.get("LAB_UML_SUITE", "forky")
PACKAGES = ("user-mode-linux", "libc6")


def fail(msg: str) -> None:
    """One line on stderr, exit 2."""
    print(f"lab/fetch-uml: {msg}", file=sys.stderr)
    raise SystemExit(2)


def main() -> None:
    """Check the host and its tools, then install the kernel (or fail with one line)."""
    argparse.ArgumentParser(prog="lab/fetch-uml", description=__doc__.splitlines()[0]
                            .split(": ", 1)[1]).parse_args()
    if os.uname().machine != "x86_64":
        fail(f"only x86_64 hosts are supported (this is {os.uname().machine})")
    for tool in ("gpgv", "dpkg-deb", "patchelf"):
        if shutil.which(tool) is None:
            fail(f"{tool} not found (lab/provision --host installs it)")
    try:
        install()
    except ArchiveError as exc:
        fail(str(exc))


def stage(archive: Archive, found: dict[str, dict[str, str]], version: str,
          tmp: Path) -> Path:
    """tmp/uml: the packages unpacked, their C library beside the kernel binary and the
    binary pointed at it (patchelf, with the paths it will have in DEST)."""
    root = tmp / "root"
    for pkg in PACKAGES:
        print(f"lab/fetch-uml: {pkg} {found[pkg]['Version']} from {SUITE}", flush=True)
        archive.unpack(found[pkg], root, tmp)
    staged = tmp / "uml"
    staged.mkdir()
    libdir = staged / "lib"
    shutil.copytree(root / "usr/lib/x86_64-linux-gnu", libdir, symlinks=True)
    shutil.copytree(root / "usr/lib/uml/modules", staged / "modules", symlinks=True)
    kernel = staged / "linux.uml"
    shutil.copy2(root / "usr/bin/linux.uml", kernel)
    subprocess.run(["patchelf", "--set-interpreter", str(DEST / "lib/ld-linux-x86-64.so.2"),
                    "--set-rpath", str(DEST / "lib"), str(kernel)], check=True)
    (staged / "VERSION").write_text(version + "\n")
    return staged


def install() -> None:
    """Unpack the suite's user-mode-linux and libc6 into DEST, unless that version is
    there already."""
    archive = Archive(MIRROR, SUITE)
    with tempfile.TemporaryDirectory(prefix="fetch-uml-") as tmpname:
        found = archive.packages(set(PACKAGES))
        missing = [p for p in PACKAGES if p not in found]
        if missing:
            fail(f"{', '.join(missing)} not in {SUITE}")
        version = found["user-mode-linux"]["Version"] + "+" + found["libc6"]["Version"]
        stamp = DEST / "VERSION"
        if stamp.exists() and stamp.read_text().strip() == version:
            print(f"lab/fetch-uml: user-mode-linux {version} already in {DEST}")
            return
        staged = stage(archive, found, version, Path(tmpname))
        if DEST.exists():
            shutil.rmtree(DEST)
        DEST.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(staged), DEST)
        kvers = ", ".join(p.name for p in (DEST / "modules").iterdir())
        print(f"lab/fetch-uml: kernel {kvers} installed in {DEST}")


if __name__ == "__main__":
    main()
