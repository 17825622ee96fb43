"""What two or more benchmarks share: `testbed` run as a command, a results folder's
summary, cold reads of files, and the order of alternated repetitions.

Run a benchmark as a module from the repository root, `.venv/bin/python -m
benchmarks.NAME` (the one entry point, benchmarks/__init__.py): Python then puts the
root first on the path, so the benchmark measures this checkout's testbed package, not
another one the venv may have installed, and `from benchmarks import common` finds this.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence, TypeVar

from testbed.paths import REPO, VENV_BIN

if TYPE_CHECKING:
    import pandas as pd

    from testbed.network.engine import Network

T = TypeVar("T")
TESTBED = VENV_BIN / "testbed"
# `testbed run` and `testbed demo` exit 1 when some point failed (its row says why): the
# run as a whole still produced its results.
SOME_POINTS_FAILED = 1


def run_testbed(args: list[str], **kw: Any) -> subprocess.CompletedProcess[Any]:
    """`testbed ARGS` from the checkout's venv, in the checkout (subprocess.run's keyword
    arguments pass through)."""
    return subprocess.run([str(TESTBED), *args], cwd=REPO, **kw)


def run_failed(returncode: int) -> bool:
    """Whether a testbed run failed as a whole (not just some of its points)."""
    return returncode not in (0, SOME_POINTS_FAILED)


def read_summary(out: Path) -> pd.DataFrame:
    """A results folder's summary.csv with emulator_limited as booleans."""
    import pandas as pd

    s = pd.read_csv(out / "summary.csv")
    s["emulator_limited"] = s["emulator_limited"].astype(str).str.lower() == "true"
    return s


def print_wide(table: pd.DataFrame, max_columns: int) -> None:
    """Print a table on one line per row (up to 200 characters, max_columns columns)."""
    import pandas as pd

    with pd.option_context("display.width", 200, "display.max_columns", max_columns):
        print(table)


def alternate(items: Sequence[T], rep: int) -> Sequence[T]:
    """`items` in order on even repetitions, reversed on odd ones (order effects cancel
    over repetitions)."""
    return items if rep % 2 == 0 else items[::-1]


def drop_caches() -> None:
    """Drop the page cache (and dentries, inodes), so the next read is cold."""
    Path("/proc/sys/vm/drop_caches").write_text("3")


def cold_read(paths: list[Path], bs: int) -> tuple[int, float]:
    """(bytes, seconds) reading every file once in bs-byte reads, page cache dropped first."""
    drop_caches()
    buf = bytearray(bs)
    total = 0
    t0 = time.monotonic()
    for path in paths:
        with open(path, "rb", buffering=0) as fh:
            while n := fh.readinto(buf):
                total += n
    return total, time.monotonic() - t0


def random_files(net: Network, names: list[str], mib: int) -> Path:
    """The run's data folder with `names`, each `mib` MiB of random bytes; the files and
    the folder are removed when the network is torn down."""
    data = net.run_dir / "data"
    data.mkdir()

    def remove() -> None:
        """Remove the files and their folder."""
        for name in names:
            (data / name).unlink(missing_ok=True)
        data.rmdir()

    net.callback(remove)
    for name in names:
        with open(data / name, "wb") as fh:
            for _ in range(mib):
                fh.write(os.urandom(1 << 20))
    return data
