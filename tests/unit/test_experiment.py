"""Experiment plans: parsing, validation, baselines, ids, overrides, search; slowdown and
DLIO summaries (no root, no kernel)."""

import math

import pandas as pd
import pytest

from testbed import results, workload
from testbed.errors import SpecError
from testbed.experiment import REPO
from testbed.experiment.plan import plan as plan_mod
from testbed.experiment.record import summary


def write(tmp_path, text):
    p = tmp_path / "x.toml"
    p.write_text(text)
    return p


def load(tmp_path, text, **overrides):
    return plan_mod.load(write(tmp_path, text), {k: str(v) for k, v in overrides.items()})


def test_every_point_has_its_baseline_before_it(tmp_path):
    plan = load(tmp_path, "[sweep]\ndistance_km = [3000, 60]\nnconnect = [1, 4]\n"
                          "loss_pct = [0.1]\n")
    ids = [p.id for p in plan.points]
    assert len(plan.points) == 2 * 2 + 2  # two baselines added (loss 0, distance 0)
    for i, p in enumerate(plan.points):
        assert p.baseline_id in ids[:i + 1], (p.id, ids)
    base = plan.points[0]
    assert base.is_baseline and base.fibre("wan").distance_km == 0
    assert base.fibre("wan").loss_pct == 0


def test_fixed_distance_gets_a_co_located_baseline_and_shows_in_ids(tmp_path):
    plan = load(tmp_path, "[fixed]\ndistance_km = 3000\n[sweep]\nrsize = [65536, 1048576]\n")
    assert len(plan.points) == 4
    assert {p.fibre("wan").distance_km for p in plan.points} == {0.0, 3000.0}
    assert all("distance_km=" in p.id for p in plan.points)


def test_topology_default_distance_shows_in_ids(tmp_path):
    plan = load(tmp_path, 'topology = "two-sites"\n[sweep]\n'
                          'fibre.site_b.distance_km = [1000, 3000]\n')
    far = [p for p in plan.points if not p.is_baseline]
    assert [p.fibre("site_a").distance_km for p in far] == [60.0, 60.0]
    assert all("fibre.site_a.distance_km=60" in p.id for p in far)
    base = plan.baseline_of(far[0])
    assert base is not None and {s.distance_km for _, s in base.fibres} == {0.0}


def test_a_named_link_wins_over_all_links(tmp_path):
    plan = load(tmp_path, 'topology = "two-sites"\n[fixed]\ndistance_km = 500\n'
                          '"fibre.site_b.distance_km" = 2000\n')
    p = [p for p in plan.points if not p.is_baseline][0]
    assert p.fibre("site_a").distance_km == 500 and p.fibre("site_b").distance_km == 2000


