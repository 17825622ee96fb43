"""The three kinds of workload a plan runs (experiment.kinds): the loader, a recorded
trace replayed ([workload] trace), and checkpoints (a checkpoint-only DLIO config): how
each is named in an experiment file, refused when malformed, sent to a lab kernel, sized
for memory, and how a checkpoint's figures are taken from its ranks' results."""

import shutil
from pathlib import Path

import pandas as pd
import pytest

from testbed import topology
from testbed.errors import PointFailed, SpecError
from testbed.experiment.run import estimate, job_kernel, jobs
from testbed.experiment.resolve import explain
from testbed.experiment.plan import kinds
from testbed.experiment.measure import measure_checkpoint
from testbed.experiment.record import record
from testbed.experiment.resolve import resolve
from testbed.experiment.run import runner
from testbed.experiment.record import summary
from testbed.experiment.plan import plan as plan_mod
from testbed.workload import checkpoint as ck
from testbed.workload import presets

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "traces" / "example-loader.trace"
LLAMA = Path(presets.MLPERF_DIR) / "llama3_8b.yaml"


def experiment(tmp_path, workload, fixed='rate = "1gbit"'):
    f = tmp_path / "e.toml"
    f.write_text(f'name = "e"\n[fixed]\n{fixed}\n[sweep]\ndistance_km = [0, 1000]\n'
                 f'[workload]\n{workload}\n')
    return f


def test_the_shipped_experiments_name_their_kinds():
    assert kinds.name_of(plan_mod.load(ROOT / "experiments" / "trace.toml")) == kinds.TRACE
    ckpt = plan_mod.load(ROOT / "experiments" / "checkpoint.toml")
    assert kinds.name_of(ckpt) == kinds.CHECKPOINT
    assert kinds.name_of(plan_mod.load(ROOT / "experiments" / "demo.toml")) == kinds.LOADER
    assert kinds.export_of(ckpt).writable and not kinds.export_of(
        plan_mod.load(ROOT / "experiments" / "demo.toml")).writable
    assert {"write_s", "read_s", "full_lost_pct"} <= set(record.columns(ckpt))


@pytest.mark.parametrize("workload,problem", [
    ('trace = "missing.trace"', "not found|No such file"),
    ("trace = 7", "the path of a trace file"),
    ('trace = "bad.trace"', "bad.trace"),
    (f'trace = "{TRACE}"\ndlio = "{LLAMA}"', "keep one"),
])
def test_a_bad_trace_is_refused_in_one_line(tmp_path, workload, problem):
    (tmp_path / "bad.trace").write_text('{"format": "something else"}\n')
    with pytest.raises(SpecError, match=problem) as e:
        plan_mod.load(experiment(tmp_path, workload))
    assert "\n" not in str(e.value)


def test_a_trace_and_its_export(tmp_path):
    plan = plan_mod.load(experiment(tmp_path, f'trace = "{TRACE}"'))
    export = kinds.export_of(plan)
    export.fill(plan.points[0], tmp_path / "data")
    files = kinds.load_trace(str(TRACE)).files
    assert all((tmp_path / "data" / rel).stat().st_size == size for rel, size in files)
    assert runner.memory_need_bytes(plan) >= sum(size for _, size in files)


def test_a_job_sends_the_trace_and_the_kernel_reads_its_copy(tmp_path):
    copy = tmp_path / "elsewhere.trace"
    shutil.copy(TRACE, copy)
    plan = plan_mod.load(experiment(tmp_path, f'trace = "{copy}"'))
    sent = jobs.spec(jobs.Job(id="g1", runs=()), plan, {})
    copy.unlink()  # the job runs where the host's file is not
    (tmp_path / "job").mkdir()
    at = job_kernel._user_file(tmp_path / "job", sent["trace"], "trace")
    assert at is not None and at.read_text() == TRACE.read_text()
    assert plan_mod.load(experiment(tmp_path, f'trace = "{copy}"'), trace_at=at) \
        .resolver.raw.trace == str(at)


