"""The probe's bookkeeping (no kernel): loss and its interval, reordering, duplicates."""

import pytest

from testbed.errors import SpecError
from testbed.packets import probe


def test_report_counts_loss_reordering_and_duplicates():
    ms = 1_000_000
    # probes 0..9 sent 1 ms apart; 3 lost on the way; 5 overtaken by 6; 7 arrives twice
    arrivals = [(s, s * ms, s * ms + 5 * ms) for s in (0, 1, 2, 4, 6, 5, 7, 7, 8, 9)]
    replies = [(s, t, t + 10 * ms) for s, t, _ in arrivals if s != 9]
    rep = probe._report("a", "b", 10, 0.001, replies, arrivals)
    assert rep.arrived == 9 and rep.loss == pytest.approx(0.1)
    assert rep.reordered == 1 and rep.duplicates == 1
    assert rep.returned == 8 and rep.round_trip_loss == pytest.approx(0.2)
    assert rep.rtt_min_ms == pytest.approx(10.0) and rep.one_way_median_ms == pytest.approx(5.0)
    lo, hi = rep.loss_ci()
    assert lo < 0.1 < hi
    text = rep.render()
    assert "one-way loss  10.000 %" in text and "1 arrived after a later probe" in text
    assert rep.as_dict()["reordered_pct"] == pytest.approx(100 / 9)


def test_p99_and_socket_drop_warning():
    rep = probe.ProbeReport("a", "b", 100, 0.001, rtt_ms=[float(i) for i in range(1, 101)])
    assert rep.rtt_p99_ms == 99.0 and rep.rtt_median_ms == 50.5
    rep.socket_drops = 3
    assert "WARNING" in rep.render()


@pytest.mark.parametrize("kwargs", [{"count": 0}, {"interval_s": -1}, {"payload_bytes": 4}])
def test_bad_arguments_are_one_line_errors(kwargs):
    with pytest.raises(SpecError):
        probe.probe("ns-a", "ns-b", "10.0.0.1", **kwargs)
