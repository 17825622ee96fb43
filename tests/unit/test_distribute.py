"""Sweeps spread over lab kernels, without a kernel: job splitting, the single writer's
dedup, lost jobs, back-off, search jobs, auto parallelism, the guest's event log."""

import concurrent.futures as cf
import csv
import json
import math
import os

import pytest

from testbed import labkernel
from testbed.errors import SpecError
from testbed.experiment.run import distribute, job_host, job_kernel, jobs
from testbed.experiment.record import sink
from testbed.experiment.record import record
from testbed.experiment.plan import plan as plan_mod
from testbed.experiment.record import marks
from testbed.experiment.run.ledger import Ledger, Limit
from testbed.results import ResultStore

SWEEP = """
name = "t"
[sweep]
distance_km = [0, 1000, 2000, 3000]
{extra}
"""
SEARCH = """
[search]
knob = "distance_km"
range = [0, 3000]
target = "au_pct >= 90"
tolerance = 500
"""


def make_plan(tmp_path, extra=""):
    f = tmp_path / "t.toml"
    f.write_text(SWEEP.format(extra=extra))
    return plan_mod.load(f)


def rows_of(plan, run_id, au=95.0, marked=False):
    point, rep = jobs.grid_runs(plan)[run_id]
    row = record.base_row(plan, point, rep, "w1", "gpu")
    row.update(au_pct=au, emulator_limited=marked, emulator_reason="timers" if marked else "",
               limited_by="emulator" if marked else "compute", throughput_MB_s=10.0)
    return [row]


def event(plan, run_id, neighbours=0, **kw):
    return {"run": run_id, "rows": rows_of(plan, run_id, **kw), "seconds": 1.0,
            "steps": [f"{run_id},w1,0,0,0,0.1,1,1,True"], "host": "h",
            "neighbours": neighbours}


class FakePool:
    """Runs a job by calling script(spec, call) -> (events, result extras)."""

    streams = True

    def __init__(self, script):
        self.script, self.calls, self.specs = script, 0, []

    def submit(self, spec, on_event):
        self.calls += 1
        self.specs.append(spec)
        events, extra = self.script(spec, self.calls)
        for ev in events:
            on_event(ev)
        fut = cf.Future()
        fut.set_result({"id": spec["id"], "rc": 0, "events": events, "files": {},
                        "status": {"ok": True, "environment": {"kernel": "7.2"}},
                        "search": None, "console": "", **extra})
        return fut

    def close(self):
        pass


def dispatch(plan, tmp_path, script, parallel=2, adaptive=False):
    store = ResultStore(tmp_path / "out", record.columns(plan))
    limit = Limit(parallel, adaptive=adaptive)
    d = distribute.Dispatcher(plan, distribute.Options(parallel=parallel), sink.Sink(store),
                              FakePool(script), limit, distribute.Quiet())
    d.run(list(jobs.grid_runs(plan)))
    return d, store


def csv_runs(store):
    with open(store.csv, newline="") as fh:
        return [(r["point"], r["status"], r["au_pct"]) for r in csv.DictReader(fh)]


def test_batcher_splits_a_group_over_the_free_kernels(tmp_path):
    plan = make_plan(tmp_path, 'mount = ["default", "tuned"]\n[mounts.tuned]\nnconnect = 4')
    b = jobs.Batcher(plan, list(jobs.grid_runs(plan)))
    first, second = b.take(2), b.take(1)
    assert len(first.runs) == 4 and len(second.runs) == 4 and b.take(1) is None
    assert set(first.runs) | set(second.runs) == set(jobs.grid_runs(plan))


def test_batcher_keeps_jobs_within_one_testbed_group(tmp_path):
    plan = make_plan(tmp_path, "workers = [1, 2]")
    b = jobs.Batcher(plan, list(jobs.grid_runs(plan)))
    groups = []
    while (job := b.take(3)) is not None:
        groups.append({jobs.grid_runs(plan)[r][0].group for r in job.runs})
    assert all(len(g) == 1 for g in groups) and len(groups) >= 2


def test_every_run_written_once_with_its_steps(tmp_path):
    plan = make_plan(tmp_path)
    d, store = dispatch(plan, tmp_path, lambda spec, n: ([event(plan, r) for r in spec["runs"]],
                                                         {}))
    assert sorted(r for r, _, _ in csv_runs(store)) == sorted(jobs.grid_runs(plan))
    steps = (store.out / "steps.csv").read_text().splitlines()
    assert steps[0].startswith("point,worker") and len(steps) == 5
    assert d.outcome.measured == 4 and not d.outcome.failed


