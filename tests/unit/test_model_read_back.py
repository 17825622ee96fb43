"""The model of reading a checkpoint back cold (testbed/model/read_back.py), no kernel:
a connection's window grows while it carries replies and restarts after idling past its
RTO only with tcp_slow_start_after_idle, more connections idle longer and restart more,
the time grows with the round trip, zero distance is the line's rate alone, the terms add
up, and one-line errors for bad input."""

import math

import pytest

from testbed import model
from testbed.errors import SpecError
from testbed.model.read_back import READ_LABELS, Connections, read_back_bound
from testbed.model.tcp import mss_bytes
from testbed.model.write import INIT_CWND, WritePath

RTT = 0.0098  # 1,000 km
SHARE = 1.5e9  # a rank's eighth of 100 Gbit/s (payload), bytes/s
MIB = 1 << 20
FILES = [2 * MIB, 12 * MIB]  # a lab-sized llama3 8B rank: 14 READs of 1 MiB
BUFFER = 256 * MIB


def path(connections: int = 1, rtt: float = RTT, idle_restart: bool = True) -> WritePath:
    return WritePath(rtt, SHARE, connections=connections, buffer_bytes=BUFFER,
                     window_share=0.76, slow_start_after_idle=idle_restart)


def conns(p: WritePath, rto: float, restart: bool = True) -> Connections:
    return Connections(p, restart=restart, rto=rto, cap_bytes=BUFFER, rate_Bps=SHARE)


def test_a_reply_from_the_initial_window_takes_a_round_trip_per_doubling() -> None:
    """1 MiB from 10 segments: 10 + 20 + ... + 640 segments, 7 rounds; once the window
    has grown, the next 1 MiB crosses in one."""
    c = conns(path(), rto=1.0)
    assert c.cwnd == [INIT_CWND * mss_bytes(1500)]
    first = c.reply(0.0, MIB)
    assert 7 * RTT < first < 8 * RTT
    second = c.reply(first, MIB) - first
    assert second < 1.5 * RTT


def test_a_connection_idle_past_its_rto_restarts_only_with_the_sysctl() -> None:
    """tcp_cwnd_restart: idle longer than the RTO, the window is halved per RTO down to
    the initial one; with the sysctl off, or idle shorter than the RTO, it is kept."""
    for restart, idle, slow in ((True, 10.0, True), (True, 0.05, False),
                                (False, 10.0, False)):
        c = conns(path(), rto=0.2, restart=restart)
        t = c.reply(0.0, MIB)
        start = t + idle
        took = c.reply(start, MIB) - start
        assert (took > 5 * RTT) is slow, (restart, idle, took)
        assert c.restarts == int(slow)


def test_halving_per_rto_idle() -> None:
    """Idle for 2.5 RTOs: two halvings, not a return to the initial window."""
    c = conns(path(), rto=0.1)
    c.cwnd, c.last = [1000.0 * 1448], [0.0]
    c.next = 0
    assert c._restarted(0, 0.25) == pytest.approx(250.0 * 1448)


def test_replies_go_round_robin_over_the_connections() -> None:
    c = conns(path(connections=4), rto=1.0)
    for _ in range(6):
        c.reply(0.0, 1)
    assert c.next == 2


def test_more_connections_restart_more_where_the_rto_is_short() -> None:
    """Eight connections each idle through the others' READs: with an RTO shorter than
    that idle every READ restarts, one connection never idles that long."""
    one = read_back_bound(path(1), FILES, 0.005, checkpoints=3, rto=RTT)
    eight = read_back_bound(path(8), FILES, 0.005, checkpoints=3, rto=RTT)
    assert eight.restarts > one.restarts
    assert eight.seconds > 3 * one.seconds
    assert eight.limited_by == "slow start"
    assert one.limited_by == "round trips"


def test_without_idle_restart_connections_do_not_matter() -> None:
    """The sysctl off: the windows grown on the warm-up read are kept, and eight
    connections read back as fast as one."""
    one = read_back_bound(path(1, idle_restart=False), FILES, 0.005, rto=RTT)
    eight = read_back_bound(path(8, idle_restart=False), FILES, 0.005, rto=RTT)
    assert eight.restarts == 0
    assert eight.terms["slow start"] == pytest.approx(0, abs=1e-9)
    assert eight.seconds == pytest.approx(one.seconds, rel=0.05)


def test_a_cold_read_from_fresh_connections_pays_slow_start() -> None:
    """idle_s = inf (the first read after minutes of training): every read from fresh
    windows, so slow start is a term even for one connection."""
    cold = read_back_bound(path(1), FILES)
    warm = read_back_bound(path(1), FILES, 0.005)
    assert cold.terms["slow start"] > 0
    assert cold.seconds > warm.seconds


def test_time_scales_with_the_round_trip() -> None:
    """Round trips, not bandwidth: three times the RTT, about three times the time (the
    RTO scaled alike)."""
    near = read_back_bound(path(8, rtt=RTT), FILES, 0.005, rto=RTT)
    far = read_back_bound(path(8, rtt=3 * RTT), FILES, 0.005, rto=3 * RTT)
    assert far.seconds / near.seconds == pytest.approx(3.0, rel=0.1)


def test_terms_add_up_and_zero_distance_is_the_line() -> None:
    b = read_back_bound(path(8), FILES, 0.005, rto=RTT)
    assert set(b.terms) == set(READ_LABELS)
    rate_terms = [k for k in READ_LABELS if k not in ("slow start", "round trips")]
    slowest = max(b.terms[k] for k in rate_terms)
    assert b.seconds == pytest.approx(slowest + b.terms["slow start"]
                                      + b.terms["round trips"], rel=1e-9)
    local = read_back_bound(path(8, rtt=0.0), FILES)
    assert local.seconds == pytest.approx(sum(FILES) / SHARE, rel=0.01)
    assert local.limited_by == "fibre"
    assert b.Bps() == pytest.approx(sum(FILES) / b.seconds)


def test_exported_from_model() -> None:
    assert model.read_back_bound is read_back_bound
    assert math.isfinite(model.read_back_bound(path(), [MIB]).seconds)


@pytest.mark.parametrize("files,checkpoints", [([-1], 1), ([1.5], 1), ("abc", 1),
                                               ([MIB], 0), ([MIB], True)])
def test_bad_input_is_one_line(files: object, checkpoints: object) -> None:
    with pytest.raises(SpecError) as err:
        read_back_bound(path(), files, checkpoints=checkpoints)  # type: ignore[arg-type]
    assert "\n" not in str(err.value)
