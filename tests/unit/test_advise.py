"""`testbed advise`: the model's walk from the defaults to the goal, cheapest tier
first; the experiment files it writes; how a confirmation is judged; the command."""

import math

import pandas as pd
import pytest

from testbed import cli
from testbed.errors import SpecError
from testbed.experiment.advise import advise as adv
from testbed.experiment.resolve import explain
from testbed.experiment.plan import plan as plan_mod
from testbed.model.host import CONNECTION as HOST_CONNECTION


def plan_for(tmp_path, **kw):
    s = adv.Scenario(**{"workload": "unet3d-h100", "distance_km": 3000, **kw})
    f = tmp_path / "a.toml"
    f.write_text(adv.experiment_text(s))
    return plan_mod.load(f)


def test_unet3d_at_3000_km_needs_only_mount_and_host_settings_in_the_model(tmp_path):
    a = adv.advise(plan_for(tmp_path), adv.Goal("slowdown_pct", 1))
    assert a.path[0].changes == () and a.path[0].text == "the defaults"
    assert not a.path[0].meets and a.path[0].limited_by == "window"
    r = a.recommended
    assert r is not None and r.meets and r.tier == 0 and r.slowdown_pct <= 1
    assert dict(r.changes)["read_ahead_kb"] > 128 and dict(r.changes)["tcp_buffer_mib"] > 6
    rates = [c.model_MB_s for c in a.path]
    assert rates == sorted(rates)  # every step buys something
    assert [c.tier for c in a.path] == sorted(c.tier for c in a.path)  # cheapest first
    assert a.runner_up is not None and a.runner_up.meets


def test_eight_gpus_on_one_line_need_a_copy_or_say_the_fibre_stops_them(tmp_path):
    plan = plan_for(tmp_path, workers=8)
    a = adv.advise(plan, adv.Goal("slowdown_pct", 1))
    assert a.recommended is not None and dict(a.recommended.changes)["data_path"] == "cache"
    assert a.recommended.tier == 2
    b = adv.advise(plan, adv.Goal("slowdown_pct", 1),
                   allowed=tuple(k for k in adv.DEFAULT_ALLOWED if k != "data_path"))
    assert b.recommended is None and b.stopped_by == "fibre"
    assert "faster line" in adv.LIFTS[b.stopped_by]


def test_knobs_that_bind_each_other_are_raised_together_before_a_copy(tmp_path):
    # cosmoflow reads one file per step (batch 1): files in flight are at most readers
    # and at most prefetch, so neither raises the prediction alone; a copy at the GPU
    # site must not be recommended while both together buy the distance back.
    a = adv.advise(plan_for(tmp_path, workload="cosmoflow-h100", distance_km=1000),
                   adv.Goal("slowdown_pct", 1))
    r = a.recommended
    assert r is not None and r.tier < adv.COPY_TIER
    assert dict(r.changes)["readers"] > 4 and dict(r.changes)["prefetch"] > 4


def test_a_thin_margin_gets_samples_requested_ahead_of_the_readers(tmp_path):
    """Where the readers' round trips leave less than THIN x the demand, the loader
    requests SLACK samples per reader (cosmoflow at 3,000 km: 32 readers, prefetch 64);
    a wide margin (60 km, hosts that do not bind: one connection of the default host
    profile carries 1.6 GB/s, under twice cosmoflow's 0.8) and a copy at the GPU site
    keep the defaults' prefetch."""
    far = adv.advise(plan_for(tmp_path, workload="cosmoflow-h100"), adv.Goal("slowdown_pct", 1))
    r = dict(far.recommended.changes)
    assert r["prefetch"] >= adv.SLACK * r["readers"] and far.recommended.meets
    near = adv.advise(plan_for(tmp_path, workload="cosmoflow-h100", distance_km=60,
                               host="ideal"), adv.Goal("slowdown_pct", 1))
    assert near.recommended.changes == ()
    assert "prefetch" not in dict(near.runner_up.changes)  # the cache reads locally


def test_the_recommendation_keeps_only_the_changes_it_needs(tmp_path):
    # at 60 km eight GPUs fill the line: read-ahead climbs on the way, the cache alone
    # then meets the goal.
    a = adv.advise(plan_for(tmp_path, distance_km=60, workers=8), adv.Goal("slowdown_pct", 1))
    assert a.recommended is not None
    assert {k for k, _ in a.recommended.changes} == {"data_path", "cache_mib"}
    assert any("read_ahead_kb" in dict(c.changes) for c in a.path)
    assert a.runner_up is not None and a.runner_up.changes == (("data_path", "staged"),)


def test_an_au_goal_is_met_earlier_than_a_one_percent_slowdown(tmp_path):
    plan = plan_for(tmp_path)
    au = adv.advise(plan, adv.Goal("au_pct", 50))
    sd = adv.advise(plan, adv.Goal("slowdown_pct", 1))
    assert au.recommended is not None and 50 <= au.recommended.au_pct
    assert len(au.path) < len(sd.path)


