"""Workload arithmetic and the loader on a local folder (no root, no NFS)."""

import hashlib

import pytest

from testbed import workload
from testbed.errors import SpecError, WorkloadError


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


@pytest.mark.parametrize("kind", ["thread", "process"])
def test_record_level_access_reads_every_record(tmp_path, kind):
    workload.generate(tmp_path, 3, 80_000, "record", records_per_file=4)
    samples = workload.samples_of(sorted(tmp_path.glob("sample_*")), "record")
    assert len(samples) == 12 and all(length == 20_000 for _, _, length in samples)
    spec = workload.WorkloadSpec(batch=4, steps=3, warmup_steps=0, compute_ms=0,
                                 access="record", reader_kind=kind, shuffle=False)
    run = workload.run_loader(tmp_path, spec)
    assert run.error is None and sum(s.bytes for s in run.steps) == 12 * 20_000


def test_record_access_on_raw_files_is_a_clear_error(tmp_path):
    workload.generate(tmp_path, 1, 10, "raw")
    with pytest.raises(WorkloadError, match="not a record shard"):
        workload.samples_of(sorted(tmp_path.glob("sample_*")), "record")
