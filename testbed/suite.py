"""How many tests the checkout's suite holds, as pytest collects them, and which of them
`sudo lab/test` runs where: the counts docs/lab.md states, generated (`testbed docs
--tests`, a block `testbed docs --check` keeps fresh) because typed ones went stale
(2,365 unit and 41 system tests stated when there were 3,250 and 71).

PARTS mirrors lab/test's runs, folder and marks each (tests/unit/test_lab.py holds the
two to each other)."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from testbed import launch
from testbed.errors import SpecError

COLLECTED = re.compile(r"^(\d+)(?:/\d+)? tests? collected", re.M)


@dataclass(frozen=True)
class Part:
    """One run of lab/test: its folder and marks, and where it runs."""

    name: str
    folder: str
    marks: str
    where: str


PARTS = (
    Part("unit", "tests/unit", "not system", "this host, no root"),
    Part("lab", "tests/lab", "lab", "this host; they start lab kernels (lab/run)"),
    Part("system", "tests/system", "system and not rdma",
         "a lab kernel: user-mode Linux (`--vm`: the lab VM)"),
    Part("NFS over RDMA", "tests/system", "rdma",
         "left out; `lab/test --vm` runs them in the lab VM with Debian testing's kernel"),
)


def collected(root: Path, folder: str, marks: str) -> int:
    """How many tests pytest collects under root/folder with these marks."""
    proc = launch.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                       "--collect-only", "-q", "-m", marks, folder], cwd=root,
                      timeout=300, what=f"pytest --collect-only {folder}", check=False)
    if "no tests collected" in proc.stdout:
        return 0
    found = COLLECTED.findall(proc.stdout)
    if proc.returncode not in (0, 5) or not found:
        raise SpecError(f"suite: pytest could not collect {folder} -m {marks!r}: "
                        f"{launch.last_line(proc)}")
    return int(found[-1])


def render(root: Path) -> str:
    """The suite's table in markdown: each part's folder, marks, count and where it runs,
    and a line with the whole."""
    counts = [collected(root, p.folder, p.marks) for p in PARTS]
    lines = ["| tests | folder | marks | count | where `sudo lab/test` runs them |",
             "|---|---|---|---|---|"]
    lines += [f"| {p.name} | `{p.folder}` | `{p.marks}` | {n:,} | {p.where} |"
              for p, n in zip(PARTS, counts)]
    left = sum(n for p, n in zip(PARTS, counts) if p.where.startswith("left out"))
    lines += ["", f"{sum(counts):,} tests; `sudo lab/test` runs {sum(counts) - left:,} "
                  f"of them and leaves out {left:,}."]
    return "\n".join(lines) + "\n"
