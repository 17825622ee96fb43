import math

import pytest

from testbed.model import tcp as tcp_model
from testbed.errors import SpecError


def test_mss_from_mtu():
    assert tcp_model.mss_bytes(1500) == 1448
    assert tcp_model.mss_bytes(9000) == 8948
    assert tcp_model.mss_bytes(1500, timestamps=False) == 1460
    with pytest.raises(SpecError):
        tcp_model.mss_bytes(40)


def test_mathis_at_1000_km():
    """Mathis: MSS/RTT x sqrt(3/(2p)); 1,000 km (9.8 ms), 0.1 %: 45.8 Mbit/s."""
    pred = tcp_model.predict("reno", 1500, 9.8, 0.1)
    want = 1448 * 8 / 0.0098 * math.sqrt(1.5 / 0.001) / 1e6
    assert pred.mbit == pytest.approx(want, rel=1e-9)
    assert pred.mbit == pytest.approx(45.78, abs=0.01)
    assert pred.MB_s == pytest.approx(pred.mbit / 8)
    assert pred.region == "reno" and pred.cc == "reno" and "Mathis" in pred.model


def test_mss_follows_mtu():
    small, jumbo = (tcp_model.predict("reno", mtu, 29.4, 0.01) for mtu in (1500, 9000))
    assert jumbo.mbit / small.mbit == pytest.approx(8948 / 1448)


@pytest.mark.parametrize("p, tcp, cubic_c04, cubic_c4", [
    # RFC 8312 section 5.1, table 1 (RTT 0.1 s): average windows in segments
    (1e-2, 12, 12, 12),
    (1e-4, 120, 187, 333),
    (1e-6, 1200, 5926, 10538),
])
def test_rfc8312_table(p, tcp, cubic_c04, cubic_c4):
    assert tcp_model.reno_window(p) == pytest.approx(tcp, rel=0.03)
    assert max(tcp_model.cubic_own_window(p, 0.1), tcp_model.aimd_window(p)) \
        == pytest.approx(cubic_c04, rel=0.03)
    assert max(tcp_model.cubic_own_window(p, 0.1, c=4.0), tcp_model.aimd_window(p)) \
        == pytest.approx(cubic_c4, rel=0.03)


def test_aimd_estimate_is_reno():
    for p in (1e-5, 1e-3, 0.05):
        assert tcp_model.aimd_window(p) == pytest.approx(tcp_model.reno_window(p))


def test_cubic_regions():
    # 3,000 km (29.4 ms) at 0.01 %: still TCP-friendly, so CUBIC predicts Mathis's rate
    pred = tcp_model.predict("cubic", 1500, 29.4, 0.01)
    assert pred.region == "tcp-friendly"
    assert pred.mbit == pytest.approx(tcp_model.predict("reno", 1500, 29.4, 0.01).mbit)
    # the boundary: RTT^3 = 1.82 p
    p = 1e-4
    edge = (1.8245 * p) ** (1 / 3)
    assert tcp_model.cubic_window(p, edge * 0.99)[1] == "tcp-friendly"
    assert tcp_model.cubic_window(p, edge * 1.01)[1] == "cubic"
    far = tcp_model.predict("cubic", 1500, 200.0, 0.01)
    assert far.region == "cubic"
    assert far.mbit > tcp_model.predict("reno", 1500, 200.0, 0.01).mbit


@pytest.mark.parametrize("args", [("bbr", 1500, 10, 0.1), ("cubic", 1500, 10, 0),
                                  ("cubic", 1500, 0, 0.1), ("reno", 1500, 10, 100)])
def test_rejects(args):
    with pytest.raises(SpecError):
        tcp_model.predict(*args)


def test_dilation_moves_cubic_not_reno():
    """Under time dilation by k CUBIC's curve runs on the real clock: its window is that
    of a k times longer round trip; Reno counts round trips and does not move."""
    reno1 = tcp_model.predict("reno", 1500, 29.4, 0.1)
    reno5 = tcp_model.predict("reno", 1500, 29.4, 0.1, clock_scale=5)
    assert reno5.MB_s == pytest.approx(reno1.MB_s)
    cubic1 = tcp_model.predict("cubic", 1500, 29.4, 0.1)
    cubic5 = tcp_model.predict("cubic", 1500, 29.4, 0.1, clock_scale=5)
    assert cubic1.region == "tcp-friendly" and cubic5.region == "cubic"
    assert cubic5.MB_s > 1.1 * cubic1.MB_s
    assert cubic5.rtt_ms == 29.4  # goodput over the emulated round trip
