"""The two other kinds of workload measured through `testbed run` (experiment.kinds):
MLPerf Storage's llama3_8b.yaml as it is, its checkpoints written by two GPU workers
(ranks 0 and 1 of 8) across a 1 Gbit/s line at 0 and 3,000 km, verified on the worker and
the server and checked against the write model (a co-located write the lab kernel's CPU
holds back must say so); and the shipped recorded trace replayed over the same line at 0
and 1,000 km, where its per-file round trips slow it down."""

import pandas as pd
import pytest

from testbed.experiment import run_file
from testbed.workload import presets

pytestmark = pytest.mark.system
ROOT = presets.MLPERF_DIR.parents[2]

CHECKPOINT = """
name = "ckpt"
topology = "apn"
[fixed]
workers = 2
rate = "1gbit"
time_scale = 1
[sweep]
distance_km = [0, 3000]
[workload]
dlio = "{config}"
scale = 0.0005
"""

TRACE = """
name = "trace"
topology = "apn"
[fixed]
workers = 1
rate = "1gbit"
[sweep]
distance_km = [0, 1000]
[workload]
trace = "{trace}"
"""


@pytest.mark.keeps_up("the write time is held to the model's")
def test_mlperf_checkpoints_are_written_read_back_and_modelled(real_kernel, tmp_path):
    f = tmp_path / "ckpt.toml"
    f.write_text(CHECKPOINT.format(config=presets.MLPERF_DIR / "llama3_8b.yaml"))
    df = pd.read_csv(run_file(f, tmp_path / "out") / "results.csv")
    assert (df.status == "ok").all(), df.reason.tolist()
    assert len(df) == 4 and (df.checkpoints_verified == 10).all()
    assert (df.rank_MB > 6).all() and (df.rank_MB < 7.5).all()  # 1/2000 of 13.1 GiB
    assert (df.write_s > 0).all() and (df.read_s > 0).all()
    far, near = df[df.distance_km == 3000].iloc[0], df[df.distance_km == 0].iloc[0]
    if near.emulator_limited:  # the lab kernel's CPU held the co-located write back
        assert near.limited_by == "emulator" and "shortfall" in near.emulator_reason
    else:
        assert far.write_s > near.write_s  # round trips and the window across 3,000 km
    assert far.write_model_s > near.write_model_s
    assert 0.5 <= far.write_s / far.write_model_s <= 2.0, (far.write_s, far.write_model_s)
    assert far.full_lost_pct > 0 and far.limited_by


def test_a_recorded_trace_replays_over_the_fibre(real_kernel, tmp_path):
    f = tmp_path / "trace.toml"
    f.write_text(TRACE.format(trace=ROOT / "traces" / "example-loader.trace"))
    df = pd.read_csv(run_file(f, tmp_path / "out") / "results.csv")
    assert (df.status == "ok").all(), df.reason.tolist()
    far, near = df[df.distance_km == 1000].iloc[0], df[df.distance_km == 0].iloc[0]
    assert near.au_pct > far.au_pct and near.step_s < far.step_s
    assert far.throughput_MB_s > 0 and far.limited_by == "trace (not modelled)"
