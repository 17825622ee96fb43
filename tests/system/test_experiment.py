"""Experiments end to end in the lab kernel: CSV columns, AU falling with distance, the
cache and staged data paths, and resume after the runner is killed."""

import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from emulation import verdict
from testbed.experiment import run_file

pytestmark = pytest.mark.system

SHORT = """
name = "short"
[fixed]
workers = 1
rate = "1gbit"
[sweep]
distance_km = [0, 3000]
{extra}
[dataset]
files = 12
file_kib = 1024
[workload]
batch = 2
compute_ms = 20
measure_s = 1
measure_max_s = 2
warmup_max_s = 2
min_steps = 4
readers = 1
"""
COLUMNS = {"point", "repetition", "status", "reason", "worker", "site", "distance_km",
           "fibre.wan.distance_km", "rtt_ms", "throughput_MB_s", "samples_per_s", "au_pct",
           "model_MB_s", "limited_by", "bound_loss_MB_s", "rsize", "nconnect", "read_ahead_kb",
           "read_ahead_kb_kernel", "readers", "prefetch", "data_path", "prep_s",
           "cpu_busy_pct"}


def test_short_sweep_columns_and_au_falls_with_distance(real_kernel, tmp_path):
    f = tmp_path / "short.toml"
    f.write_text(SHORT.format(extra=""))
    out = run_file(f, tmp_path / "out")
    df = pd.read_csv(out / "results.csv")
    assert COLUMNS <= set(df.columns)
    assert len(df) == 2 and (df["status"] == "ok").all()
    near = df[df.distance_km == 0].iloc[0]
    far = df[df.distance_km == 3000].iloc[0]
    assert far.rtt_ms == pytest.approx(29.4, abs=0.01)
    assert far.au_pct < near.au_pct - 10  # data-heavy: 3,000 km starves the accelerator
    summary = pd.read_csv(out / "summary.csv").set_index("distance_km")
    assert summary.loc[0, "slowdown_pct"] == pytest.approx(0)
    assert summary.loc[3000, "slowdown_pct"] > 10
    summaries = list((out / "dlio").glob("*/summary.json"))
    assert len(summaries) == 2
    m = json.loads(summaries[0].read_text())["metric"]
    assert {"train_au_mean_percentage", "train_au_meet_expectation",
            "train_throughput_mean_samples_per_second", "train_io_mean_MB_per_second"} <= set(m)
    assert (out / "throughput_au_vs_distance_km.png").stat().st_size > 10_000


def test_cache_and_staged_paths_report_preparation(real_kernel, tmp_path):
    f = tmp_path / "paths.toml"
    f.write_text(SHORT.format(extra='data_path = ["direct", "cache", "staged"]')
                 .replace("distance_km = [0, 3000]", "distance_km = [0]"))
    df = pd.read_csv(run_file(f, tmp_path / "out") / "results.csv")
    prep = dict(zip(df.data_path, df.prep_s))
    assert prep["direct"] == 0 and prep["cache"] > 0 and prep["staged"] > 0
    assert (df["status"] == "ok").all()
    assert not list((tmp_path / "out").glob("*.img"))


