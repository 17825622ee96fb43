"""Loaders that share a line: one clock, everyone loading until every window is
complete, and one measured stretch of time for all (workload.together)."""

from concurrent.futures import ThreadPoolExecutor

import pytest

from testbed import workload
from testbed.workload import LoaderRun, Step, Together, common_window


def steps(n, start=0.0, step=1.0):
    """n back-to-back steps of `step` seconds from `start`."""
    return [Step(i, start + i * step, 0.0, step, 1_000_000, 1) for i in range(n)]


def test_together_completes_when_every_loader_is_done():
    t = Together(2)
    t.done()
    assert not t.complete.is_set()
    t.done()
    assert t.complete.is_set()
    assert Together(0).complete.is_set()


def test_common_window_is_the_stretch_every_loader_measured():
    early = LoaderRun(steps(30), warmup_steps=2)           # warm at 2 s, loads to 30 s
    late = LoaderRun(steps(24, step=1.25), warmup_steps=8)  # warm at 10 s, to 30 s
    span = common_window([early, late])
    assert span == (10.0, 30.0)
    assert [s.start_s for s in early.measured][0] == 10.0
    assert early.measured[-1].end_s <= 30.0 and len(early.measured) == 20
    assert late.measured[0].start_s == 10.0 and late.measured[-1].end_s == 30.0
    s = workload.summarise(early, workload.WorkloadSpec(compute_ms=1000.0))
    assert s["steps_measured"] == 20 and s["warmup_s"] == pytest.approx(2.0)


def test_common_window_leaves_one_loader_and_failed_ones_alone():
    one = LoaderRun(steps(10), warmup_steps=2)
    assert common_window([one]) is None and len(one.measured) == 8
    failed = LoaderRun(steps(3), warmup_steps=None, error="OSError: EIO")
    assert common_window([one, failed]) is None and len(one.measured) == 8


def test_a_loader_without_steps_in_the_stretch_measures_nothing():
    a = LoaderRun(steps(10), warmup_steps=2)
    b = LoaderRun([Step(0, 0.0, 0.0, 9.5, 1, 1), Step(1, 9.5, 0.0, 9.5, 1, 1)],
                  warmup_steps=1)
    common_window([a, b])
    assert b.measured == [] and a.measured == []  # stretch 9.5..10: no whole step


def test_loaders_that_run_together_stop_together(tmp_path):
    """Two loaders on local files, one with a window four times as long: the short one
    keeps loading until the long one is complete, and both are measured over one
    stretch of their shared clock."""
    workload.generate(tmp_path, files=6, file_bytes=10_000, fmt="raw")
    base = dict(batch=2, compute_ms=10, readers=1, warmup_max_s=0.5, min_steps=3)
    short = workload.WorkloadSpec(measure_s=0.5, measure_max_s=0.5, **base)
    long = workload.WorkloadSpec(measure_s=2.0, measure_max_s=2.0, **base)
    together = Together(2)
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda s: workload.run_loader(tmp_path, s, together=together),
                             [short, long]))
    assert all(r.error is None for r in runs)
    ends = [r.steps[-1].end_s for r in runs]
    assert abs(ends[0] - ends[1]) < 0.1  # the short one loaded on
    start, end = common_window(runs)
    for r in runs:
        assert r.measured[0].start_s >= start and r.measured[-1].end_s <= end
        assert r.measured[-1].end_s - r.measured[0].start_s > 1.5


def test_a_failing_loader_does_not_hold_the_others(tmp_path):
    """A loader that cannot start (no files) counts as complete: the other stops at the
    end of its own window, not never."""
    workload.generate(tmp_path / "ok", files=4, file_bytes=1000, fmt="raw")
    (tmp_path / "empty").mkdir()
    spec = workload.WorkloadSpec(batch=2, compute_ms=5, readers=1, measure_s=0.5,
                                 measure_max_s=0.5, warmup_max_s=0.5, min_steps=3)
    together = Together(2)

    def run(root):
        try:
            return workload.run_loader(root, spec, together=together)
        except workload.loader.WorkloadError as exc:
            return exc

    with ThreadPoolExecutor(2) as pool:
        ok, bad = pool.map(run, [tmp_path / "ok", tmp_path / "empty"])
    assert isinstance(bad, Exception) and together.complete.is_set()
    assert ok.error is None and ok.steps[-1].end_s < 8
