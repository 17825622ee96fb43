"""benchmarks/soak.py's arithmetic without a kernel: leaks over a baseline (with the slab
cache's allowance), drift in %, first vs last means, and when the goal is met."""

import math

import pytest

from benchmarks import soak


def test_leaks_count_only_growth_beyond_the_allowance():
    base = {"netns": 0, "fds": 7, "kernel_netns": 3}
    end = {"netns": 2, "fds": 5, "kernel_netns": 10}
    assert soak.leaks(base, end) == {"netns": 2, "fds": 0, "kernel_netns": 7}
    assert soak.leaks(base, end, {"kernel_netns": 8}) == {"netns": 2, "fds": 0,
                                                          "kernel_netns": 0}
    assert soak.leaks(base, {**end, "kernel_netns": 12}, {"kernel_netns": 8})["kernel_netns"] == 1


def test_drift_is_growth_in_percent_of_before():
    assert soak.drift_pct(100.0, 110.0) == pytest.approx(10.0)
    assert soak.drift_pct(0.5, 0.45) == pytest.approx(-10.0)
    assert soak.drift_pct(0.0, 3.0) == 0.0


def test_first_last_means_take_a_window_or_half_of_a_short_run():
    values = [1.0] * 50 + [5.0] * 100 + [2.0] * 50
    assert soak.first_last(values) == (1.0, 2.0)
    assert soak.first_last([1.0, 2.0, 3.0, 4.0, 9.0]) == (1.5, 6.5)  # 2 each of 5
    assert soak.first_last([3.0]) == (3.0, 3.0)
    assert all(math.isnan(x) for x in soak.first_last([]))


def test_memory_drift_is_the_largest_growth_of_used_slab_and_rss():
    base = {"used": 100.0, "avail": 1000.0, "slab": 10.0, "rss": 50.0}
    end = {"used": 104.0, "avail": 996.0, "slab": 11.5, "rss": 49.0}
    assert soak.mem_drift_pct(base, end) == pytest.approx(15.0)  # slab; avail is not one


def test_goal_needs_no_leak_no_failure_and_drifts_within_the_bar():
    assert soak.goal_failures(0, 0, 9.9, -3.0) == []
    assert soak.goal_failures(0, 0, -40.0, 10.0) == []  # faster is not a failure
    misses = soak.goal_failures(2, 1, 12.0, 11.0)
    assert misses == ["2 leaked object(s)", "1 failed point(s)", "set-up time drifted +12.0 %",
                      "memory drifted +11.0 %"]
    assert soak.goal_failures(0, 0, float("nan"), 0.0) == ["set-up time drifted +nan %"]
