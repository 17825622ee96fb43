import math

from testbed.network import offload, tc
from testbed.spec import FibreSpec


def test_frames_only_for_lossy_or_jittery_fibres():
    assert not offload.wants_frames([])
    assert not offload.wants_frames([FibreSpec(distance_km=3000), FibreSpec()])
    assert offload.wants_frames([FibreSpec(), FibreSpec(loss_pct=0.01)])
    assert offload.wants_frames([FibreSpec(distance_km=100, jitter_ms=0.1)])
    assert offload.wants_frames([FibreSpec(loss_reverse_pct=0.1)])


def test_offloads_readback_says_frames():
    assert offload.Offloads(gso_max_segs=1, tso_max_segs=65535, gro=False).frames
    assert not offload.Offloads(gso_max_segs=65535, tso_max_segs=65535, gro=False).frames


def test_frames_per_packet():
    rb = tc.Readback(delay_ms=1, jitter_ms=0, loss_pct=0, rate_mbit=1000, limit_pkts=1000,
                     netem_drops=0, netem_backlog_pkts=0, htb_drops=0, sent_pkts=4400,
                     sent_skbs=100)
    assert rb.frames_per_packet == 44
    assert math.isnan(tc.Readback(1, 0, 0, 1000, 1000, 0, 0, 0, 0).frames_per_packet)
