"""`testbed advise` on the job as users bring it: a DLIO training config, a DLIO
checkpoint config, a recorded trace or an experiment file becomes the plan the advice
walks (testbed/experiment/advise/job.py); a malformed job is one line, exit 2, and
nothing is written."""

from pathlib import Path

import pytest

from testbed import cli
from testbed.errors import SpecError
from testbed.experiment.advise import advise as adv
from testbed.experiment.advise import confirm, job
from testbed.workload import checkpoint as ck
from testbed.workload import trace as trace_mod

REPO = Path(__file__).resolve().parents[2]
MLPERF = REPO / "testbed" / "workload" / "mlperf"
TRAINING = sorted(p for p in MLPERF.glob("*.yaml")
                  if "datagen" not in p.name and not p.name.startswith("llama3"))
CHECKPOINTS = sorted(MLPERF.glob("llama3_*.yaml"))
TRACE = REPO / "traces" / "example-loader.trace"
FAR = ["--distance-km", "3000", "--rate", "100gbit", "--model-only"]


def test_the_shipped_configs_are_all_here():
    assert len(TRAINING) == 6 and len(CHECKPOINTS) == 4


@pytest.mark.parametrize("config", TRAINING, ids=lambda p: p.name)
def test_every_mlperf_training_config_is_advised_unchanged(config, capsys):
    rc = cli.main(["advise", "--dlio", str(config), *FAR, "--slowdown-pct", "1"])
    out = capsys.readouterr().out
    assert rc == 0 and "model answered in" in out and "limited by" in out


@pytest.mark.parametrize("config", CHECKPOINTS, ids=lambda p: p.name)
def test_every_llama3_checkpoint_config_is_advised_on_time_lost(config, capsys):
    rc = cli.main(["advise", "--checkpoint", str(config), *FAR, "--lost-pct", "1",
                   "--checkpoint-interval-s", "1800"])
    out = capsys.readouterr().out
    assert rc == 0 and "lost %" in out and "training time lost" in out
    assert "at 30 min (the goal's)" in out and "(the config's)" in out


def test_the_shipped_trace_is_advised_as_the_loader_it_records(capsys):
    rc = cli.main(["advise", "--trace", str(TRACE), *FAR, "--slowdown-pct", "1"])
    out = capsys.readouterr().out
    assert rc == 0 and "the trace read as a loader: 2 stream(s)" in out


@pytest.mark.parametrize("name,goal", [("dlio.toml", "--slowdown-pct"),
                                       ("trace.toml", "--slowdown-pct"),
                                       ("checkpoint.toml", "--lost-pct")])
def test_shipped_experiment_files_are_advised_at_their_farthest_point(name, goal, capsys):
    rc = cli.main(["advise", "--experiment", str(REPO / "experiments" / name),
                   "--model-only", goal, "1"])
    assert rc == 0 and "model answered in" in capsys.readouterr().out


def test_the_trace_reads_as_two_readers_of_256_kib_files():
    """traces/example-loader.trace: 2 reader threads, batches of 2 x 256 KiB files,
    20 ms of compute per step, 64 KiB reads (traces/README.md)."""
    knobs, notes = job.trace_loader(trace_mod.load(TRACE))
    assert knobs["readers"] == 2 and knobs["file_kib"] == 256 and knobs["read_kib"] == 64
    assert 10 <= knobs["compute_ms"] <= 30  # the recording's 20 ms a batch, give or take
    assert "cannot know" in notes[0]


def scenario(**kw):
    return adv.Scenario(**{"workload": "llama3_8b.yaml", "distance_km": 3000,
                           "workers": 8, "kind": "checkpoint",
                           "source": str(MLPERF / "llama3_8b.yaml"), **kw})


def test_a_checkpoint_goal_uses_the_users_interval(tmp_path):
    plan = confirm.load(scenario(interval_s=1800.0), (), tmp_path, "start")
    a = adv.advise(plan, adv.Goal("lost_pct", 1))
    r = a.recommended
    assert r is not None and r.interval_s == 1800.0 and r.lost_pct <= 1
    assert r.lost_pct == pytest.approx(ck.training_time_lost_pct(r.write_s, 1800.0))
    assert set(dict(r.changes)) <= set(job.KNOBS_OF["checkpoint"])
    # at the config's 5 s no setting loses under 1 %: the line alone takes 9.4 s
    plan5 = confirm.load(scenario(), (), tmp_path, "five")
    b = adv.advise(plan5, adv.Goal("lost_pct", 1))
    assert b.recommended is None and b.path[-1].interval_s == 5.0
    assert b.stopped_by == "fibre"


def test_a_checkpoint_goal_in_seconds(tmp_path):
    plan = confirm.load(scenario(), (), tmp_path, "start")
    a = adv.advise(plan, adv.Goal("write_s", 30))
    assert a.recommended is not None and a.recommended.write_s <= 30


