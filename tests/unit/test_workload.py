"""The training set, the measured window's decisions and statistics, and the loader on a
local folder (no root, no NFS)."""

import hashlib
import math
from pathlib import Path

import pytest

from testbed import workload
from testbed.workload import loader as loader_mod
from testbed.errors import SpecError, WorkloadError
from testbed.workload import Step, Window, WindowSpec
from testbed.workload.window import au, au_ci, batches


def steps(n, start=0.0, wait=0.0, compute=0.1, nbytes=1_000_000, gap=0.0):
    """n back-to-back steps of (wait, compute) with `gap` between them."""
    out, t = [], start
    for i in range(n):
        out.append(Step(i, t, wait, compute, nbytes, 2))
        t += wait + compute + gap
    return out


def test_au_counts_the_gaps_between_steps():
    s = steps(10, wait=0.0, compute=0.1, gap=0.01)
    assert au(s) == pytest.approx(100 * 1.0 / (1.0 + 9 * 0.01))


def test_summary_of_the_measured_window():
    run = workload.LoaderRun(steps(5, wait=1.0, compute=1.0, nbytes=100) +
                             [Step(5 + i, 10.0 + 2 * i, 1.0, 1.0, 2_000_000, 2)
                              for i in range(20)], warmup_steps=5, settled=True)
    s = workload.summarise(run, workload.WorkloadSpec(compute_ms=1000.0))
    assert s["au_pct"] == pytest.approx(50.0)
    assert s["step_s"] == pytest.approx(2.0)
    assert s["throughput_MB_s"] == pytest.approx(1.0)
    assert s["steps_measured"] == 20 and s["warmup_s"] == pytest.approx(10.0)
    assert s["compute_overshoot_pct"] == pytest.approx(0.0)
    assert s["au_ci_pct"] == pytest.approx(0.0)


def test_time_dilation_reports_emulated_units():
    run = workload.LoaderRun(steps(30, wait=0.5, compute=0.5), warmup_steps=0)
    s = workload.summarise(run, workload.WorkloadSpec(compute_ms=50.0), time_scale=10)
    assert s["step_s"] == pytest.approx(0.1) and s["au_pct"] == pytest.approx(50.0)
    assert s["throughput_MB_s"] == pytest.approx(1_000_000 / 1.0 / 1e6 * 10)


def test_batch_means_interval_narrows_with_steady_steps():
    import random
    rng, t, noisy = random.Random(3), 0.0, []
    for i in range(40):
        wait = rng.uniform(0.0, 0.1)
        noisy.append(Step(i, t, wait, 0.1, 1, 1))
        t += wait + 0.1
    assert len(batches(noisy)) == 10
    mean, half = au_ci(noisy)
    assert 60 < mean < 80 and half > 0
    assert au_ci(steps(40))[1] == pytest.approx(0.0)


def test_warmup_waits_for_bytes_and_a_settled_step_time():
    w = Window(WindowSpec(warmup_bytes=10_000_000, warmup_min_s=0.0, measure_s=1.0,
                          measure_max_s=5.0, min_steps=5, block=3))
    ramp = [Step(i, sum(0.5 / (j + 1) + 0.1 for j in range(i)), 0.5 / (i + 1), 0.1,
                 1_000_000, 2) for i in range(8)]
    for s in ramp:
        w.add(s)
    assert w.warmup_steps is None  # 8 MB read: not enough yet
    t = ramp[-1].end_s
    for i in range(8, 60):
        if not w.add(Step(i, t, 0.05, 0.1, 1_000_000, 2)):
            break
        t += 0.15
    assert w.warmup_steps is not None and w.warmup_steps >= 10 and w.settled
    measured = w.measured()
    assert measured[-1].end_s - measured[0].start_s >= 1.0 and len(measured) >= 5


def test_window_stops_at_its_maximum_even_if_noisy():
    w = Window(WindowSpec(warmup_max_s=0.5, measure_s=1.0, measure_max_s=3.0, min_steps=2,
                          au_ci_target=0.001))
    t, i = 0.0, 0
    while w.add(Step(i, t, 0.2 * (i % 3), 0.1, 1, 1)):
        t += 0.1 + 0.2 * (i % 3)
        i += 1
        assert t < 10
    m = w.measured()
    assert 3.0 <= m[-1].end_s - m[0].start_s < 3.5


