"""Verified downloads from Debian's archive, for lab/fetch-uml and lab/vm_kernel.py.

Trust chain, all from Debian's archive: the suite's InRelease is checked with gpgv against
Debian's archive keyring, Packages.xz against InRelease's SHA256, each .deb against the
Packages SHA256. Only the Python standard library plus gpgv and dpkg-deb.
"""

from __future__ import annotations

import hashlib
import lzma
import subprocess
import tempfile
import urllib.request
from pathlib import Path

KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
INDEX = "main/binary-amd64/Packages.xz"


class ArchiveError(Exception):
    """A download failed or did not verify; the message names what."""


def get(url: str) -> bytes:
    """The body at `url` (an ArchiveError if it cannot be downloaded)."""
    try:
        with urllib.request.urlopen(url, timeout=120) as resp:
            return resp.read()
    except OSError as exc:
        raise ArchiveError(f"cannot download {url}: {exc}") from None


def check(data: bytes, sha256: str, what: str) -> bytes:
    """`data` if its SHA-256 is `sha256`, else an ArchiveError naming `what`."""
    if hashlib.sha256(data).hexdigest() != sha256:
        raise ArchiveError(f"{what}: SHA256 mismatch")
    return data


def release_sha256(release: str, name: str) -> str:
    """The SHA256 InRelease lists for the index file `name`."""
    in_sha = False
    for line in release.splitlines():
        if line and not line.startswith(" "):
            in_sha = line.startswith("SHA256:")
            continue
        fields = line.split()
        if in_sha and len(fields) == 3 and fields[2] == name:
            return fields[0]
    raise ArchiveError(f"{name} is not listed in InRelease")


def stanzas(packages: str, wanted: set[str] | None = None) -> dict[str, dict[str, str]]:
    """Package name -> fields of a Packages file (amd64 or all), optionally only `wanted`."""
    out: dict[str, dict[str, str]] = {}
    for block in packages.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            if line and not line[0].isspace() and ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        name = fields.get("Package")
        if name and (wanted is None or name in wanted) \
                and fields.get("Architecture") in ("amd64", "all", None):
            out[name] = fields
    return out


class Archive:
    """One suite of one mirror, its package index verified once."""

    def __init__(self, mirror: str, suite: str) -> None:
        """The suite at the mirror; nothing is downloaded yet."""
        self.mirror = mirror.rstrip("/")
        self.suite = suite
        self._packages: str | None = None

    def release(self) -> str:
        """The suite's InRelease text, after gpgv has checked its signature."""
        with tempfile.TemporaryDirectory(prefix="apn-archive-") as tmp:
            path = Path(tmp) / "InRelease"
            path.write_bytes(get(f"{self.mirror}/dists/{self.suite}/InRelease"))
            proc = subprocess.run(["gpgv", "--keyring", KEYRING, str(path)],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                raise ArchiveError(f"InRelease of {self.suite} does not verify against "
                                   f"{KEYRING}: {proc.stderr.strip().splitlines()[-1:]}")
            return path.read_text()

    def packages(self, wanted: set[str] | None = None) -> dict[str, dict[str, str]]:
        """Package name -> fields of the suite's amd64 index (optionally only `wanted`);
        the index is downloaded and verified on the first call."""
        if self._packages is None:
            release = self.release()
            data = check(get(f"{self.mirror}/dists/{self.suite}/{INDEX}"),
                         release_sha256(release, INDEX), INDEX)
            self._packages = lzma.decompress(data).decode()
        return stanzas(self._packages, wanted)

    def unpack(self, fields: dict[str, str], dest: Path, tmp: Path) -> None:
        """Download the package described by `fields`, check it, unpack it into dest."""
        deb = tmp / f"{fields['Package']}.deb"
        deb.write_bytes(check(get(f"{self.mirror}/{fields['Filename']}"), fields["SHA256"],
                              fields["Filename"]))
        subprocess.run(["dpkg-deb", "-x", str(deb), str(dest)], check=True)
        deb.unlink()
