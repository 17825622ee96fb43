"""`testbed run` flags for lab kernels at once and Dask: one-line errors, exit 2, nothing
written (no kernel needed)."""

import os
import subprocess
import sys

import pytest

from testbed.experiment import REPO

DEMO = str(REPO / "experiments" / "demo.toml")


def run_cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "testbed.cli", *args], capture_output=True,
                          text=True, timeout=60, env={**os.environ, **(env or {})})


@pytest.mark.parametrize("args, needle", [
    (["--parallel", "0"], "--parallel"),
    (["--parallel", "lots"], "--parallel"),
    (["--parallel", "65"], "--parallel"),
    (["--scheduler", "http://example:8786"], "tcp://HOST:PORT"),
    (["--scheduler", "tcp://127.0.0.1"], "tcp://HOST:PORT"),
])
def test_bad_flags_are_one_line_and_write_nothing(tmp_path, args, needle):
    out = tmp_path / "out"
    proc = run_cli("run", DEMO, "--out", str(out), *args)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in proc.stderr
    assert not out.exists()


def test_inside_a_lab_kernel_parallel_is_refused(tmp_path):
    proc = run_cli("run", DEMO, "--out", str(tmp_path / "o"), "--parallel", "2",
                   env={"APN_LAB_KERNEL": "uml"})
    assert proc.returncode == 2 and "outside lab/run" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_check_ignores_parallel():
    proc = run_cli("run", DEMO, "--check", "--parallel", "auto")
    assert proc.returncode == 0 and "estimated run time" in proc.stdout


@pytest.mark.parametrize("cmd", ["run", "demo"])
def test_help_lists_the_flags(cmd):
    text = run_cli(cmd, "--help").stdout
    assert "--parallel" in text and "--scheduler" in text
