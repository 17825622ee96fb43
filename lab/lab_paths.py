"""Where the lab scripts find the checkout, their own files and their build outputs.

The lab scripts run before the project's venv exists and so do not import the testbed
package (whose testbed.paths names the same places for the library): this module is the
one place lab/ declares them. Only the Python standard library.
"""

from pathlib import Path

LAB = Path(__file__).resolve().parent  # the lab scripts (this folder)
REPO = LAB.parent                      # the checkout
LAB_STATE = REPO / ".lab"              # built kernels, images and job folders (not in git)
UML_DIR = LAB_STATE / "uml"            # the user-mode Linux kernel lab/fetch-uml unpacks
UML_TT_DIR = LAB_STATE / "uml-tt"      # the one with a virtual clock lab/build-uml builds
UML_SMP_DIR = LAB_STATE / "uml-smp"    # the multi-CPU one lab/build-uml --smp builds
VM_DIR = LAB_STATE / "vm"              # the lab VM image, its box and other suites' kernels
IMAGE_SCRIPTS = LAB / "image"          # the shell scripts the image build runs (see vm_*.py)
