"""The fibre model: delay from distance, BDP, netem limit, validation."""

import math

import pytest

from testbed.errors import SpecError
from testbed.spec import FibreSpec, check_name, format_rate, parse_rate


def test_delay_from_distance_is_4_9_us_per_km():
    f = FibreSpec(distance_km=3000)
    assert f.us_per_km == pytest.approx(4.9, abs=0.001)
    assert f.one_way_delay_ms == pytest.approx(14.7, abs=0.01)
    assert f.rtt_ms == pytest.approx(29.4, abs=0.02)
    assert FibreSpec(distance_km=60).rtt_ms == pytest.approx(0.588, abs=0.001)


def test_group_index_and_extra_delay_override():
    f = FibreSpec(distance_km=1000, group_index=1.5, extra_delay_ms=0.25)
    assert f.one_way_delay_ms == pytest.approx(1000 * 1.5 / 299792.458 * 1000 + 0.25)


def test_bdp_and_limit():
    f = FibreSpec(distance_km=3000, rate_mbit=1000)
    assert f.bdp_bytes() == pytest.approx(1e9 / 8 * 0.0294, rel=1e-3)  # ~3.7 MB
    assert f.limit_pkts() == math.ceil((1.5 * f.bdp_bytes() + 16 * f.tcp_buffer_bytes()) / 1500)
    assert f.limit_pkts() >= 1.5 * f.bdp_bytes() / 1500
    full = FibreSpec(distance_km=3000, rate_mbit=100_000)
    assert full.bdp_bytes() == pytest.approx(367e6, rel=0.01)
    assert FibreSpec(distance_km=0, rate_mbit=100).limit_pkts() >= 1000  # never below default


def test_jitter_enters_the_bdp():
    a = FibreSpec(distance_km=1000, jitter_ms=0)
    b = FibreSpec(distance_km=1000, jitter_ms=1)
    assert b.bdp_bytes() > a.bdp_bytes()


def test_asymmetry():
    f = FibreSpec(distance_km=10, rate_mbit=1000, rate_reverse_mbit=100, loss_reverse_pct=0.5)
    fwd, rev = f.direction(True), f.direction(False)
    assert (fwd.rate_mbit, fwd.loss_pct) == (1000, 0)
    assert (rev.rate_mbit, rev.loss_pct) == (100, 0.5)
    assert fwd.delay_ms == rev.delay_ms


def test_tcp_buffers_cover_twice_the_bdp():
    f = FibreSpec(distance_km=3000, rate_mbit=10_000)
    assert f.tcp_buffer_bytes() >= 2 * f.bdp_bytes()
    assert FibreSpec().tcp_buffer_bytes() == 6 * 1024 * 1024


@pytest.mark.parametrize("text,mbit", [("10gbit", 10_000), ("200mbit", 200), ("1.5gbit", 1500),
                                       ("1500kbit", 1.5), (100, 100), ("100", 100)])
def test_parse_rate(text, mbit):
    assert parse_rate(text) == pytest.approx(mbit)


@pytest.mark.parametrize("bad", ["0mbit", "fast", "-1gbit", "10MBps", 0, -5, True])
def test_parse_rate_rejects(bad):
    with pytest.raises(SpecError, match="rate"):
        parse_rate(bad)


def test_format_rate_round_trips():
    for mbit in (100_000, 200, 1.5, 2500):
        assert parse_rate(format_rate(mbit)) == pytest.approx(mbit)


@pytest.mark.parametrize("kwargs,field", [
    ({"distance_km": -1}, "distance_km"),
    ({"loss_pct": 101}, "loss_pct"),
    ({"loss_pct": -0.1}, "loss_pct"),
    ({"rate_mbit": 0}, "rate"),
    ({"rate_mbit": 200_000}, "rate_mbit"),
    ({"jitter_ms": -1}, "jitter_ms"),
    ({"mtu": 100}, "mtu"),
    ({"mtu": 1500.5}, "mtu"),
    ({"distance_km": "far"}, "distance_km"),
    ({"distance_km": 10, "jitter_ms": 5}, "jitter_ms"),
])
def test_invalid_fields_name_the_field(kwargs, field):
    with pytest.raises(SpecError, match=field):
        FibreSpec(**kwargs)


