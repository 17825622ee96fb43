"""The model of what limits a point: Linux's read-ahead state machine, the readers'
simulation against kernel-measured schedules, the bounds and limited_by (no kernel)."""

import math

import pytest

from testbed import model
from testbed.model.readahead import ReadAhead, init_size, next_size
from testbed.model.sim import Reading, Setting, Simulation, read_rate_Bps

RTT = 0.0294
LINK = 125e6 * 1448 / 1514


def test_window_sizes_follow_the_kernel():
    assert init_size(32, 32) == 32          # 128 KiB read, 128 KiB read-ahead: all of it
    assert init_size(256, 4096) == 512      # 1 MiB read, 16 MiB read-ahead: x2
    assert init_size(1, 4096) == 4          # a page: x4
    assert next_size(512, 4096) == 1024 and next_size(64, 4096) == 256
    assert next_size(4096, 4096) == 4096


def test_large_reads_may_exceed_read_ahead_up_to_io_pages():
    ra = ReadAhead(ra_pages=32, io_pages=256)  # default mount: 128 KiB, rsize 1 MiB
    start, size, mark = ra.ondemand(0, 256, hit_marker=False)
    assert (start, size) == (0, 256) and 0 <= mark < 256


# File time in round trips for one reader of 8 MiB files at 3,000 km, measured on the lab
# kernel (UML 7.2) from captures, READ by READ, 2026-12-03: (read-ahead KiB, read KiB).
KERNEL_RTTS = {(128, 128): 36.0, (128, 1024): 7.8, (1024, 1024): 7.6, (1024, 128): 8.6,
               (4096, 1024): 5.3, (4096, 128): 5.85, (16384, 1024): 5.05, (16384, 128): 6.0}


@pytest.mark.parametrize("ra_kib,read_kib", list(KERNEL_RTTS))
def test_simulation_matches_the_kernels_schedule(ra_kib, read_kib):
    s = Simulation(Setting(RTT, LINK, Reading(1, 8 << 20, read_kib << 10, 1 << 20, ra_kib << 10)))
    rtts = (8 << 20) / s.run(files=6, warm=2) / RTT
    assert rtts == pytest.approx(KERNEL_RTTS[(ra_kib, read_kib)], rel=0.11)


def test_more_readers_and_more_read_ahead_read_faster():
    one = read_rate_Bps(Setting(RTT, LINK, Reading(1, 4 << 20, 1 << 20, 1 << 20, 128 << 10)))
    two = read_rate_Bps(Setting(RTT, LINK, Reading(2, 4 << 20, 1 << 20, 1 << 20, 128 << 10)))
    tuned = read_rate_Bps(Setting(RTT, LINK, Reading(2, 4 << 20, 1 << 20, 1 << 20, 16 << 20)))
    assert one < two < tuned < LINK


def test_a_short_path_is_the_fibres():
    rate = read_rate_Bps(Setting(0.0006, LINK, Reading(8, 4 << 20, 1 << 20, 1 << 20, 16 << 20)))
    assert rate == pytest.approx(LINK, rel=0.1)


def test_a_small_file_costs_nfsv3_one_round_trip_more_than_nfsv4():
    """16 KiB files read whole: OPEN + READ over NFSv4, LOOKUP + ACCESS + READ over v3."""
    from testbed.model.sim import OPEN_RTTS, open_rtts
    from testbed.schema import NFS_VERSIONS
    assert set(OPEN_RTTS) == set(NFS_VERSIONS)
    rates = {v: read_rate_Bps(Setting(RTT, LINK, Reading(1, 16 << 10, 16 << 10, 1 << 20,
                                                         128 << 10, open_rtts(v))))
             for v in ("3", "4.2")}
    assert rates["4.2"] == pytest.approx((16 << 10) / (2 * RTT), rel=0.02)
    assert rates["3"] == pytest.approx((16 << 10) / (3 * RTT), rel=0.02)


def path(**kw):
    return model.Path(**{"rtt_s": RTT, "share_Bps": 125e6, **kw})


def reading(**kw):
    return model.Reading(**{"readers": 2, "sample_bytes": 4 << 20, "read_bytes": 1 << 20,
                            "rsize": 1 << 20, "ra_bytes": 128 << 10, **kw})


def test_limited_by_names_the_binding_bound():
    assert model.predict(path(), reading(), 10e6).limited_by == "compute"
    assert model.predict(path(), reading(), 84e6).limited_by == "latency"
    near = model.predict(path(rtt_s=0.0006), reading(readers=8, ra_bytes=16 << 20), 1e9)
    assert near.limited_by == "fibre"
    lossy = model.predict(path(loss=0.01), reading(), 84e6)
    assert lossy.limited_by == "loss"
    small = model.predict(path(rtt_s=0.0006, buffer_bytes=64 << 10), reading(), 1e9)
    assert small.limited_by == "window"