@pytest.mark.parametrize("metric,value", [("slowdown_pct", 0), ("au_pct", 101),
                                          ("au_pct", math.nan), ("speed", 1)])
def test_bad_goals(metric, value):
    with pytest.raises(SpecError):
        adv.Goal(metric, value)


def test_unknown_knobs_are_refused(tmp_path):
    with pytest.raises(SpecError, match="no advice ladder for mtu"):
        adv.advise(plan_for(tmp_path), adv.Goal("au_pct", 90), allowed=("mtu",))


def test_experiment_text_loads_and_holds_the_changes(tmp_path):
    s = adv.Scenario("resnet50-h100", 1000, workers=2, repetitions=4)
    changes = (("read_ahead_kb", 4096), ("readers", 16), ("data_path", "cache"),
               ("cache_mib", 4096))
    f = tmp_path / "c.toml"
    f.write_text(adv.experiment_text(s, changes, "c"))
    plan = plan_mod.load(f)
    assert plan.repetitions == 4 and len(plan.points) == 2
    far = adv.far_point(plan)
    assert far.mount.read_ahead_kb == 4096 and far.workload.readers == 16
    assert far.data_path == "cache" and far.workers == 2
    text = adv.snippet(adv.Candidate(changes, 2, 1.0, 1.0, 100.0, "compute", True))
    assert "[mounts.advised]\nread_ahead_kb = 4096" in text
    assert '[fixed]\ndata_path = "cache"' in text and "[workload]\nreaders = 16" in text


def test_experiment_files_are_toml_as_written_whatever_the_strings():
    """The file a confirmation runs is the experiment's tables as TOML round-trips them:
    a rate, a topology or a description with quotes and backslashes is escaped, not
    pasted into the text (an f-string TOML writer broke on them)."""
    import tomllib
    s = adv.Scenario("resnet50-h100", 3000, rate='1gbit"\\x', topology='a"b\\c')
    changes = (("nconnect", 4), ("readers", 16))
    doc = adv.experiment(s, changes, 'name "with" \\ quotes')
    assert tomllib.loads(adv.experiment_text(s, changes, 'name "with" \\ quotes')) == doc
    assert doc["fixed"]["rate"] == '1gbit"\\x' and doc["topology"] == 'a"b\\c'
    snippet = adv.snippet(adv.Candidate(changes, 1, 1.0, 1.0, 100.0, "compute", True))
    assert tomllib.loads(snippet) == {"mounts": {"advised": {"nconnect": 4}},
                                      "workload": {"readers": 16}}


def summary(au, au_ci, sd, sd_ci, limited="compute", measured=3100.0, modelled=3177.0):
    return pd.DataFrame([
        {"baseline": True, "au_pct": 99.0, "au_pct_ci": 0.1, "slowdown_pct": 0.0,
         "slowdown_pct_ci": 0.1, "limited_by": "compute", "n": 3,
         "throughput_MB_s": 3177.0, "model_MB_s": 3177.0},
        {"baseline": False, "au_pct": au, "au_pct_ci": au_ci, "slowdown_pct": sd,
         "slowdown_pct_ci": sd_ci, "limited_by": limited, "n": 3,
         "throughput_MB_s": measured, "model_MB_s": modelled}])


def test_judge_needs_the_interval_inside_the_goal():
    goal = adv.Goal("slowdown_pct", 1)
    assert adv.judge(goal, summary(98.5, 0.2, 0.4, 0.3)).confirmed
    v = adv.judge(goal, summary(98.5, 0.2, 0.6, 0.8))
    assert not v.confirmed and "measure longer" in v.why
    assert not adv.judge(goal, summary(90, 1, 9, 1)).confirmed
    v = adv.judge(goal, summary(98.5, 0.2, 0.4, 0.3, limited="emulator"))
    assert not v.confirmed and "emulator" in v.why
    v = adv.judge(adv.Goal("au_pct", 90), summary(80, 1, 20, 1, "latency", 2000.0))
    assert not v.confirmed and "does not name" in v.why
    # within 15 % of the model, but the model said compute-bound: named too
    v = adv.judge(goal, summary(89.3, 0.9, 9.9, 1.1, "compute", 707.0, 808.0))
    assert not v.confirmed and "expected the compute to bind" in v.why


def test_the_command_answers_from_the_model(capsys):
    rc = cli.main(["advise", "--workload", "unet3d-h100", "--distance-km", "3000",
                   "--slowdown-pct", "1", "--model-only"])
    text = capsys.readouterr().out
    assert rc == 0 and "[mounts.advised]" in text and "model answered in" in text


def test_the_command_refuses_bad_input_in_one_line(capsys):
    rc = cli.main(["advise", "--workload", "unet3d-h100", "--distance-km", "3000",
                   "--au-pct", "90", "--allow", "mtu", "--model-only"])
    err = capsys.readouterr().err
    assert rc == 2 and "no advice ladder" in err and "Traceback" not in err