def test_from_dict_rejects_unknown_names():
    with pytest.raises(SpecError, match="unknown fibre field 'distanse_km'"):
        FibreSpec.from_dict({"distanse_km": 10})
    assert FibreSpec.from_dict({"rate": "10gbit", "distance_km": 5}).rate_mbit == 10_000


def test_replace_validates():
    f = FibreSpec(distance_km=100)
    assert f.replace(distance_km=0).one_way_delay_ms == 0
    with pytest.raises(SpecError, match="loss_pct"):
        f.replace(loss_pct=200)


def test_spec_is_frozen():
    with pytest.raises(AttributeError):
        FibreSpec().distance_km = 3  # type: ignore[misc]


@pytest.mark.parametrize("name", ["srv", "w1", "gpu12345"])
def test_names_ok(name):
    assert check_name(name) == name


@pytest.mark.parametrize("name", ["Srv", "1w", "w-1", "", "averyverylongname"])
def test_names_rejected(name):
    with pytest.raises(SpecError):
        check_name(name)


def test_mount_options_fsc_and_v3():
    from testbed.spec import MountSpec
    assert "fsc=tb1-w1" in MountSpec(fsc=True).options(fsc_tag="tb1-w1").split(",")
    assert "fsc" not in MountSpec().options(fsc_tag="x")
    v3 = MountSpec(vers="3").options().split(",")
    assert "nolock" in v3 and "mountproto=tcp" in v3
    with pytest.raises(SpecError, match="fsc: must be true or false"):
        MountSpec(fsc="yes")


def test_mount_transport_rdma_sets_proto_and_port():
    from testbed.spec import NFS_RDMA_PORT, MountSpec
    opts = MountSpec(transport="rdma").options().split(",")
    assert "proto=rdma" in opts and f"port={NFS_RDMA_PORT}" in opts and "proto=tcp" not in opts
    assert NFS_RDMA_PORT == 20049
    tcp = MountSpec().options().split(",")
    assert "proto=tcp" in tcp and not any(o.startswith("port=") for o in tcp)
    assert MountSpec.from_dict({"transport": "rdma"}).transport == "rdma"


def test_mount_transport_is_validated():
    from testbed.spec import MountSpec
    with pytest.raises(SpecError, match="transport"):
        MountSpec(transport="udp")


def test_loss_seed_gives_each_direction_its_own_stream():
    spec = FibreSpec(distance_km=1000, loss_pct=0.1, loss_seed=7)
    fwd, rev = spec.direction(True), spec.direction(False)
    assert fwd.seed == 7 and rev.seed not in (None, 7) and 0 <= rev.seed < 2**64
    assert FibreSpec(loss_pct=0.1).direction(True).seed is None  # netem draws afresh
    assert spec.replace(time_scale=10).direction(True).seed == 7  # k does not reseed


@pytest.mark.parametrize("bad", [-1, 2**64, 1.5, True, "7"])
def test_loss_seed_must_be_a_u64(bad):
    with pytest.raises(SpecError, match="loss_seed"):
        FibreSpec(loss_seed=bad)


def test_netem_plugin_encodes_and_decodes_the_seed():
    """The seed travels as TCA_NETEM_PRNG_SEED (u64) beside pyroute2's own attributes."""
    from pyroute2.netlink.rtnl.tcmsg import plugins, tcmsg

    from testbed.network import netem, tc

    assert plugins["netem"] is netem  # installed by importing tc
    args = tc._netem_args(FibreSpec(distance_km=100, loss_pct=1.0,
                                    loss_seed=2**63 + 5).direction(True))
    msg = tcmsg()
    msg["attrs"] = [["TCA_KIND", "netem"],
                    ["TCA_OPTIONS", netem.get_parameters(dict(args))]]
    msg.encode()
    back = tcmsg(msg.data)
    back.decode()
    opts = back.get_attr("TCA_OPTIONS")
    assert netem.seed_of(opts) == 2**63 + 5
    assert opts["loss"] > 0 and opts["delay"] > 0