def test_bounds_in_their_units():
    b = model.predict(path(loss=0.001), reading(), 84e6)
    assert b.fibre == pytest.approx(125e6 * 1448 / 1514)
    assert b.window == pytest.approx((6 << 20) / 2 / RTT)
    assert b.loss == pytest.approx(1448 / RTT * math.sqrt(1.5 / 0.001), rel=1e-3)
    assert b.au_pct() == pytest.approx(100 * b.predicted / 84e6)
    assert math.isinf(model.predict(path(), reading(), 84e6, local=True).fibre)


def test_emulator_rules_mark_a_shortfall_on_software_emulation_only():
    """A point 15 % short of its bound with an idle-looking CPU is the machine's only on
    QEMU TCG (the `tcg` rule); on a direct kernel it stands as measured."""
    from testbed.experiment.resolve.explain import Evidence, emulator_reasons
    short = dict(cpu_busy_pct=53.0, overshoot_pct=0.5, drops=0, expected_drops=0.0,
                 measured_MB_s=41.4, model_MB_s=71.1)
    assert emulator_reasons(Evidence(**short)) == []
    assert emulator_reasons(Evidence(**short, emulated=True)) == ["tcg"]
    met = {**short, "measured_MB_s": 70.0}
    assert emulator_reasons(Evidence(**met, emulated=True)) == []


def test_dilated_lossy_cubic_is_marked_on_the_clock_rule():
    """CUBIC over a lossy path at k > 1 recovers on the undilated clock: its figure is the
    emulator's (`clock`); Reno, k = 1 or no loss are not marked."""
    from testbed.experiment.resolve.explain import Evidence, cubic_clock, emulator_reasons
    row = {"congestion": "cubic", "time_scale_k": 10.0, "path_loss_pct": 0.1}
    assert cubic_clock(row)
    for change in ({"congestion": "reno"}, {"time_scale_k": 1.0}, {"path_loss_pct": 0.0}):
        assert not cubic_clock({**row, **change}), change
    ok = dict(cpu_busy_pct=20.0, overshoot_pct=0.5, drops=0, expected_drops=0.0,
              measured_MB_s=10.0, model_MB_s=10.0)
    assert emulator_reasons(Evidence(**ok, cubic_clock=True)) == ["clock"]


def test_soft_roce_window_bounds_rdma_paths():
    """Over RDMA the window is soft-RoCE's: 128 packets of the RoCE MTU per RTT (4 KiB at
    MTU 9000, 1 KiB at 1500); TCP's loss model does not apply."""
    from testbed.model.bounds import Path, loss_Bps, roce_mtu, window_Bps
    assert roce_mtu(9000) == 4096 and roce_mtu(1500) == 1024
    rdma = Path(rtt_s=0.0294, share_Bps=125e6, mtu=9000, transport="rdma", loss=0.001)
    assert window_Bps(rdma) / 1e6 == pytest.approx(128 * 4096 / 0.0294 / 1e6)
    assert loss_Bps(rdma) == float("inf")


def test_window_share_follows_the_kernel_release():
    """Half of tcp_rmem before Linux 6.6 (tcp_adv_win_scale 1), since then the share one
    packet per skb gives (0.76: what NFS receivers advertised on the lab's paced lines)."""
    from testbed.model.bounds import Path, window_Bps, window_share
    assert window_share("6.1.0-57-amd64") == 0.5
    assert window_share("7.2.7") == 0.76 and window_share("6.6.0") == 0.76
    assert window_share("weird") == 0.5
    old = Path(rtt_s=0.0294, share_Bps=12.5e9, buffer_bytes=6 << 20)
    new = Path(rtt_s=0.0294, share_Bps=12.5e9, buffer_bytes=6 << 20, window_share=0.76)
    assert window_Bps(old) / 1e6 == pytest.approx(107.0, rel=0.01)
    assert window_Bps(new) / 1e6 == pytest.approx(162.6, rel=0.01)


@pytest.mark.parametrize("rtt_s, readers, sample, read, ra", [
    (0.0294, 4, 8 << 20, 1 << 20, 16 << 20), (0.0098, 2, 4 << 20, 128 << 10, 128 << 10),
    (0.0005, 8, 114_660, 4096, 1 << 20), (0.05, 1, 2_828_486, 1 << 20, 128 << 10)])
def test_simulation_jumps_give_the_page_by_page_result(rtt_s, readers, sample, read, ra):
    from testbed.model import sim
    s = sim.Setting(rtt_s=rtt_s, rate_Bps=125e6,
                    reading=sim.Reading(readers=readers, sample_bytes=sample,
                                        read_bytes=read, rsize=1 << 20, ra_bytes=ra))
    assert sim.read_rate_Bps(s) == sim.read_rate_Bps(s, fast=False)