def test_one_connection_cannot_feed_unet3d_on_the_default_host(tmp_path):
    """The answer for ideal hosts (256 MiB buffers, 64 MiB read-ahead, one connection)
    is held to one connection's 1.6 GB/s of the 3.2 GB/s it needs on a current server."""
    plan = plan_for(tmp_path)
    p = adv.Rater(plan, adv.Goal("slowdown_pct", 1)).point_of(
        {"tcp_buffer_mib": 256, "read_ahead_kb": 65536})
    topo = plan.resolver.topo(p)
    b = explain.planned_bounds(topo, p, "w1")
    assert b.limited_by == HOST_CONNECTION and b.predicted == pytest.approx(12_500 / 8 * 1e6)


def test_advise_lifts_the_connection_limit_and_says_which_hosts(tmp_path, capsys):
    goal = adv.Goal("slowdown_pct", 1)
    ideal = adv.advise(plan_for(tmp_path, host="ideal"), goal).recommended
    real = adv.advise(plan_for(tmp_path), goal).recommended
    assert "nconnect" not in dict(ideal.changes)
    assert dict(real.changes)["nconnect"] * 12_500 / 8 >= real.demand_MB_s
    assert real.meets and real.tier == 0
    assert 'host = "gpu-server"' in adv.experiment_text(adv.Scenario("unet3d-h100", 3000))
    assert cli.main(["advise", "--workload", "unet3d-h100", "--distance-km", "3000",
                     "--slowdown-pct", "1", "--model-only", "--host", "ideal"]) == 0
    assert "host profile: ideal" in capsys.readouterr().out
    assert "nconnect" in adv.LIFTS[HOST_CONNECTION] and "RDMA" in adv.LIFTS[HOST_CONNECTION]

def test_confirm_measures_until_a_candidate_holds_and_shows_each_verdict(tmp_path):
    """The caller's runner measures (and reports) each candidate's file; confirm judges
    its summary.csv, shows one line per verdict (it prints nothing itself) and stops at
    the first confirmed: here the recommendation misses, the runner-up holds."""
    from testbed.experiment.advise import confirm
    s = adv.Scenario(workload="unet3d-h100", distance_km=3000)
    a = adv.advise(plan_for(tmp_path), adv.Goal("slowdown_pct", 1))
    au = iter([80.0, 99.8])
    ran, shown = [], []

    def run_plan(plan, where):
        ran.append(where.name)
        where.mkdir(parents=True)
        pd.DataFrame([{"baseline": True, "au_pct": 100.0},
                      {"baseline": False, "au_pct": (x := next(au)), "au_pct_ci": 0.1,
                       "slowdown_pct": 100 * (100 / x - 1), "slowdown_pct_ci": 0.1,
                       "throughput_MB_s": 3170.0, "model_MB_s": 3177.0,
                       "limited_by": "compute", "n": 3}]).to_csv(where / "summary.csv")

    measured = confirm.confirm(s, a, tmp_path / "out", run_plan, 2, shown.append)
    assert ran == ["candidate-1", "candidate-2"]
    assert (tmp_path / "out" / "candidate-1.toml").exists()
    assert [v.confirmed for _, v in measured] == [False, True]
    assert [c for c, _ in measured] == [a.recommended, a.runner_up]
    assert shown[0].startswith("not confirmed: ") and shown[1].startswith("CONFIRMED: ")


def test_a_candidate_the_lab_cannot_carry_is_recorded_not_measured(tmp_path):
    """The runner-up needs more memory than the lab kernel has: its error becomes a
    verdict with the reason, the recommendation's measurement stays, and the cell is
    recorded as not confirmed (not lost, not a traceback)."""
    from testbed.errors import SpecError
    from testbed.experiment.advise import advice_grid, confirm
    s = adv.Scenario(workload="unet3d-h100", distance_km=3000)
    a = adv.advise(plan_for(tmp_path), adv.Goal("slowdown_pct", 1))
    shown = []

    def run_plan(plan, where):
        if where.name == "candidate-2":
            raise SpecError("candidate-2.toml: needs 3288 MiB of memory at once")
        where.mkdir(parents=True)
        pd.DataFrame([{"baseline": True, "au_pct": 100.0},
                      {"baseline": False, "au_pct": 74.2, "au_pct_ci": 9.4,
                       "slowdown_pct": 34.9, "slowdown_pct_ci": 17.0,
                       "throughput_MB_s": 2355.0, "model_MB_s": 3177.0,
                       "limited_by": "compute", "n": 3}]).to_csv(where / "summary.csv")

    measured = confirm.confirm(s, a, tmp_path / "out", run_plan, 2, shown.append)
    assert [v.n for _, v in measured] == [3, 0]
    assert "3288 MiB" in measured[1][1].why and shown[1].startswith("not measured: ")
    advice_grid.record(tmp_path / "grid" / "cell", s, a, measured, 60.0)
    doc = advice_grid.cells(tmp_path / "grid")[0]
    assert advice_grid.verdict(doc) == "not confirmed"
    assert "74.20 ± 9.40" in advice_grid.row(doc)["AU %"]