def test_the_interval_between_checkpoints_is_the_configs_unless_set(tmp_path):
    """checkpoint_interval_s overrides the config's time_between_checkpoints (5 s) in the
    lab's loop (scaled and dilated alike) and in every figure at full size."""
    base = f'dlio = "{LLAMA}"\nscale = 0.001'
    plan = plan_mod.load(experiment(tmp_path, base, 'workers = 2\ntime_scale = 3'))
    job, point = plan.resolver.raw.checkpoint, plan.points[-1]
    assert kinds.interval_s(point, job) == 5.0
    set_ = plan_mod.load(experiment(tmp_path, base + "\ncheckpoint_interval_s = 1800",
                                    'workers = 2\ntime_scale = 3'))
    point = set_.points[-1]
    assert kinds.interval_s(point, job) == 1800.0
    assert measure_checkpoint.plan_of(job, point, 0, 2).interval_s == \
        pytest.approx(1800 * 0.001 * 3)


def test_checkpoint_plan_scales_bytes_and_interval_and_dilates(tmp_path):
    plan = plan_mod.load(experiment(tmp_path, f'dlio = "{LLAMA}"\nscale = 0.001',
                                    'rate = "1gbit"\nworkers = 2\ntime_scale = 3'))
    job, point = plan.resolver.raw.checkpoint, plan.points[-1]
    ck_plan = measure_checkpoint.plan_of(job, point, 0, 2)
    full = [sum(f.nbytes for f in job.rank_files(r, 8, 1.0)) for r in range(2)]
    assert [sum(f.nbytes for f in lay) for lay in ck_plan.layouts] == \
        [int(b * 0.001) for b in full]
    assert ck_plan.interval_s == pytest.approx(5 * 0.001 * 3)
    assert (ck_plan.num_write, ck_plan.num_read, ck_plan.fsync) == (10, 10, True)
    assert runner.memory_need_bytes(plan) >= 10 * sum(int(b * 0.001) for b in full)
    with pytest.raises(PointFailed, match="9 workers for a 8-rank"):
        measure_checkpoint.plan_of(job, point, 0, 9)


def results_of(times: dict[tuple[str, int, int], float]) -> ck.CheckpointRun:
    """A run from {(phase, index, rank): seconds}."""
    out = ck.CheckpointRun()
    for (phase, i, rank), s in times.items():
        out.results.append(ck.CheckpointResult(rank, i, phase, 1_000_000,
                                               write_s=s if phase == "write" else 0.0,
                                               read_s=s if phase == "read" else 0.0))
    return out


def test_figures_take_the_slowest_rank_and_leave_the_first_checkpoint_out(tmp_path):
    plan = plan_mod.load(experiment(tmp_path, f'dlio = "{LLAMA}"\nscale = 0.001',
                                    'rate = "1gbit"\nworkers = 2\ntime_scale = 2'))
    job, point = plan.resolver.raw.checkpoint, plan.points[0]
    ck_plan = measure_checkpoint.plan_of(job, point, 0, 2)
    times = {}
    for i in range(1, 11):
        for rank in range(2):
            times[("write", i, rank)] = (9.0 if i == 1 else 1.0 + rank) * 2  # x k = 2
            times[("read", i, rank)] = 0.5 * 2
    f = measure_checkpoint.figures(job, ck_plan, results_of(times), point, 0)
    assert f["write_s"] == pytest.approx(2.0) and f["write_ci_s"] == pytest.approx(0.0)
    assert f["warmup_write_s"] == pytest.approx(9.0) and f["read_s"] == pytest.approx(0.5)
    interval = 5 * 0.001
    assert f["au_pct"] == pytest.approx(100 * interval / (interval + 2.0))
    assert f["training_time_lost_pct"] == pytest.approx(100 - f["au_pct"])
    assert f["step_s"] == pytest.approx(interval + 2.0)


def test_a_job_figure_on_every_row_keeps_its_own_interval():
    rows = pd.DataFrame({"write_s": [2.0, 2.0, 2.0], "write_ci_s": [0.3, 0.3, 0.3]})
    assert summary.point_ci(rows, "write_s", "write_ci_s") == (2.0, 0.3)
    rows = pd.DataFrame({"au_pct": [50.0, 60.0], "au_ci_pct": [1.0, 1.0]})
    mean, ci = summary.point_ci(rows, "au_pct", "au_ci_pct")
    assert mean == 55.0 and ci > 1.0  # rows that differ: their spread