def test_streamed_events_repeated_in_the_result_are_written_once(tmp_path):
    plan = make_plan(tmp_path)

    def script(spec, n):  # the result repeats what was streamed, and once more
        evs = [event(plan, r) for r in spec["runs"]]
        return evs + evs, {}

    d, store = dispatch(plan, tmp_path, script)
    assert len(csv_runs(store)) == 4


def test_a_lost_job_runs_again_and_twice_lost_is_failed(tmp_path):
    plan = make_plan(tmp_path)
    ids = list(jobs.grid_runs(plan))

    def script(spec, n):  # the kernel measuring the 3000 km run dies every time
        if ids[3] in spec["runs"]:
            return [event(plan, r) for r in spec["runs"] if r != ids[3]], \
                {"rc": 125, "status": None}
        return [event(plan, r) for r in spec["runs"]], {}

    d, store = dispatch(plan, tmp_path, script)
    written = csv_runs(store)
    assert sorted(r for r, _, _ in written) == sorted(ids)  # each once
    assert [s for r, s, _ in written if r == ids[3]] == ["failed"]
    assert d.outcome.failed == [ids[3]]
    assert any(ids[3] in s["runs"] and len(s["runs"]) == 1 for s in d.pool.specs)


def test_only_the_run_under_way_when_its_kernel_died_counts_an_attempt(tmp_path):
    """A kernel killed twice while it measures the 1000 km run: that run is failed; the
    runs after it, which no kernel ever started, are measured, not failed with it."""
    plan = make_plan(tmp_path)
    ids = list(jobs.grid_runs(plan))

    def script(spec, n):
        if n <= 2:
            done = spec["runs"][:spec["runs"].index(ids[1])]
            return [event(plan, r) for r in done], {"rc": 125, "status": None,
                                                    "running": ids[1]}
        return [event(plan, r) for r in spec["runs"]], {}

    d, store = dispatch(plan, tmp_path, script, parallel=1)
    assert dict((r, s) for r, s, _ in csv_runs(store)) == {
        ids[0]: "ok", ids[1]: "failed", ids[2]: "ok", ids[3]: "ok"}
    assert len(csv_runs(store)) == 4 and d.outcome.failed == [ids[1]]


def test_a_re_run_reporting_an_already_written_run_is_skipped(tmp_path):
    plan = make_plan(tmp_path)
    ids = list(jobs.grid_runs(plan))
    seen = set()

    def script(spec, n):  # a worker died after streaming; its rerun reports everything
        first = spec["runs"][0] not in seen
        seen.update(spec["runs"])
        if first and ids[0] in spec["runs"]:
            return [event(plan, spec["runs"][0])], {"rc": None, "status": None}
        return [event(plan, r) for r in spec["runs"]], {}

    d, store = dispatch(plan, tmp_path, script, parallel=1)
    assert sorted(r for r, _, _ in csv_runs(store)) == sorted(ids)


def test_a_measurement_replaces_an_earlier_failure_once():
    ledger = Ledger(retry_marked=False)
    fail = {"run": "a", "rows": [{"status": "failed"}]}
    good = {"run": "a", "rows": [{"status": "ok"}]}
    assert ledger.decide(fail, True) == "write"
    assert ledger.decide(fail, True) == "skip"
    assert ledger.decide(good, True) == "write"
    assert ledger.decide(good, True) == "skip" and ledger.skipped == 2


def test_limit_backs_off_once_per_wave_and_only_when_sharing():
    limit = Limit(3, adaptive=True)
    bad = [{"status": "ok", "emulator_limited": "True", "emulator_reason": "cpu+timers"}]
    good = [{"status": "ok", "emulator_limited": False}]
    assert not limit.observe("a", bad, 0, 0)      # ran alone: fewer kernels cannot help
    assert not limit.observe("a", good, 2, 0)
    assert limit.observe("b", bad, 2, 0) and limit.value == 2
    assert not limit.observe("c", bad, 2, 0)      # started before the back-off
    assert limit.observe("d", bad, 1, 1) and limit.value == 1
    assert not limit.observe("e", bad, 1, 2)      # never below one
    assert limit.history[0]["reasons"] == ["cpu", "timers"]
    fixed = Limit(2, adaptive=False)
    assert not fixed.observe("a", bad, 1, 0) and fixed.value == 2


