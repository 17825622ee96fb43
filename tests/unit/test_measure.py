from testbed.network.path_metrics import RttStats, binomial_ci


def test_binomial_ci_contains_truth():
    lo, hi = binomial_ci(20, 2000)
    assert lo < 0.01 < hi
    lo, hi = binomial_ci(0, 2000)
    assert lo == 0 and hi < 0.01


def test_rtt_stats():
    s = RttStats([1.0, 2.0, 3.0, 100.0])
    assert s.min_ms == 1 and s.median_ms == 2.5 and s.p99_ms == 100


def test_repetitions_read_in_their_own_order_paired_with_their_baseline(tmp_path):
    from testbed.experiment.advise import advise as adv
    from testbed.experiment.plan import plan as plan_mod
    from testbed.experiment.measure.measure import shuffle_seed
    s = adv.Scenario("unet3d-h100", 3000)
    f = tmp_path / "a.toml"
    f.write_text(adv.experiment_text(s))
    plan = plan_mod.load(f)
    far, base = adv.far_point(plan), plan.points[0]
    assert base.is_baseline
    seeds = {shuffle_seed(far, rep, w) for rep in range(3) for w in range(8)}
    assert len(seeds) == 24 and all(0 <= s < 2**31 for s in seeds)
    assert shuffle_seed(far, 2, 1) == shuffle_seed(base, 2, 1)