@pytest.mark.parametrize("text, needle", [
    ("[sweep]\ncolour = [1]\n", "unknown knob 'colour'"),
    ("[sweep]\nnconect = [1]\n", "did you mean 'nconnect'"),
    ("[sweep]\ndata_path = ['ftp']\n", "data_path = 'ftp': unknown 'ftp'"),
    ("[sweep]\nmount = ['fast']\n", r"no such profile: define \[mounts.fast\]"),
    ("[sweep]\nrsize = [1000]\n", "rsize = 1000: out of range"),
    ("[sweep]\nrsize = [65537]\n", "power of two"),
    ("[workload]\npreset = 'gpt5-h100'\n", "preset = 'gpt5-h100'"),
    ("repetitions = 0\n", "repetitions = 0"),
    ("[fixed]\nworkers = 100000\n", "workers = 100000: out of range"),
    ("[workload]\ncompute_ms = nan\n", "finite"),
    ("au_bar = 'high'\n", "au_bar = 'high'"),
    ("[dataset]\nfiles = 'abc'\n", r"\[dataset\] files = 'abc': expected an integer"),
    ("[dataset]\nfilez = 4\n", "did you mean 'files'"),
    ("[cache]\nsize = 4\n", "did you mean 'size_mib'"),
    ("[staging]\nparallels = 4\n", "did you mean 'parallel'"),
    ("fixed = 5\n", "must be a table"),
    ("[fixed]\nnconnect = 4\n[sweep]\nnconnect = [1, 2]\n", "either fixed or swept"),
    ("[sweep]\ndistance_km = [0, 60]\n[fixed]\njitter_ms = 1\n", "point distance_km=0"),
    ("[sweep]\nvers = ['3']\n", r"vers 3 is not served"),
    ("[workload]\naccess = 'record'\n", "needs \\[dataset\\] format"),
    ("[workload]\nmeasure_s = 20\nmeasure_max_s = 10\n", "measure_max_s"),
    ("[sweep]\ndata_path = ['cache']\n[cache]\nsize_mib = 64\n[dataset]\nfiles = 64\n"
     "file_kib = 4096\n", "cannot hold"),
    ('topology = "two-sites"\n[sweep]\n"fibre.site_c.loss_pct" = [1]\n', "did you mean 'site_b'"),
    ('topology = "local"\n[sweep]\ndistance_km = [1]\n', "unknown knob"),
    ('topology_params = {workers = 2}\n', "use \\[fixed\\]"),
    ("[search]\nknob = 'distance_km'\nrange = [0, 3000]\ntarget = 'au > 90'\n"
     "tolerance = 50\n", "metrics"),
])
def test_bad_plans_are_one_line_errors(tmp_path, text, needle):
    with pytest.raises(SpecError, match=needle) as info:
        load(tmp_path, text)
    assert "\n" not in str(info.value)


def test_non_utf8_and_broken_toml(tmp_path):
    p = tmp_path / "x.toml"
    p.write_bytes(b'name = "\xff"\n')
    with pytest.raises(SpecError, match="not UTF-8"):
        plan_mod.load(p)
    p.write_text("[sweep\n")
    with pytest.raises(SpecError, match="not valid TOML"):
        plan_mod.load(p)


def test_overrides_fix_a_swept_knob_and_refuse_full_width_digits(tmp_path):
    text = "[sweep]\ndistance_km = [0, 60, 1000]\nnconnect = [1, 4]\n"
    plan = load(tmp_path, text, distance_km=60, repetitions=3)
    assert {p.fibre("wan").distance_km for p in plan.points} == {0.0, 60.0}
    assert plan.repetitions == 3
    with pytest.raises(SpecError, match="nconnect = '４'"):
        load(tmp_path, text, nconnect="４")
    with pytest.raises(SpecError, match="-p"):
        load(tmp_path, text, distance_km="inf")


def test_read_ahead_zero_is_kept(tmp_path):
    plan = load(tmp_path, "[fixed]\nread_ahead_kb = 0\n")
    assert all(p.mount.read_ahead_kb == 0 for p in plan.points)


