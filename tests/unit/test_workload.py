"""Workload arithmetic and the loader on a local folder (no root, no NFS)."""

import hashlib

import pytest

from testbed import workload
from testbed.errors import SpecError


def test_summary_excludes_warmup_and_computes_au():
    spec = workload.WorkloadSpec(steps=4, warmup_steps=1, batch=2)
    run = workload.LoaderRun([workload.Step(0, 5.0, 1.0, 100, 2),
                              workload.Step(1, 1.0, 1.0, 2_000_000, 2),
                              workload.Step(2, 0.0, 1.0, 2_000_000, 2),
                              workload.Step(3, 1.0, 1.0, 2_000_000, 2)])
    s = workload.summarise(run, spec)
    assert s["au_pct"] == pytest.approx(100 * 3 / 5)
    assert s["samples_per_s"] == pytest.approx(6 / 5)
    assert s["throughput_MB_s"] == pytest.approx(6 / 5)
    assert s["stall_s"] == pytest.approx(2.0)


def test_generate_is_deterministic_and_loader_reads_everything(tmp_path):
    paths = workload.generate(tmp_path, files=6, file_bytes=10_000, fmt="raw")
    assert hashlib.sha256(paths[3].read_bytes()).hexdigest() == workload.expected_digest(3, 10_000)
    spec = workload.WorkloadSpec(batch=3, steps=4, warmup_steps=1, compute_ms=1, readers=2)
    run = workload.run_loader(tmp_path, spec)
    assert run.error is None and len(run.steps) == 4
    assert all(s.bytes == 30_000 for s in run.steps)


@pytest.mark.parametrize("fmt", ["npz", "record"])
def test_other_formats(tmp_path, fmt):
    paths = workload.generate(tmp_path, files=2, file_bytes=5000, fmt=fmt)
    assert all(p.stat().st_size >= 5000 for p in paths)


def test_bad_specs():
    with pytest.raises(SpecError, match="warmup_steps"):
        workload.WorkloadSpec(steps=3, warmup_steps=3)
    with pytest.raises(SpecError, match="format"):
        workload.generate(__import__("pathlib").Path("/nonexistent"), 1, 1, fmt="tfr")
