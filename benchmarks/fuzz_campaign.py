"""Benchmark (host, no root): the property fuzzing of every reader of user input at
campaign size. Runs each test of tests/unit/test_fuzz_properties.py under Hypothesis'
"campaign" profile (random, not derandomized), one pytest process per test, at nice 19,
--jobs of them at once, with --total examples shared out evenly and a CPU-time budget of
2 s per call (FUZZ_CPU_BUDGET_S: CPU, not wall time, so that a busy machine does not
count as slow code) and a run registry of its own (APN_STATE_DIR: a `testbed run` elsewhere
on the host is not taken for one the input started), and prints per test the examples it ran and any failure (the
falsifying example, its error and a blob to reproduce it), then

    FUZZ examples=<n> violations=<n> seconds=<x>

    nice -n 19 .venv/bin/python -m benchmarks.fuzz_campaign [--total 100000] [-k NAME[,NAME]]
        [--jobs 2] [--memory-gib 6] > fuzz-campaign.log

examples counts the examples the tests ran (Hypothesis' statistics: passing and failing,
in every phase); violations counts the tests that failed (a contract violation, one per
test: Hypothesis stops a test at its first failure and shrinks it). Each pytest process
is held to --memory-gib of address space, so that an input that makes the testbed
allocate without bound fails that test instead of the host.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass

from testbed.paths import REPO

TESTS = REPO / "tests" / "unit" / "test_fuzz_properties.py"
CPU_BUDGET_S = 2.0  # per call: the contract's "done within 2 s", as CPU time
COUNTS = re.compile(r"(\d+) passing, (\d+) failing, and (\d+) invalid")


@dataclass
class Outcome:
    """One test's campaign: examples run, whether it failed, what it said, how long."""
    name: str
    examples: int
    failed: bool
    report: str
    seconds: float


def test_names() -> list[str]:
    """The property tests of the fuzz file, as pytest collects them."""
    out = subprocess.run([sys.executable, "-m", "pytest", str(TESTS), "--collect-only", "-q",
                          "-p", "no:cacheprovider"], capture_output=True, text=True,
                         cwd=REPO, check=True).stdout
    return [line.split("::", 1)[1] for line in out.splitlines() if "::" in line]


def _limit_memory(gib: float) -> None:
    """Hold the child to `gib` GiB of address space (called in it before exec)."""
    os.nice(19)
    limit = int(gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def run_test(name: str, examples: int, gib: float) -> Outcome:
    """Run one property test at `examples` examples under the campaign profile."""
    state = tempfile.mkdtemp(prefix="fuzz-state-")  # other runs on this host stay out of it
    env = dict(os.environ, HYPOTHESIS_PROFILE="campaign", FUZZ_EXAMPLES=str(examples),
               FUZZ_CPU_BUDGET_S=str(CPU_BUDGET_S), APN_STATE_DIR=state)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", f"{TESTS}::{name}", "-q",
                           "-p", "no:cacheprovider", "--hypothesis-show-statistics",
                           "-W", "ignore::hypothesis.errors.HypothesisWarning"],
                          capture_output=True, text=True, cwd=REPO, env=env,
                          preexec_fn=lambda: _limit_memory(gib))
    seconds = time.monotonic() - t0
    shutil.rmtree(state, ignore_errors=True)
    ran = sum(int(p) + int(f) for p, f, _ in COUNTS.findall(proc.stdout))
    return Outcome(name, ran, proc.returncode != 0, _failure(proc.stdout, proc.stderr),
                   seconds)


def _failure(stdout: str, stderr: str) -> str:
    """What a failed test said: its falsifying example and error lines (the pytest
    report's E lines, also inside an exception group's "  | " frame, and Hypothesis'
    blob), shortened; else the end of its stderr."""
    keep = [line if "@reproduce_failure" in line else line[:300]  # the blob whole
            for line in stdout.splitlines()
            if line.lstrip(" |").startswith("E ") or "@reproduce_failure" in line
            or "FAILED" in line or "Falsifying" in line or "Error:" in line]
    return "\n".join(keep[:60]) or stderr[-2000:]


def parse_args() -> argparse.Namespace:
    """--total, -k, --jobs and --memory-gib."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--total", type=int, default=100_000,
                    help="examples over all tests, shared out evenly (default 100000)")
    ap.add_argument("-k", dest="only", default="",
                    help="only tests whose name has this (several: comma-separated)")
    ap.add_argument("--jobs", type=int, default=1,
                    help="tests run at once (default 1; each is one process)")
    ap.add_argument("--memory-gib", type=float, default=6.0,
                    help="address space of each pytest process (default 6 GiB)")
    return ap.parse_args()


def main() -> int:
    """Run the campaign and print its closing line; 1 when a test failed."""
    args = parse_args()
    names = [n for n in test_names() if any(k in n for k in args.only.split(","))]
    each = math.ceil(args.total / len(names))
    print(f"fuzz campaign: {len(names)} tests x {each} examples (profile campaign)",
          flush=True)
    t0 = time.monotonic()
    outcomes = []
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        futures = [pool.submit(run_test, name, each, args.memory_gib) for name in names]
        for fut in as_completed(futures):
            o = fut.result()
            outcomes.append(o)
            print(f"{o.name}: {o.examples} examples in {o.seconds:.0f} s: "
                  f"{'FAILED' if o.failed else 'ok'}", flush=True)
            if o.failed:
                print(o.report, flush=True)
    total = sum(o.examples for o in outcomes)
    violations = sum(o.failed for o in outcomes)
    print(f"FUZZ examples={total} violations={violations} "
          f"seconds={time.monotonic() - t0:.0f}")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
