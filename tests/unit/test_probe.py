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


def _echo_frame(ident, seq, payload=56, ethernet=True):
    """An echo request as the kernel loops it back with a TX stamp (Ethernet first)."""
    import struct
    icmp = struct.pack("!BBHHH", 8, 0, 0, ident, seq & 0xFFFF) + probe.PAYLOAD.pack(seq, 0) \
        + b"\0" * (payload - probe.PAYLOAD.size)
    ip = bytes([0x45, 0]) + struct.pack("!H", 20 + len(icmp)) + b"\0" * 16
    eth = b"\xaa" * 12 + struct.pack("!H", 0x0800) if ethernet else b""
    return eth + ip + icmp


def test_kernel_send_times_take_the_first_stamp_of_our_probes():
    stamps = [(_echo_frame(7, 0), 1_000), (_echo_frame(7, 0), 5_000),  # stamped again later
              (_echo_frame(7, 1, ethernet=False), 2_000),
              (_echo_frame(8, 2), 3_000),  # someone else's probe
              (b"\x00" * 10, 4_000)]  # garbage
    assert probe._tx_times(stamps, 7) == {0: 1_000, 1: 2_000}


def test_kernel_send_times_replace_carried_ones_and_stalls_are_set_apart():
    ms = 1_000_000
    arrivals = [(s, s * ms, s * ms + 5 * ms) for s in range(4)]
    # replies: RTT 10 ms by the carried send time, the kernel sent each 0.1 ms later
    replies = [(s, s * ms, s * ms + 10 * ms) for s in range(4)]
    kernel = {s: s * ms + ms // 10 for s in range(4)}
    rep = probe._report("a", "b", 4, 0.001, replies, arrivals, kernel_sent_ns=kernel,
                        stalls=[(12 * ms, 12 * ms + 3 * ms)])  # only probe 3 was in flight
    assert rep.kernel_sent == 4
    assert rep.rtt_ms == pytest.approx([9.9] * 4)
    assert rep.one_way_ms == pytest.approx([4.9] * 4)
    assert rep.stalled == 1 and rep.rtt_clear_ms == pytest.approx([9.9] * 3)
    assert "send times    the kernel's" in rep.render()


def test_reordering_during_a_stall_is_set_apart():
    """A lab kernel that stops running holds some packets while others go on; the arrivals
    it reorders in flight during a stall are counted apart from the fibre's own."""
    ms = 1_000_000
    order = (0, 2, 1, 3, 5, 4)  # 1 overtaken before the stall, 4 while it lasted
    arrivals = [(s, s * ms, s * ms + 5 * ms) for s in order]
    rep = probe._report("a", "b", 6, 0.001, [], arrivals, stalls=[(8 * ms, 9 * ms)])
    assert rep.reordered == 2 and rep.reordered_in_stall == 1
    assert "1 of the 2 were in flight during a stall" in rep.render()
    assert rep.as_dict()["reordered_in_stall"] == 1


def test_stalls_from_send_gaps():
    ms = 1_000_000
    sent = [0, 1 * ms, 2 * ms, 5 * ms, 6 * ms]  # nothing ran between 2 and 5 ms
    late, windows = probe._stalls(ms, sent, ms)
    assert late == pytest.approx([0, 0, 2.0, 0])
    assert windows == [(3 * ms, 5 * ms)]
    rep = probe.ProbeReport("a", "b", 5, 0.001, pacing_late_ms=late)
    assert rep.stalls == 1 and "1 stalls > 1 ms" in rep.render()


def test_a_stall_moves_the_schedule_on_instead_of_bursting():
    ms = 0.001
    assert probe._resume_after_stall(0.0, 10, ms, 10.5 * ms) == 0.0  # on time
    assert probe._resume_after_stall(0.0, 10, ms, 10 * ms + 1.5 * ms) \
        == pytest.approx(1.5 * ms)  # 1.5 intervals late: probe 10 leaves now, 11 a ms on
    assert probe._resume_after_stall(0.0, 10, ms, 600 * ms) == pytest.approx(590 * ms)