def test_a_stalling_window_runs_for_measure_stall_s():
    """A window whose accelerator waits runs at least measure_stall_s; one that never
    waits stops at measure_s (its interval is met at once)."""
    def span(wait):
        w = Window(WindowSpec(warmup_max_s=0.5, measure_s=1.0, measure_max_s=10.0,
                              min_steps=2, au_ci_target=50.0, measure_stall_s=4.0))
        t, i = 0.0, 0
        while w.add(Step(i, t, wait, 0.1, 1, 1)):
            t += wait + 0.1
            i += 1
        m = w.measured()
        return m[-1].end_s - m[0].start_s
    assert 1.0 <= span(0.0) < 1.5
    assert 4.0 <= span(0.02) < 4.5


def test_generate_is_deterministic_and_loader_reads_cold_epochs(tmp_path):
    paths = workload.generate(tmp_path, files=6, file_bytes=10_000, fmt="raw")
    assert hashlib.sha256(paths[3].read_bytes()).hexdigest() == \
        workload.expected_digest(3, 10_000)
    spec = workload.WorkloadSpec(batch=3, compute_ms=5, readers=2, measure_s=0.5,
                                 measure_max_s=0.5, warmup_max_s=0.5, min_steps=5)
    run = workload.run_loader(tmp_path, spec)
    assert run.error is None and len(run.measured) >= 5
    assert sum(s.samples for s in run.steps) > 6  # several epochs
    assert all(s.bytes == 30_000 for s in run.steps)


@pytest.mark.parametrize("fmt", ["npz", "record"])
def test_other_formats(tmp_path, fmt):
    paths = workload.generate(tmp_path, files=2, file_bytes=5000, fmt=fmt)
    assert all(p.stat().st_size >= 5000 for p in paths)


def test_bad_specs():
    with pytest.raises(SpecError, match="measure_max_s"):
        workload.WorkloadSpec(measure_s=3, measure_max_s=2)
    with pytest.raises(SpecError, match="compute_ms"):
        workload.WorkloadSpec(compute_ms=math.nan)
    with pytest.raises(SpecError, match="format"):
        workload.generate(Path("/nonexistent"), 1, 1, fmt="tfr")


@pytest.mark.parametrize("kind", ["thread", "process"])
def test_record_level_access_reads_every_record(tmp_path, kind):
    workload.generate(tmp_path, 3, 80_000, "record", records_per_file=4)
    samples = workload.samples_of(sorted(tmp_path.glob("sample_*")), "record")
    assert len(samples) == 12 and all(length == 20_000 for _, _, length in samples)
    spec = workload.WorkloadSpec(batch=4, compute_ms=1, access="record", reader_kind=kind,
                                 shuffle=False, measure_s=0.5, measure_max_s=0.5,
                                 warmup_max_s=0.5, min_steps=3)
    run = workload.run_loader(tmp_path, spec)
    assert run.error is None
    # records read in order are read as runs: their length headers cross too
    assert all(4 * 20_000 <= s.bytes <= 4 * 20_008 and s.samples == 4 for s in run.steps)


def test_records_in_order_are_interleaved_over_readers_files_and_read_in_runs(tmp_path):
    workload.generate(tmp_path, 4, 80_000, "record", records_per_file=8)
    samples = workload.samples_of(sorted(tmp_path.glob("sample_*")), "record")
    spec = workload.WorkloadSpec(batch=8, access="record", shuffle=False, readers=2)
    reads, n = next(loader_mod._batches(samples, spec))
    # two files at a time, one record of each in turn: 4 records of each, one run each
    assert n == 8 and len(reads) == 2 and len({path for path, _, _ in reads}) == 2
    assert all(length == 4 * 10_000 + 3 * 8 for _, _, length in reads)
    shuffled = workload.WorkloadSpec(batch=8, access="record", shuffle=True, readers=2)
    reads, n = next(loader_mod._batches(samples, shuffled))
    assert n == 8 and len(reads) >= 4  # shuffled records are read one by one (mostly)


def test_record_access_on_raw_files_is_a_clear_error(tmp_path):
    workload.generate(tmp_path, 1, 10, "raw")
    with pytest.raises(WorkloadError, match="not a record shard"):
        workload.samples_of(sorted(tmp_path.glob("sample_*")), "record")


def test_a_window_of_few_long_steps_still_has_an_interval():
    few = [Step(i, 1.0 * i, 0.1 * (i % 2), 0.8, 1, 1) for i in range(5)]
    assert len(batches(few)) == 5
    mean, half = au_ci(few)
    assert 80 < mean < 100 and half > 0
