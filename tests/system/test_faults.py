"""Faults a run survives with nothing lost and nothing left: the results disk filling up
mid-run, and Ctrl-C pressed twice, the second time during teardown.

Both run `testbed run` as a user does (a subprocess in the lab kernel) and end with the
same checks: results.csv holds whole rows only, no namespace, mount or run registry of
the run is left, and stderr says what happened in one line, without a traceback."""

import csv
import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runs import STATE, registry_of

pytestmark = [pytest.mark.system, pytest.mark.runner]

NETNS = Path("/run/netns")

PLAN = """
name = "faults"
[fixed]
workers = 1
rate = "1gbit"
[sweep]
distance_km = [0, 10, 20, 30]
[dataset]
files = 8
file_kib = 512
[workload]
batch = 2
compute_ms = 20
measure_s = 1
measure_max_s = 2
warmup_max_s = 2
min_steps = 4
readers = 1
"""


def _testbed(*args: str) -> list[str]:
    return [sys.executable, "-m", "testbed.cli", *args]


def _whole_rows(path: Path) -> list[dict[str, str]]:
    """results.csv's rows, asserting that every one is whole (as many fields as the
    header, the file ending with its last row's newline)."""
    text = path.read_text()
    assert text.endswith("\n"), text[-200:]
    rows = list(csv.reader(text.splitlines()))
    header = rows[0]
    assert all(len(r) == len(header) for r in rows[1:]), [len(r) for r in rows]
    return [dict(zip(header, r)) for r in rows[1:]]


def _nothing_left(prefix: str = "tb") -> None:
    """No namespace, NFS mount or run registry of ours is left."""
    assert not [n for n in os.listdir(NETNS) if n.startswith(prefix)] \
        if NETNS.is_dir() else True
    assert not [line for line in Path("/proc/mounts").read_text().splitlines()
                if "apn-testbed" in line and " nfs" in line]
    assert not list(STATE.glob("tb*.json")) if STATE.is_dir() else True


def _one_line(stderr: str) -> str:
    """The last line of stderr, asserting there is no traceback."""
    assert "Traceback" not in stderr, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if line.startswith("testbed: ")]
    assert lines, stderr[-3000:]
    return lines[-1]


def _fill(folder: Path) -> Path:
    """Fill the file system of `folder` to the last byte; the filler file."""
    filler = folder / "filler"
    with open(filler, "wb") as fh:
        chunk = b"\0" * (1 << 16)
        try:
            while True:
                fh.write(chunk)
                fh.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
        try:  # the last partial chunk, byte by byte down to 1
            while True:
                os.write(fh.fileno(), b"\0" * 512)
        except OSError:
            pass
    return filler


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs of its own for the results folder, unmounted after the test."""
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "apn-testbed-test", str(disk)],
                   check=True)
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_full_results_disk_stops_the_run_and_resume_completes_it(real_kernel, tmp_path,
                                                                  small_disk):
    """The disk fills up after the first point: the run stops with one line naming the
    file that could not be written (exit 1), every finished point is in results.csv as
    whole rows, nothing is left in the kernel; once space is freed, --resume measures
    the rest, each point once."""
    f = tmp_path / "plan.toml"
    f.write_text(PLAN)
    out = small_disk / "out"
    argv = _testbed("run", str(f), "--out", str(out))
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    results = out / "results.csv"
    _wait_rows(proc, results, 1)
    assert proc.poll() is None, "the run ended before the disk could be filled"
    filler = _fill(small_disk)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err[-3000:]
    line = _one_line(err)
    assert "No space left on device" in line and "--resume" in line, line
    first = _whole_rows(results)
    assert 1 <= len(first) < 4
    assert all(r["status"] == "ok" for r in first), first
    _nothing_left()

    filler.unlink()
    again = subprocess.run(argv + ["--resume"], capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    rows = _whole_rows(results)
    points = [r["point"] for r in rows]
    assert len(rows) == 4 and len(set(points)) == 4, points
    assert {r["point"] for r in first} <= set(points)
    assert all(r["status"] == "ok" for r in rows)
    assert json.loads((out / "meta.json").read_text())  # whole, not cut off
    _nothing_left()


def _wait_rows(proc: subprocess.Popen, results: Path, rows: int,
               deadline_s: float = 240) -> None:
    """Until results.csv holds `rows` rows (or the run ended, or the deadline passed)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline and proc.poll() is None:
        if results.exists() and len(results.read_text().splitlines()) >= rows + 1:
            return
        time.sleep(0.1)


def _wait_phase(proc: subprocess.Popen, phase: str, deadline_s: float = 180) -> dict:
    """The run registry of `proc`'s run once it records `phase`."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        data = registry_of(proc.pid)
        if data and data.get("phase") == phase:
            return data
        time.sleep(0.01)
    raise AssertionError(f"the run never reached phase {phase}")


def test_ctrl_c_twice_finishes_the_teardown(real_kernel, tmp_path):
    """Ctrl-C mid-read of the second point, then again as soon as the teardown starts:
    the teardown still runs to its end (no namespace, mount or registry left), the
    finished point stays in results.csv as a whole row, and the run exits 130 with a
    line saying it was interrupted."""
    f = tmp_path / "plan.toml"
    f.write_text(PLAN)
    out = tmp_path / "out"
    proc = subprocess.Popen(_testbed("run", str(f), "--out", str(out)),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _wait_rows(proc, out / "results.csv", 1)  # the first point is done (its row written
    _wait_phase(proc, "loader")  # after it left the loader phase): the next one reads
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _wait_phase(proc, "teardown", deadline_s=60)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    assert "teardown of tb" in err and "finishes first" in err, err[-3000:]
    assert "interrupted" in _one_line(err)
    assert (out / "results.csv").exists(), "the finished point's row is gone"
    rows = _whole_rows(out / "results.csv")
    assert 1 <= len(rows) < 4 and all(r["status"] == "ok" for r in rows), rows
    _nothing_left()