def test_goals_belong_to_their_jobs(tmp_path):
    plan = confirm.load(scenario(), (), tmp_path, "start")
    with pytest.raises(SpecError, match="checkpoint job's goal"):
        adv.advise(plan, adv.Goal("slowdown_pct", 1))
    reads = confirm.load(adv.Scenario("unet3d-h100", 3000), (), tmp_path, "reads")
    with pytest.raises(SpecError, match="reading job's"):
        adv.advise(reads, adv.Goal("lost_pct", 1))


BAD = [
    (["--dlio", "missing.yaml"], "not found"),
    (["--dlio", str(MLPERF / "llama3_8b.yaml")], "give it as --checkpoint"),
    (["--checkpoint", str(MLPERF / "unet3d_h100.yaml"), "--lost-pct", "1"],
     "give it as --dlio"),
    (["--dlio", str(MLPERF / "unet3d_datagen.yaml")], "writes a dataset"),
    (["--trace", str(REPO / "README.md")], "not JSON"),
    (["--experiment", str(REPO / "README.md")], "not valid TOML"),
    (["--checkpoint", str(MLPERF / "llama3_8b.yaml"), "--slowdown-pct", "1"],
     "checkpoint job's goal"),
    (["--dlio", str(MLPERF / "unet3d_h100.yaml"), "--lost-pct", "1"], "reading job's"),
    (["--dlio", str(MLPERF / "unet3d_h100.yaml"), "--checkpoint-interval-s", "60"],
     "for a checkpoint job"),
    (["--checkpoint", str(MLPERF / "llama3_8b.yaml"), "--lost-pct", "1",
      "--checkpoint-interval-s", "-5"], "out of range"),
    (["--dlio", str(MLPERF / "unet3d_h100.yaml"), "--distance-km", "99999"],
     "out of range"),
]


@pytest.mark.parametrize("argv,why", BAD, ids=lambda v: v if isinstance(v, str) else None)
def test_a_malformed_job_is_one_line_and_writes_nothing(argv, why, tmp_path, monkeypatch,
                                                        capsys):
    monkeypatch.chdir(tmp_path)
    goal = [] if any(a.endswith("-pct") for a in argv) else ["--slowdown-pct", "1"]
    far = [] if "--distance-km" in argv else ["--distance-km", "3000"]
    for model_only in ([], ["--model-only"]):
        rc = cli.main(["advise", *argv, *far, *goal, *model_only])
        err = capsys.readouterr().err
        assert rc == 2 and why in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1
        assert list(tmp_path.iterdir()) == []  # no results/advise-... folder


def test_an_experiment_file_needs_no_distance_and_a_job_file_does(capsys, tmp_path,
                                                                  monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["advise", "--dlio", str(TRAINING[0]), "--slowdown-pct", "1",
                     "--model-only"]) == 2
    assert "--distance-km is needed" in capsys.readouterr().err


def test_keeping_the_window_is_a_write_path_move(tmp_path):
    """slow_start_after_idle is a switch the advice may flip (tier 0): with windows from
    the BDP and every connection, at 30 min between checkpoints only the restarts are
    left to buy."""
    plan = confirm.load(scenario(interval_s=1800.0), (), tmp_path, "start")
    rater = adv.Rater(plan, adv.Goal("lost_pct", 0.1))
    base = {"tcp_buffer_mib": 1024, "nconnect": 16}
    on, off = rater.rate(base, 0), rater.rate({**base, "slow_start_after_idle": False}, 0)
    assert off.write_s < on.write_s and off.lost_pct < on.lost_pct
    move = next(m for m in adv.MOVES if m.knob == "slow_start_after_idle")
    assert adv.next_rung(move, True) is False and adv.next_rung(move, False) is None
    assert "slow_start_after_idle" in adv.DEFAULT_ALLOWED


def checkpoint_summary(write_s, model_s, full_lost, limited="round trips"):
    import pandas as pd
    return pd.DataFrame([
        {"baseline": True, "write_s": 0.01, "write_model_s": 0.01, "full_lost_pct": 0.5,
         "write_full_model_s": 9.4, "limited_by": "fibre", "n": 8},
        {"baseline": False, "write_s": write_s, "write_model_s": model_s, "au_pct": 80.0,
         "au_pct_ci": 1.0, "slowdown_pct": 5.0, "slowdown_pct_ci": 1.0,
         "full_lost_pct": full_lost, "write_full_model_s": 11.3, "write_MB_s": 100.0,
         "rank_MB": 14.0, "limited_by": limited, "n": 8}])


def test_a_checkpoint_is_confirmed_by_the_model_holding_at_the_labs_size():
    goal = adv.Goal("lost_pct", 1)
    v = adv.judge(goal, checkpoint_summary(0.13, 0.12, 0.62))
    assert v.confirmed and "within the goal" in v.why
    v = adv.judge(goal, checkpoint_summary(0.20, 0.12, 0.62))
    assert not v.confirmed and "does not name" in v.why
    assert not adv.judge(goal, checkpoint_summary(0.13, 0.12, 1.5)).confirmed
    assert not adv.judge(goal, checkpoint_summary(0.13, 0.12, 0.6, "emulator")).confirmed
    assert adv.judge(adv.Goal("write_s", 12), checkpoint_summary(0.13, 0.12, 0.6)).confirmed