def test_a_clock_mark_neither_backs_off_nor_holds_a_run():
    """`clock` (dilated lossy CUBIC) says what the point asked of the kernel, not that
    the machine was loaded: fewer lab kernels cannot cure it."""
    clock = [{"status": "ok", "emulator_limited": "True", "emulator_reason": "clock"}]
    both = [{"status": "ok", "emulator_limited": "True", "emulator_reason": "clock+cpu"}]
    assert marks.marked(clock) == [] and marks.marked(both) == ["cpu"]
    limit = Limit(3, adaptive=True)
    assert not limit.observe("a", clock, 2, 0) and limit.value == 3
    ledger = Ledger(retry_marked=True)
    assert ledger.decide({"run": "a", "rows": clock, "neighbours": 2}, True) == "write"


def test_auto_backs_off_and_measures_a_starved_run_again(tmp_path):
    plan = make_plan(tmp_path)
    ids = list(jobs.grid_runs(plan))

    def script(spec, n):  # the first time, the 1000 km run is starved beside another kernel
        evs = [event(plan, r, neighbours=1, au=50.0 if (r == ids[1] and n <= 2) else 95.0,
                     marked=(r == ids[1] and n <= 2)) for r in spec["runs"]]
        return evs, {}

    d, store = dispatch(plan, tmp_path, script, parallel=2, adaptive=True)
    written = csv_runs(store)
    assert sorted(r for r, _, _ in written) == sorted(ids)
    assert [float(a) for r, _, a in written if r == ids[1]] == [95.0]
    assert d.limit.value == 1 and d.ledger.remeasured == {ids[1]}


def test_fixed_parallel_writes_marked_runs_as_they_are(tmp_path):
    plan = make_plan(tmp_path)
    d, store = dispatch(plan, tmp_path, lambda spec, n: (
        [event(plan, r, neighbours=1, marked=True) for r in spec["runs"]], {}), parallel=2)
    assert len(csv_runs(store)) == 4 and d.limit.value == 2 and not d.ledger.remeasured


def test_a_spec_error_in_the_lab_kernel_stops_the_run_with_the_hosts_path(tmp_path):
    plan = make_plan(tmp_path)

    def script(spec, n):
        return [], {"status": {"ok": False, "error": "spec", "experiment_path": "/j/t.toml",
                               "message": "/j/t.toml: the data needs 9 GiB"}}

    with pytest.raises(SpecError, match=str(plan.path)):
        dispatch(plan, tmp_path, script)


def test_search_settings_run_as_jobs_after_the_grid(tmp_path):
    plan = make_plan(tmp_path, 'mount = ["default", "tuned"]\n[mounts.tuned]\nnconnect = 4\n'
                     + SEARCH)
    order = []

    def script(spec, n):
        order.append(spec["setting"])
        if spec["setting"] is None:
            return [event(plan, r) for r in spec["runs"]], {}
        assert spec["seed_csv"].count("\n") == 1 + 8  # header + the grid's rows
        return [], {"search": {"setting": f"mount=s{spec['setting']}", "crossing": 1.0}}

    d, store = dispatch(plan, tmp_path, script)
    assert order[-2:] == [0, 1] and None not in order[-2:]
    with open(store.out / "search.csv") as fh:
        assert [r["setting"] for r in csv.DictReader(fh)] == ["mount=s0", "mount=s1"]


def test_job_timeout_grows_with_its_runs(tmp_path):
    plan = make_plan(tmp_path)
    ids = tuple(jobs.grid_runs(plan))
    one = distribute.job_timeout_s(plan, jobs.Job("a", ids[:1]))
    four = distribute.job_timeout_s(plan, jobs.Job("b", ids))
    assert 300 < one < four


@pytest.mark.parametrize("m, n", [
    (labkernel.Machine(2, 0.05, 20_000, 20_000), 2),
    (labkernel.Machine(2, 1.9, 20_000, 20_000), 1),   # others' kernels hold both CPUs
    (labkernel.Machine(8, 0.0, 3_600, 20_000), 2),    # memory for two 1536 MiB guests
    (labkernel.Machine(8, 0.0, 20_000, 1_000), 1),    # /dev/shm too small: still one
    (labkernel.Machine(None, 0.0, 20_000, 20_000), 1),  # unsure
])
def test_auto_parallel(m, n):
    assert labkernel.auto_parallel(m, 1536)[0] == n