def test_a_checkpoint_at_a_distance_is_dilated_for_its_bytes_share_not_its_line():
    """k for a checkpoint: its bytes may take CHECKPOINT_ALLOWANCE of the write model's
    time longer than at the line's rate; at 3,000 km the round trips are most of that
    time, so k is far below the line's (which kept a point of 10 checkpoints near an
    hour of wall time); co-located, the bytes are all of it and k is the line's."""
    plan = plan_mod.load(ROOT / "experiments" / "checkpoint.toml",
                         {"mount": "tuned", "distance_km": "3000"})
    base, far = plan.points
    topo = plan.resolver.topo(far)
    w = topology.worker_hosts(topo)[0]
    job = plan.resolver.raw.checkpoint
    line = resolve.min_write_Bps(topo, far, w)
    need = resolve.checkpoint_need_Bps(topo, far, w, kinds.rank_files(far, 0, job))
    assert need < line / 2
    near = resolve.checkpoint_need_Bps(topo, base, w, kinds.rank_files(base, 0, job))
    assert near == pytest.approx(resolve.min_write_Bps(topo, base, w), rel=0.1)
    scaled = resolve.rescale(plan, 848.0)
    assert [p.time_scale for p in scaled.points] == [70.0, 20.0]


def test_the_estimate_of_a_checkpoint_counts_its_cold_read_back():
    """Read back in 1 MiB requests spread over 8 cold connections, each pays its own
    slow start: several times the round trips of one connection (measured 0.59 s
    against 0.13 s at 1,000 km); the estimate grows with k."""
    one = estimate.cold_read_rtts(14 << 20, 1 << 20, 1, 64 << 20)
    eight = estimate.cold_read_rtts(14 << 20, 1 << 20, 8, 64 << 20)
    assert 14 <= one <= 21 and eight >= 3 * one
    assert estimate.cold_read_rtts(0, 1 << 20, 1, 1 << 20) == 0
    at = {"mount": "tuned", "distance_km": "3000"}
    plans = [plan_mod.load(ROOT / "experiments" / "checkpoint.toml", {**at, "time_scale": k})
             for k in ("20", "40")]
    secs = [estimate.run_seconds(p, p.points[-1]) for p in plans]
    assert 300 < secs[0] < 1200 and secs[1] > 1.8 * secs[0]


@pytest.mark.parametrize("write_s, cpu, marked", [
    (0.236, 95.0, True),   # twice the model with the CPU busy: the emulator's figure
    (0.128, 78.0, False),  # within 15 % of the model: the scenario's
    (0.236, 30.0, False),  # slow with the CPU idle: not the emulator, the model is off
])
def test_a_checkpoint_write_the_cpu_holds_back_is_marked_emulator(monkeypatch, write_s,
                                                                    cpu, marked):
    monkeypatch.setattr(explain, "software_emulated", lambda: False)
    row = {"rank_MB": 6.5, "write_s": write_s, "write_model_s": 0.118, "limited_by": "fibre"}
    row.update(explain.write_marks(row, cpu, 0))
    assert row["emulator_limited"] is marked
    assert row["limited_by"] == ("emulator" if marked else "fibre")
    assert ("shortfall" in row["emulator_reason"]) is marked


def test_a_checkpoint_too_large_for_the_lab_names_scale(tmp_path):
    """A full-size llama3 8B checkpoint (13.1 GiB a rank, 10 kept) cannot live in a lab
    kernel's memory: refused before anything is built, with the knob that shrinks it."""
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 1572864 kB\nMemAvailable: 1410000 kB\n")
    plan = plan_mod.load(experiment(tmp_path, f'dlio = "{LLAMA}"'))
    with pytest.raises(SpecError) as err:
        runner.check_memory(plan, meminfo)
    assert "a smaller [workload] scale" in str(err.value)
    assert "fewer or smaller files" not in str(err.value)