def test_preset_scales_size_and_compute_together(tmp_path):
    plan = load(tmp_path, "[workload]\npreset = 'unet3d-h100'\nscale = 0.01\n")
    p = workload.PRESETS["unet3d-h100"]
    point = plan.points[0]
    assert point.workload.batch == 7 and plan.au_bar == 90
    assert point.workload.compute_ms == pytest.approx(3.23)
    assert point.dataset.file_bytes == (int(p["sample_bytes"] * 0.01) // 1024) * 1024


def test_search_settings_and_checks(tmp_path):
    plan = load(tmp_path, "[sweep]\nmount = ['default', 'tuned']\n[mounts.tuned]\n"
                          "nconnect = 4\n[search]\nknob = 'distance_km'\nrange = [0, 3000]\n"
                          "target = 'au_pct >= 90'\ntolerance = 100\n")
    assert plan.search is not None and plan.search.meets(90.0) and not plan.search.meets(89.9)
    assert plan.search.key.text == "distance_km"
    assert len(plan_mod.search_settings(plan.resolver.raw)) == 2


def test_slowdown_per_step_against_each_points_baseline():
    df = pd.DataFrame({
        "point": ["a=0|rep=0", "a=0|rep=1", "a=1|rep=0", "b=0|rep=0", "b=1|rep=0"],
        "baseline_point": ["a=0", "a=0", "a=0", "b=0", "b=0"],
        "status": "ok", "step_s": [1.0, 1.0, 1.5, 0.5, 1.1],
        "step_ci_s": [0.01, 0.01, 0.03, 0.005, 0.011]})
    out = summary.with_slowdown(df)
    assert list(out["slowdown_pct"].round(6)) == [0.0, 0.0, 50.0, 0.0, 120.0]
    # 1.5 x sqrt(0.02^2 + 0.01^2): the point's and the baseline's relative intervals
    assert out["slowdown_ci_pct"][2] == pytest.approx(150 * math.hypot(0.02, 0.01))


def test_a_failed_run_measured_again_by_resume_leaves_the_report():
    """--resume measures a failed run again: results.csv keeps both rows, the summary
    only the run that measured; a point that never measured keeps its failure."""
    df = pd.DataFrame({"point": ["a|rep=0", "a|rep=0", "b|rep=0", "c|rep=0"],
                       "status": ["failed", "ok", "failed", "ok"]})
    kept = summary.latest_runs(df)
    assert list(zip(kept["point"], kept["status"])) == [("a|rep=0", "ok"), ("b|rep=0", "failed"),
                                                        ("c|rep=0", "ok")]


def test_mean_ci():
    mean, ci = summary.mean_ci(pd.Series([1.0, 2.0, 3.0]))
    assert mean == 2.0 and ci == pytest.approx(4.303 * 1.0 / math.sqrt(3), rel=1e-3)
    assert math.isnan(summary.mean_ci(pd.Series([5.0]))[1])


def test_dlio_summary_keys_and_expectation():
    rows = pd.DataFrame({"worker": ["w1", "w2"], "au_pct": [95.0, 85.0],
                         "samples_per_s": [10.0, 8.0], "throughput_MB_s": [100.0, 80.0]})
    m = results.dlio_summary(rows, 90)["metric"]
    assert m["train_au_mean_percentage"] == 90.0
    assert m["train_au_meet_expectation"] == "success"
    assert m["train_throughput_mean_samples_per_second"] == 9.0
    assert m["train_io_mean_MB_per_second"] == 90.0


def test_shipped_experiments_load():
    files = sorted((REPO / "experiments").glob("*.toml"))
    assert len(files) >= 7
    for f in files:
        plan_mod.load(f)


def test_capture_option_parsed_and_checked(tmp_path):
    base = '[sweep]\ndistance_km = [0, 60]\n'
    opt = load(tmp_path, base + "[capture]\nseconds = 30\nkeep_pcap = true\n").capture
    assert opt is not None and opt.seconds == 30 and opt.keep_pcap and opt.max_mib == 32
    assert load(tmp_path, base + "[capture]\nenabled = false\n").capture is None
    assert load(tmp_path, base).capture is None
    for bad in ("secs = 3", "seconds = 0", "max_mib = 1.5", 'keep_pcap = "yes"'):
        with pytest.raises(SpecError, match="capture"):
            load(tmp_path, base + f"[capture]\n{bad}\n")


def test_server_table(tmp_path):
    plan = load(tmp_path, '[server]\nthreads = 64\nversions = ["3", "4.2"]\n')
    assert plan.points[0].server.threads == 64
    assert plan.points[0].server.versions == ("3", "4.2")
    for bad in ("threads = 0", "thread = 8", 'versions = ["2"]'):
        with pytest.raises(SpecError, match="server"):
            load(tmp_path, f'[server]\n{bad}\n')


def test_congestion_is_a_knob_and_check_names_dilated_cubic_under_loss(tmp_path):
    from testbed.experiment.run import estimate
    plan = load(tmp_path, "[fixed]\ndistance_km = 3000\nloss_pct = 0.1\ntime_scale = 5\n"
                          "[sweep]\ncongestion = [\"cubic\", \"reno\"]\n")
    far = [p for p in plan.points if not p.is_baseline]
    assert {p.congestion for p in far} == {"cubic", "reno"}
    assert [estimate.dilated_cubic_under_loss(p) for p in far] == [True, False]
    assert all(estimate.dilated_delayed_ack_under_loss(p) for p in far)
    assert any("CUBIC with loss under time dilation" in line
               for line in estimate.describe(plan)[1])
    with pytest.raises(SpecError, match="congestion"):
        load(tmp_path, "[fixed]\ncongestion = \"vegas\"\n")


@pytest.mark.parametrize("knob, rule, note, bad", [
    ("delayed_ack", "dilated_delayed_ack_under_loss", "delayed ACKs with loss", '"sometimes"'),
    ("loss_probe", "dilated_loss_probe_under_loss", "tail loss probes with loss", "3"),
])
def test_timer_knob_is_on_by_default_and_check_names_it_when_dilated(tmp_path, knob, rule,
                                                                     note, bad):
    """delayed_ack and loss_probe: host knobs, on (Linux's default) unless set; --check
    notes the dilated lossy points that keep them on; a value not a bool is refused."""
    from testbed.experiment.run import estimate
    plan = load(tmp_path, f"[fixed]\ndistance_km = 3000\n[sweep]\n{knob} = [true, false]\n")
    assert [getattr(p, knob) for p in plan.points if not p.is_baseline] == [True, False]
    assert getattr(load(tmp_path, "[fixed]\nworkers = 1\n").points[0], knob) is True
    lossy = load(tmp_path, "[fixed]\nloss_pct = 0.1\ntime_scale = 5\ndistance_km = 3000\n"
                           f"[sweep]\n{knob} = [true, false]\n")
    far = [p for p in lossy.points if not p.is_baseline]
    assert [getattr(estimate, rule)(p) for p in far] == [True, False]
    assert any(note in line for line in estimate.describe(lossy)[1])
    with pytest.raises(SpecError, match=knob) as err:
        load(tmp_path, f"[fixed]\n{knob} = {bad}\n")
    assert str(err.value).count("true or false") == 1, err.value


def test_loss_seed_is_shared_by_the_settings_a_run_compares(tmp_path):
    """netem's seed depends on the seed knob, the repetition and the fibre only: points
    at other time scales, mounts or distances meet the same losses; reps fresh ones."""
    from testbed.experiment.measure.rig import loss_seed
    plan = load(tmp_path, "repetitions = 2\n[fixed]\nloss_pct = 0.1\n[sweep]\n"
                          "distance_km = [1000, 3000]\ntime_scale = [1, 10]\n"
                          "[mounts.default]\n[mounts.tuned]\nnconnect = 4\n")
    far = [p for p in plan.points if not p.is_baseline]
    assert len({loss_seed(p, 0, "wan") for p in far}) == 1
    assert loss_seed(far[0], 0, "wan") != loss_seed(far[0], 1, "wan")
    other = load(tmp_path, "[fixed]\nloss_pct = 0.1\nseed = 3\n").points[-1]
    assert loss_seed(other, 0, "wan") != loss_seed(far[0], 0, "wan")


def test_bad_values_say_what_is_allowed_once(tmp_path):
    with pytest.raises(SpecError) as err:
        load(tmp_path, "[mounts.default]\nnconnect = 2\n[fixed]\nmount = \"fast\"\n")
    assert str(err.value).endswith("known: default"), err.value
    with pytest.raises(SpecError) as err:
        load(tmp_path, "[mounts.tuned]\nrsize = \"big\"\n")
    assert "expected an integer 4096 .. 1048576 B, a power of two" in str(err.value)


def test_a_cache_counts_in_the_memory_a_point_needs(tmp_path):
    """The cache's image lives in the run's folder (RAM) and fills with each worker's
    copy up to its size: check_memory must count it, or the point fails mid-read."""
    from testbed.experiment.run.runner import memory_need_bytes
    base = ("[fixed]\nworkers = 2\ndistance_km = 60\n[dataset]\nfiles = 8\nfile_kib = 65536\n")
    direct = memory_need_bytes(load(tmp_path, base))
    cached = memory_need_bytes(load(tmp_path, base.replace(
        "[dataset]", 'data_path = "cache"\n[cache]\nsize_mib = 2048\n[dataset]')))
    assert cached - direct == 2 * 8 * 64 << 20  # both workers' copies, under 2 GiB
