"""A DLIO workload config, as MLPerf Storage ships it, measured through the testbed:
MLPerf's cosmoflow_h100.yaml (2.8 MB samples, one a step, 3.5 ms of compute: 808 MB/s)
over a 1 Gbit/s line at 1,000 km reads the line's payload rate, as the model says, with
the config's loader settings in every row and its path in meta.json. Time runs 5 times
slower (3.5 ms steps are shorter than the lab kernel's timers keep: marked `timers`)."""

import json

import pandas as pd
import pytest

from testbed.experiment import run_file
from testbed.workload import presets

pytestmark = pytest.mark.system

PLAN = """
name = "dlio-cosmoflow"
topology = "apn"
[fixed]
workers = 1
rate = "1gbit"
mount = "m"
time_scale = 5
[sweep]
distance_km = [0, 1000]
[mounts.m]
tcp_buffer_mib = 64
read_ahead_kb = 16384
[dataset]
files = 32
[workload]
dlio = "{config}"
readers = 16
prefetch = 16
measure_s = 3
measure_max_s = 8
warmup_max_s = 3
min_steps = 20
"""


@pytest.mark.keeps_up("the config's point must read within 15 % of the model")
def test_an_mlperf_config_reads_as_the_model_says(real_kernel, tmp_path):
    config = presets.MLPERF_DIR / "cosmoflow_h100.yaml"
    f = tmp_path / "dlio.toml"
    f.write_text(PLAN.format(config=config))
    out = run_file(f, tmp_path / "out")
    df = pd.read_csv(out / "results.csv")
    assert (df.status == "ok").all(), df.reason.tolist()
    assert (df.batch == 1).all() and (df.compute_ms == 3.5).all()  # the config's
    assert (df.readers == 16).all()  # the experiment's own value wins
    far = df[~df.baseline.astype(bool)].iloc[0]
    assert not far.emulator_limited, far.emulator_reason
    assert far.limited_by == "fibre", (far.limited_by, far.model_MB_s)
    assert 0.85 <= far.throughput_MB_s / far.model_MB_s <= 1.15, \
        (far.throughput_MB_s, far.model_MB_s)
    assert json.loads((out / "meta.json").read_text())["dlio"] == str(config)
