import pytest

from testbed.errors import KernelError
from testbed.network import iperf

REPORT = {
    "intervals": [
        {"sum": {"bits_per_second": 90e6, "omitted": True}},
        {"sum": {"bits_per_second": 40e6, "omitted": False}},
        {"sum": {"bits_per_second": 50e6, "omitted": False}},
    ],
    "end": {
        "streams": [{"sender": {"mean_rtt": 9950}}],
        "sum_sent": {"retransmits": 31, "seconds": 2.0},
        "sum_received": {"bits_per_second": 45e6, "seconds": 2.0},
        "sender_tcp_congestion": "cubic",
    },
}


def test_parse_client_report():
    flow = iperf.parse(REPORT, "srv", "w1")
    assert flow.mbit == 45 and flow.retransmits == 31 and flow.cc == "cubic"
    assert flow.mean_rtt_ms == pytest.approx(9.95)
    assert flow.interval_mbit == [40, 50]  # the omitted warm-up is left out
    lo, hi = flow.interval_ci95()
    assert lo < 45 < hi


def test_parse_error():
    with pytest.raises(KernelError, match="unable to connect"):
        iperf.parse({"error": "unable to connect to server"}, "srv", "w1")
