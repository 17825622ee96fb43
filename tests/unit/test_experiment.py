"""Experiment plans, slowdown against the baseline, DLIO summaries (no root)."""

import math

import pandas as pd
import pytest

from testbed import experiment, results, workload
from testbed.errors import SpecError


def write(tmp_path, text):
    p = tmp_path / "x.toml"
    p.write_text(text)
    return p


def test_plan_inserts_baseline_and_orders_it_first(tmp_path):
    plan = experiment.load(write(tmp_path, """
[sweep]
distance_km = [3000, 60]
nconnect = [1, 4]
loss_pct = [0.1]
"""))
    pts = plan.points()
    assert len(pts) == 2 * 3 * 2
    assert pts[0] == {"nconnect": 1, "distance_km": 0, "loss_pct": 0}
    # every point's baseline (distance 0 and loss 0, same nconnect) comes before it
    for i, p in enumerate(pts):
        base = {**p, "distance_km": 0, "loss_pct": 0}
        assert pts.index(base) <= i


def test_fixed_distance_still_gets_a_baseline(tmp_path):
    plan = experiment.load(write(tmp_path, "[fixed]\ndistance_km = 3000\n"
                                           "[sweep]\nrsize = [65536, 1048576]\n"))
    assert plan.sweep["distance_km"] == [0, 3000]


@pytest.mark.parametrize("text, needle", [
    ("[sweep]\ncolour = [1]\n", "unknown key 'colour'"),
    ("[sweep]\ndata_path = ['ftp']\n", "data_path 'ftp'"),
    ("[sweep]\nmount = ['fast']\n", "no \\[mounts.fast\\]"),
    ("[sweep]\nrsize = [1000]\n", "rsize: a power of two"),
    ("[workload]\npreset = 'gpt5-h100'\n", "preset: unknown"),
    ("repetitions = 0\n", "repetitions"),
])
def test_bad_plans_are_one_line_errors(tmp_path, text, needle):
    with pytest.raises(SpecError, match=needle):
        experiment.load(write(tmp_path, text))


def test_preset_scales_size_and_compute_together(tmp_path):
    plan = experiment.load(write(tmp_path, "[workload]\npreset = 'unet3d-h100'\n"
                                           "scale = 0.01\n"))
    p = workload.PRESETS["unet3d-h100"]
    assert plan.workload.batch == 7 and plan.au_bar == 90
    assert plan.workload.compute_ms == pytest.approx(3.23)
    assert plan.file_bytes == (int(p["sample_bytes"] * 0.01) // 1024) * 1024


def test_slowdown_against_same_settings_at_zero():
    df = pd.DataFrame({"distance_km": [0, 0, 3000, 3000], "loss_pct": 0.0,
                       "mount": ["a", "b", "a", "b"], "wall_s": [10.0, 5.0, 15.0, 5.5]})
    out = experiment._with_slowdown(df, ["mount", "distance_km"])
    assert list(out["slowdown_pct"].round(6)) == [0.0, 0.0, 50.0, 10.0]


def test_dlio_summary_keys_and_expectation():
    rows = pd.DataFrame({"worker": ["w1", "w2"], "au_pct": [95.0, 85.0],
                         "samples_per_s": [10.0, 8.0], "throughput_MB_s": [100.0, 80.0]})
    m = results.dlio_summary(rows, 90)["metric"]
    assert m["train_au_mean_percentage"] == 90.0
    assert m["train_au_meet_expectation"] == "success"
    assert m["train_throughput_mean_samples_per_second"] == 9.0
    assert m["train_io_mean_MB_per_second"] == 90.0
    assert results.dlio_summary(rows.assign(au_pct=[80.0, 85.0]), 90)["metric"][
        "train_au_meet_expectation"] == "fail"


def test_mathis_bound():
    assert math.isinf(results.mathis_MB_s(29.4, 0.0))
    one = results.mathis_MB_s(29.4, 1.0)
    assert one == pytest.approx(1448 / 0.0294 * 1.22 / 0.1 / 1e6)
    assert results.mathis_MB_s(29.4, 1.0, connections=4) == pytest.approx(4 * one)


def test_shipped_experiments_load():
    for f in sorted((experiment.REPO / "experiments").glob("*.toml")):
        experiment.load(f)


def test_capture_option_parsed_and_checked(tmp_path):
    base = '[sweep]\ndistance_km = [0, 60]\n'
    f = tmp_path / "c.toml"
    f.write_text(base + "[capture]\nseconds = 30\nkeep_pcap = true\n")
    opt = experiment.load(f).capture
    assert opt is not None and opt.seconds == 30 and opt.keep_pcap and opt.max_mib == 256
    f.write_text(base + "[capture]\nenabled = false\n")
    assert experiment.load(f).capture is None
    f.write_text(base)
    assert experiment.load(f).capture is None
    for bad in ("secs = 3", "seconds = 0", "max_mib = 1.5", 'keep_pcap = "yes"'):
        f.write_text(base + f"[capture]\n{bad}\n")
        with pytest.raises(SpecError, match="capture"):
            experiment.load(f)


def test_server_table(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text('[sweep]\ndistance_km = [0]\n[server]\nthreads = 64\n')
    assert experiment.load(f).server.threads == 64
    for bad in ("threads = 0", "thread = 8"):
        f.write_text(f'[sweep]\ndistance_km = [0]\n[server]\n{bad}\n')
        with pytest.raises(SpecError):
            experiment.load(f)
