"""Where the project's own files are: the checkout (REPO) and the folders under it that
the library, the lab scripts and the benchmarks share. Declared once here."""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LAB = REPO / "lab"                  # the lab kernels' scripts (lab/run, lab/test, ...)
LAB_STATE = REPO / ".lab"           # built kernels, images and job folders (not in git)
EXPERIMENTS = REPO / "experiments"  # the shipped experiment files
RESULTS = REPO / "results"          # default place for results folders (not in git)
VENV_BIN = REPO / ".venv" / "bin"   # the project's virtual environment
