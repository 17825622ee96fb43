"""lab/vm-image [--box | --check | --recipe]: the lab VM image (and Vagrant box) from Debian packages.

  lab/vm-image           build REPO/.lab/vm (disk, uncompressed kernel, initrd) unless the
                         built one matches today's recipe; print the disk's path
  lab/vm-image --box     also REPO/.lab/vm/box/apn-bookworm64.box, a libvirt box of the same
                         disk (GRUB installed by booting it once); print the box's path
  lab/vm-image --check   exit 0 if the image is current, 1 if it would be (re)built
  lab/vm-image --recipe  print the recipe's SHA-256

`lab/run --vm` calls the first form itself. Building needs root, mmdebstrap and QEMU
(lab/provision --host-vm) and Debian's mirror; the box also needs vagrant's public key
(lab/provision --vagrant). See lab/vm_recipe.py for what the recipe holds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from lab import vm_box
from lab import vm_image
from lab import vm_recipe
from lab.build_step import ImageError


def main() -> int:
    """Parse the options, do what they ask; 2 with one line on stderr if the image or box
    cannot be built."""
    parser = argparse.ArgumentParser(prog="lab/vm-image",
                                     description="Build the lab VM image from Debian packages.")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--box", action="store_true", help="also build the Vagrant box")
    group.add_argument("--check", action="store_true",
                       help="exit 0 if the image is current, 1 if not (builds nothing)")
    group.add_argument("--recipe", action="store_true", help="print the recipe hash")
    args = parser.parse_args()
    try:
        if args.recipe:
            print(vm_recipe.recipe_hash())
            return 0
        if args.check:
            return 0 if vm_recipe.current() is not None else 1
        t0 = time.monotonic()
        img = vm_image.ensure()
        if args.box:
            print(vm_box.build_box())
        else:
            print(img.disk)
        print(f"lab/vm-image: ready in {time.monotonic() - t0:.0f} s (kernel {img.release}, "
              f"recipe {img.recipe[:12]})", file=sys.stderr)
    except ImageError as exc:
        print(f"lab/vm-image: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