def test_auto_parallel_budgets_cpus_not_kernels():
    """A kernel of two CPUs (lab/run --cpus 2) takes two of the machine's free CPUs."""
    m = labkernel.Machine(8, 0.0, 20_000, 20_000)
    assert labkernel.auto_parallel(m, 1536, kernel_cpus=2)[0] == 4
    assert labkernel.auto_parallel(labkernel.Machine(2, 0.05, 20_000, 20_000), 1536, 2)[0] == 1
    assert labkernel.cpus("2") == 2 and labkernel.cpus() >= 1
    with pytest.raises(SpecError):
        labkernel.cpus("two")


def test_mem_mb_reads_lab_mem_syntax():
    assert labkernel.mem_mb("1536M") == 1536 and labkernel.mem_mb("2G") == 2048
    with pytest.raises(SpecError):
        labkernel.mem_mb("lots")


def test_sink_writes_rows_as_the_runner_does(tmp_path):
    plan = make_plan(tmp_path)
    run = next(iter(jobs.grid_runs(plan)))
    rows = json.loads(job_kernel.to_json(rows_of(plan, run)))  # through the wire, NaN and all
    a, b = (ResultStore(tmp_path / d, record.columns(plan)) for d in ("a", "b"))
    a.append_rows(rows_of(plan, run))
    sink.Sink(b).rows(rows)
    assert a.csv.read_text() == b.csv.read_text()
    assert sink.Sink(b).files({"../escape": b"x", "capture/p/s.json": b"{}"}) == \
        [(b.out / "capture/p/s.json").resolve()]


def test_event_tail_reads_complete_lines_only(tmp_path):
    path = tmp_path / "events.jsonl"
    tail = job_host.EventTail(path)
    assert tail.read() == []
    path.write_text('{"run": "a"}\n{"run": "b"')
    assert [e["run"] for e in tail.read()] == ["a"]
    with open(path, "a") as fh:
        fh.write(', "x": NaN}\n')
    (ev,) = tail.read()
    assert ev["run"] == "b" and math.isnan(ev["x"])


def test_guest_event_log_carries_each_runs_steps(tmp_path):
    log = job_kernel.EventLog(tmp_path)
    steps = tmp_path / "steps.csv"
    steps.write_text("point,worker,step\na,w1,0\n")
    log.finished("a", [{"au_pct": 1.0}], 2.0)
    with open(steps, "a") as fh:
        fh.write("b,w1,0\nb,w1,1\n")
    log.finished("b", [], 1.0)
    a, b = job_host.EventTail(tmp_path / "events.jsonl").read()
    assert a["steps"] == ["a,w1,0"] and b["steps"] == ["b,w1,0", "b,w1,1"]


def test_stale_job_folders_of_dead_owners_are_swept(tmp_path, monkeypatch):
    monkeypatch.setattr(job_host, "JOBS", tmp_path)
    dead, live = tmp_path / "x-dead", tmp_path / "y-live"
    for d in (dead, live):
        d.mkdir()
    (dead / "owner.json").write_text(json.dumps({"pid": 2**22 + 7, "start": "1"}))
    (live / "owner.json").write_text(json.dumps({"pid": os.getpid(),
                                                 "start": job_host._start_time(os.getpid())}))
    assert job_host.sweep_stale() == [dead] and live.exists() and not dead.exists()


def test_host_mark_flags_a_kernel_that_waited_for_a_cpu():
    rows = [{"status": "ok", "emulator_limited": False, "emulator_reason": "",
             "limited_by": "latency"}]
    calm = {"run": "a", "rows": [dict(rows[0])], "host_wait_pct": 2.0}
    starved = {"run": "b", "rows": [dict(rows[0], emulator_reason="timers")],
               "host_wait_pct": marks.HOST_WAIT_PCT}
    assert not marks.host_mark(calm) and calm["rows"][0]["emulator_limited"] is False
    assert marks.host_mark(starved)
    assert starved["rows"][0]["emulator_reason"] == "timers+host"
    assert starved["rows"][0]["limited_by"] == "emulator"
    failed = {"run": "c", "rows": [{"status": "failed"}], "host_wait_pct": 50.0}
    assert not marks.host_mark(failed)


