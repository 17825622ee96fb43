"""What QEMU boots the lab VM with besides its disk: the kernel, uncompressed, and a tiny
busybox initrd (its /init is lab/image/initrd-init) holding the modules that mount the
root disk and the host's 9p shares. Used for the image's own kernel (vm_image) and for
other suites' kernels (vm_kernel).

Only the Python standard library (and zstd for zstd-compressed kernels and modules).
"""

from __future__ import annotations

import lzma
import struct
import subprocess
import zlib
from pathlib import Path

from lab.build_step import ImageError
from lab.lab_paths import IMAGE_SCRIPTS

# The initrd's /init: load the modules, mount the root and the shares, switch_root.
INITRD_INIT = IMAGE_SCRIPTS / "initrd-init"
# The initrd loads these (and what they depend on) to mount the root disk and the 9p shares.
INITRD_MODULES = ("virtio_pci", "virtio_blk", "crc32c_generic", "ext4", "9pnet_virtio", "9p")
# ext4 needs a crc32c driver, a module up to 6.x and part of the kernel's library later.
OPTIONAL_MODULES = frozenset({"crc32c_generic"})

_MAGICS = ((b"\xfd7zXZ\x00", "xz"), (b"\x28\xb5\x2f\xfd", "zstd"), (b"\x1f\x8b\x08", "gzip"))


def initrd_init() -> str:
    """The initrd's /init script, as it is in the checkout now."""
    return INITRD_INIT.read_text()


def _zstd(data: bytes, what: str) -> bytes:
    """`data` decompressed by zstd (no Python module for it in the standard library)."""
    proc = subprocess.run(["zstd", "-dc"], input=data, capture_output=True)
    if proc.returncode != 0:
        raise ImageError(f"zstd cannot decompress {what}: {proc.stderr.strip()!r}")
    return proc.stdout


def _decompress(payload: bytes) -> bytes:
    """A bzImage's payload decompressed by the method its magic bytes name."""
    kind = next((kind for magic, kind in _MAGICS if payload.startswith(magic)), None)
    if kind == "xz":
        return lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(payload)
    if kind == "gzip":
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(payload)
    if kind == "zstd":
        # The build appends the uncompressed size (4 bytes) after the zstd frame.
        return _zstd(payload[:-4], "the kernel")
    raise ImageError(f"unknown kernel compression (payload starts {payload[:6].hex()})")


def uncompressed_kernel(bzimage: bytes) -> bytes:
    """The ELF vmlinux inside a bzImage (QEMU boots it through PVH): decompressing once here
    saves every TCG boot the seconds the kernel's own decompressor takes."""
    if bzimage[0x202:0x206] != b"HdrS":
        raise ImageError("not a bzImage (no HdrS header)")
    setup_sects = bzimage[0x1F1] or 4
    payload_offset, payload_length = struct.unpack_from("<II", bzimage, 0x248)
    start = (setup_sects + 1) * 512 + payload_offset
    out = _decompress(bzimage[start:start + payload_length])
    if not out.startswith(b"\x7fELF"):
        raise ImageError("the decompressed kernel is not an ELF image")
    return out


def _module_name(path: str) -> str:
    """A module's name as modprobe spells it, from its file's path."""
    return Path(path).name.split(".ko")[0].replace("-", "_")


def _module_index(moddir: Path) -> tuple[dict[str, list[str]], set[str]]:
    """(module file -> the module files it depends on, names of built-in modules) from
    the depmod indexes in moddir."""
    deps: dict[str, list[str]] = {}
    for line in (moddir / "modules.dep").read_text().splitlines():
        mod, _, rest = line.partition(":")
        deps[mod] = rest.split()
    builtin_file = moddir / "modules.builtin"
    builtin = {_module_name(m) for m in builtin_file.read_text().split()} \
        if builtin_file.exists() else set()
    return deps, builtin


def module_closure(moddir: Path, names: tuple[str, ...]) -> list[str]:
    """Module files (relative to moddir) for `names` and their dependencies, in load order
    (dependencies first). Modules built into the kernel are skipped."""
    deps, builtin = _module_index(moddir)
    by_name = {_module_name(m): m for m in deps}
    order: list[str] = []

    def visit(mod: str) -> None:
        """Append mod after everything it depends on (each module once)."""
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
    """A module file's contents, uncompressed (busybox insmod loads plain .ko files)."""
    data = path.read_bytes()
    if path.name.endswith(".xz"):
        return lzma.decompress(data)
    if path.name.endswith(".zst"):
        return _zstd(data, path.name)
    return data


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
    """The initrd for the kernel whose modules are in moddir: busybox, the init script and
    the modules it loads, uncompressed."""
    mods = module_closure(moddir, INITRD_MODULES)
    entries: list[tuple[str, int, bytes, int]] = [
        ("bin", 0o40755, b"", 0), ("dev", 0o40755, b"", 0), ("modules", 0o40755, b"", 0),
        ("dev/console", 0o20600, b"", (5 << 8) | 1),
        ("bin/busybox", 0o100755, busybox, 0),
        ("init", 0o100755, initrd_init().encode(), 0),
    ]
    names = []
    for mod in mods:
        name = Path(mod).name.split(".ko")[0] + ".ko"
        names.append(name)
        entries.append((f"modules/{name}", 0o100644, _module_bytes(moddir / mod), 0))
    entries.append(("modules.order", 0o100644, ("\n".join(names) + "\n").encode(), 0))
    return cpio_newc(entries)
