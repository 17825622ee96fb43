"""Shared by the topology files: make `testbed` importable when Mininet's `mn --custom`
loads these files with the system Python (the repository root is not on its path)."""

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parent.parent)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