def test_host_mark_rows_uses_each_rows_own_meter_figure(tmp_path):
    """The meter figure a lab kernel recorded in a row marks it when the host receives
    the run (no meter: NaN, never marked)."""
    def row(wait):
        return {"status": "ok", "emulator_limited": False, "emulator_reason": "",
                "limited_by": "latency", "host_wait_pct": wait}
    rows = [row(math.nan), row(marks.HOST_WAIT_PCT - 1), row(marks.HOST_WAIT_PCT)]
    assert marks.host_mark_rows(rows)
    assert [r["emulator_limited"] for r in rows] == [False, False, True]
    assert rows[2]["emulator_reason"] == "host" and not marks.host_mark_rows(rows[:2])
    plan = make_plan(tmp_path)

    def script(spec, n):
        evs = [event(plan, r) for r in spec["runs"]]
        for ev in evs:
            ev["rows"][0]["host_wait_pct"] = 50.0
        return evs, {}

    _, store = dispatch(plan, tmp_path, script)
    with open(store.csv, newline="") as fh:
        assert {r["emulator_reason"] for r in csv.DictReader(fh)} == {"host"}


def test_a_limit_follows_its_cap_minus_back_offs():
    limit = Limit(4, adaptive=True)
    bad = [{"status": "ok", "emulator_limited": True, "emulator_reason": "host"}]
    assert limit.observe("a", bad, 1, 0) and limit.value == 3
    limit.cap = 2            # a Dask worker left
    assert limit.value == 1
    limit.cap = 6            # two joined
    assert limit.value == 5 and limit.history[0]["parallel"] == 3


def test_a_host_marked_run_beside_others_backs_off_auto(tmp_path):
    plan = make_plan(tmp_path)

    def script(spec, n):
        evs = [dict(event(plan, r, neighbours=1), host_wait_pct=30.0 if n == 1 else 1.0)
               for r in spec["runs"]]
        return evs, {}

    d, store = dispatch(plan, tmp_path, script, parallel=2, adaptive=True)
    assert d.limit.value == 1 and len(csv_runs(store)) == 4
    assert set(d.ledger.remeasured) <= set(jobs.grid_runs(plan))


def test_job_folders_made_at_once_never_sweep_each_other(tmp_path, monkeypatch):
    monkeypatch.setattr(job_host, "JOBS", tmp_path / "jobs")
    spec = {"id": "g", "experiment": {"name": "t.toml"}}
    with cf.ThreadPoolExecutor(8) as pool:
        dirs = list(pool.map(lambda _: job_host.JobDir(spec).__enter__(), range(32)))
    assert all((d.path / "owner.json").exists() and (d.path / "job.json").exists()
               for d in dirs)
    assert dirs[0].others() == 31
    for d in dirs:
        d.__exit__(None, None, None)
    assert list((tmp_path / "jobs").iterdir()) == []


def test_report_lists_points_in_plan_order_whatever_order_they_arrived(tmp_path):
    import pandas as pd
    from testbed.experiment.report import report
    plan = make_plan(tmp_path)
    ids = [p.id for p in plan.points]
    df = pd.DataFrame({"point_id": [ids[2], "distance_km=1234", ids[0], ids[3], ids[1]]})
    assert list(report._plan_order(plan, df)["point_id"]) == [*ids, "distance_km=1234"]


def test_a_group_is_split_over_all_kernels_even_when_one_is_free(tmp_path):
    """A kernel freed mid-sweep takes its share of the next group, not all of it (the
    others free up soon): 3 groups of 4 runs on 2 kernels make jobs of 2."""
    plan = make_plan(tmp_path, "workers = [1, 2, 3]")
    d, _ = dispatch(plan, tmp_path, lambda spec, n: (
        [event(plan, r) for r in spec["runs"]], {}))
    assert {len(s["runs"]) for s in d.pool.specs} == {2}


AUTO = '[fixed]\ntime_scale = "auto"\nrate = "100gbit"\n'