@pytest.mark.runner
def test_resume_after_kill_measures_each_point_once(real_kernel, tmp_path):
    f = tmp_path / "resume.toml"
    f.write_text(SHORT.format(extra='nconnect = [1, 2]'))
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "testbed.cli", "run", str(f), "--out", str(out)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    csv = out / "results.csv"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if csv.exists() and len(csv.read_text().splitlines()) >= 2:  # header + one point
            break
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    first = pd.read_csv(csv)
    assert 1 <= len(first) < 4
    clean = subprocess.run([sys.executable, "-m", "testbed.cli", "clean"], capture_output=True,
                           text=True, timeout=120)
    assert clean.returncode == 0, clean.stderr
    again = subprocess.run(argv + ["--resume"], capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    df = pd.read_csv(csv)
    assert len(df) == 4 and df["point"].is_unique
    assert set(first["point"]) <= set(df["point"])


FAILING = """
name = "failing"
[fixed]
workers = 1
rate = "200mbit"
distance_km = 100
mount = "soft"
[sweep]
loss_pct = [0, 50]
readers = [1, 2]
[mounts.soft]
hard = false
timeo_ds = 1
retrans = 0
[dataset]
files = 8
file_kib = 1024
[workload]
batch = 2
compute_ms = 20
measure_s = 1
measure_max_s = 2
warmup_max_s = 2
min_steps = 4
readers = 1
"""


@pytest.mark.runner
def test_a_failing_point_is_recorded_and_the_next_starts_clean(real_kernel, tmp_path):
    """A fibre losing half its packets under a soft mount with a 0.1 s timeout cannot be
    measured: its rows say failed and why, carry no AU, the sweep goes on to the next
    point on a fresh testbed, and the command exits 1."""
    f = tmp_path / "failing.toml"
    f.write_text(FAILING)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(f), "--out",
                           str(out)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "2 of 6 point run(s) failed" in proc.stderr
    df = pd.read_csv(out / "results.csv")
    failed = df[df.status == "failed"]
    assert len(failed) == 2 and set(failed["loss_pct"]) == {50}
    assert failed["reason"].str.len().min() > 5 and failed["au_pct"].isna().all()
    ok = df[df.status == "ok"]
    assert len(ok) == 4 and ok["au_pct"].notna().all()
    assert list(df["status"]) == ["ok", "ok", "failed", "ok", "ok", "failed"]
    summary = pd.read_csv(out / "summary.csv")
    assert summary["failed"].sum() == 2 and summary["n"].sum() == 4


OVERLOAD = """
name = "overload"
[fixed]
workers = 1
rate = "100gbit"
distance_km = 0
host = "ideal"
[dataset]
files = 16
file_kib = 4096
[workload]
batch = 8
compute_ms = 1
readers = 4
prefetch = 2
measure_s = 2
measure_max_s = 3
warmup_max_s = 2
min_steps = 4
"""


def test_a_point_the_emulator_cannot_carry_is_marked(real_kernel, tmp_path):
    """100 Gbit/s fibre and an accelerator asking for ~33 GB/s: the model's bound is the
    fibre's ~12 GB/s (end hosts that never bind: host = "ideal"; one connection of the
    default profile would carry 1.6), the lab kernel moves a few hundred MB/s with its
    CPU saturated. The
    row must say so (limited_by emulator), not pass it off as a fibre figure.

    On the virtual clock CPU work between two timer events takes almost no emulated time,
    so the same lab kernel carries the fibre's rate: there the row reads the model's bound
    (marked at most `timers`: the saturated CPU wakes the accelerator late; seen both ways
    on 2026-12-05), never a shortfall (docs/virtual-clock.md)."""
    f = tmp_path / "overload.toml"
    f.write_text(OVERLOAD)
    out = run_file(f, tmp_path / "out")
    row = pd.read_csv(out / "results.csv").iloc[0]
    summary = pd.read_csv(out / "summary.csv").iloc[0]
    if os.environ.get("APN_LAB_CLOCK", "real") != "real":
        assert 0.85 <= row.throughput_MB_s / row.model_MB_s <= 1.15, row.throughput_MB_s
        assert str(row.emulator_reason) in ("nan", "", "timers"), row.emulator_reason
        return
    assert row.model_MB_s > 5000 and row.throughput_MB_s < 0.5 * row.model_MB_s
    assert row.limited_by == "emulator" and row.emulator_limited
    # tcg only where the harness finds QEMU's software emulation (the Vagrant VM in CI)
    reasons = ("cpu", "shortfall") + (("tcg",) if verdict().emulated else ())
    assert any(r in row.emulator_reason for r in reasons), row.emulator_reason
    assert summary.limited_by == "emulator"


def test_lossy_points_share_their_seed_and_dilated_cubic_is_marked(real_kernel, tmp_path,
                                                                   kernel_keeps_netem_seed):
    """Points a run compares meet the same netem draw (the seed the kernel reports is in
    every row, the same at k = 1 and 2), and CUBIC over a lossy path at k > 1 is marked
    emulator-limited by the `clock` rule, at k = 1 not."""
    f = tmp_path / "seeded.toml"
    f.write_text(SHORT.replace('distance_km = [0, 3000]',
                               'distance_km = [1000]\nloss_pct = [0.5]\ntime_scale = [1, 2]')
                 .format(extra=""))
    out = run_file(f, tmp_path / "out")
    df = pd.read_csv(out / "results.csv")
    far = df[df.distance_km == 1000].set_index("time_scale_k")
    assert (far["status"] == "ok").all() and len(far) == 2
    assert "clock" in far.loc[2.0, "emulator_reason"]
    assert "clock" not in str(far.loc[1.0, "emulator_reason"])
    if not kernel_keeps_netem_seed:  # older kernels keep no seed: the rows say so
        assert far["loss_seed"].isna().all()
        pytest.skip("this kernel keeps no netem seed (TCA_NETEM_PRNG_SEED: Linux >= 6.3)")
    assert far["loss_seed"].str.match(r"0x[0-9a-f]{16}$").all()
    assert far.loc[1.0, "loss_seed"] == far.loc[2.0, "loss_seed"]


SHARED = """
name = "shared"
topology = "metro"
[fixed]
workers = 2
rate = "100mbit"
distance_km = 60
[dataset]
files = 16
file_kib = 512
[workload]
batch = 2
compute_ms = 20
readers = 2
measure_s = 4
measure_max_s = 10
measure_stall_s = 2
warmup_max_s = 2
min_steps = 4
"""


def test_workers_sharing_a_line_are_measured_over_one_window(real_kernel, tmp_path):
    """Two workers on one 100 Mbit/s span, each wanting 50 MB/s: both load until both
    windows are complete, are measured over one stretch of time, and together read no
    more than the line carries (2026-12-04 they did not: one worker measured alone on
    the line after the other stopped, their sum 14 % above it). The window is 4 s: the
    workers' windows may start and end up to 1.5 steps apart, which a 2 s window let
    add up to 103.7 % of the line (CI 2026-12-07)."""
    f = tmp_path / "shared.toml"
    f.write_text(SHARED)
    out = run_file(f, tmp_path / "out")
    df = pd.read_csv(out / "results.csv")
    far = df[~df.baseline.astype(bool)]
    assert len(far) == 2 and (far["status"] == "ok").all()
    line = 100e6 / 8 / 1e6 * 1448 / 1514
    assert far.throughput_MB_s.sum() <= 1.03 * line, far.throughput_MB_s.tolist()
    assert far.line_use_pct.between(85, 103).all(), far.line_use_pct.tolist()
    # the model's fibre term: each worker's fair share of the line, within 15 % (on QEMU's
    # software emulation a worker may fall short and must then be marked so; what a marked
    # worker leaves of the line is its peer's to take: max-min fairness, CI 2026-12-06 read
    # 1.16 of the even share beside a marked peer); a mark excuses one worker, never both:
    # with every worker excused nothing would be held to the model
    marked = far.emulator_limited.astype(bool) & verdict().emulated
    fair = far[~marked]
    assert len(fair) >= 1, f"every worker marked: {far.emulator_reason.tolist()}"
    assert (fair.limited_by == "fibre").all(), far.limited_by.tolist()
    left = line - far[marked].throughput_MB_s.sum()
    ratio = fair.throughput_MB_s / fair.model_MB_s.clip(lower=left / len(fair))
    assert ratio.between(0.85, 1.15).all(), ratio.tolist()
    steps = pd.read_csv(out / "steps.csv")
    steps = steps[steps.point == far.point.iloc[0]]
    steps = steps[steps.measured.astype(str) == "True"]
    spans = steps.groupby("worker").agg(first=("start_s", "min"), last=("start_s", "max"))
    assert len(spans) == 2
    step_s = float(far.step_s.max())
    assert (spans["first"].max() - spans["first"].min()) <= 1.5 * step_s, spans
    assert (spans["last"].max() - spans["last"].min()) <= 1.5 * step_s, spans
    summary = pd.read_csv(out / "summary.csv")
    assert summary.line_use_pct.max() <= 103
