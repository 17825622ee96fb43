from testbed.network.path_metrics import RttStats, binomial_ci


def test_binomial_ci_contains_truth():
    lo, hi = binomial_ci(20, 2000)
    assert lo < 0.01 < hi
    lo, hi = binomial_ci(0, 2000)
    assert lo == 0 and hi < 0.01


def test_rtt_stats():
    s = RttStats([1.0, 2.0, 3.0, 100.0])
    assert s.min_ms == 1 and s.median_ms == 2.5 and s.p99_ms == 100