def test_auto_time_scale_is_calibrated_once_and_sent_with_every_job(tmp_path):
    plan = make_plan(tmp_path, AUTO)
    pool = FakePool(lambda spec, n: ([], {"status": {"ok": True, "calibrated_MB_s": 50.0}}))
    scaled, record = distribute.calibrate_auto(plan, distribute.Options(), pool)
    assert pool.specs[0]["calibrate"] and record["calibrated_MB_s"] == 50.0
    assert max(p.time_scale for p in scaled.points) > 1  # 100 Gbit/s at 0 km needs k
    assert set(record["per_point"]) == {p.id for p in scaled.points}
    job = jobs.Job("g1", runs=tuple(jobs.grid_runs(scaled))[:1])
    assert jobs.spec(job, scaled, {}, capacity_MB_s=50.0)["capacity_MB_s"] == 50.0


def test_a_failed_calibration_stops_the_run_with_its_reason(tmp_path):
    plan = make_plan(tmp_path, AUTO)
    pool = FakePool(lambda spec, n: ([], {"status": {"ok": False, "error": "runtime",
                                                     "message": "OSError: no nfsd"}}))
    with pytest.raises(distribute.TestbedError, match="calibration failed: OSError: no nfsd"):
        distribute.calibrate_auto(plan, distribute.Options(), pool)


def test_a_plan_without_auto_is_not_calibrated(tmp_path):
    plan = make_plan(tmp_path)
    pool = FakePool(lambda spec, n: ([], {}))
    assert distribute.calibrate_auto(plan, distribute.Options(), pool) == (plan, {})
    assert pool.calls == 0


def test_the_guest_calibrates_or_applies_the_hosts_capacity(tmp_path, monkeypatch):
    from testbed.experiment.resolve import dilation
    plan = make_plan(tmp_path, AUTO)
    monkeypatch.setattr(dilation, "calibrate", lambda: 77.0)
    spec = jobs.spec(jobs.Job("cal", calibrate=True), plan, {})
    jobdir = tmp_path / "job"
    jobdir.mkdir()
    assert job_kernel.measure_job(spec, jobdir) == {"calibrated_MB_s": 77.0}


def test_a_resumed_run_keeps_its_calibration(tmp_path):
    from testbed.experiment.resolve import resolve
    out = tmp_path / "out"
    out.mkdir()
    assert resolve.previous_capacity(out) is None
    (out / "meta.json").write_text(json.dumps({"time_scale": {"auto": True,
                                                              "calibrated_MB_s": 640.0}}))
    assert resolve.previous_capacity(out) == 640.0
    plan = make_plan(tmp_path, AUTO)
    scaled, record = resolve.auto_scale(plan, out, resume=True)  # no calibration
    assert record["calibrated_MB_s"] == 640.0 and scaled.points[0].time_scale >= 1


def test_a_plan_is_resolved_before_it_runs(tmp_path):
    """time_scale "auto" is decided before a run starts: a runner refuses a plan that
    leaves it open, and meta.json records the capacity and every point's k."""
    from testbed.experiment.run import estimate, runner
    from testbed.experiment.resolve import resolve
    plan = make_plan(tmp_path, AUTO)
    store = ResultStore(tmp_path / "out", record.columns(plan))
    with pytest.raises(ValueError, match="resolve"):
        runner.Runner(plan, store)
    with pytest.raises(ValueError, match="resolve"):
        estimate.describe(plan)
    nominal = resolve.nominal(plan)
    assert resolve.is_resolved(nominal) and nominal.capacity_MB_s == resolve.NOMINAL_LAB_MB_S
    assert resolve.nominal(nominal) is nominal
    scale = record.meta_of(nominal)["time_scale"]
    assert scale["calibrated_MB_s"] == resolve.NOMINAL_LAB_MB_S
    assert scale["per_point"] == {p.id: p.time_scale for p in nominal.points}
    fixed = make_plan(tmp_path)
    assert resolve.nominal(fixed) is fixed and record.meta_of(fixed)["time_scale"] == [1.0]


def test_calibration_credits_what_the_read_used_not_the_cpus_it_had():
    """A read that used half a CPU is credited with a full CPU's rate; a kernel of two
    CPUs whose read stayed on one is credited with what it moved, not twice that (user-
    mode Linux's SMP does not spread the NFS path: docs/multi-cpu.md); one whose read
    used both keeps its rate."""
    from testbed.experiment.resolve.dilation import Calibration

    assert Calibration(100.0, 0.5, 1).capacity_MB_s == 200.0
    assert Calibration(415.0, 1.03, 2).capacity_MB_s == 415.0
    assert Calibration(800.0, 1.9, 2).capacity_MB_s == 800.0
    assert Calibration(50.0, 0.0, 1).capacity_MB_s == 50.0
