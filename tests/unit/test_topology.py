"""Topologies are inert descriptions: building one needs no root and runs nothing."""

import pytest

from testbed import topology
from testbed.errors import SpecError


def test_registry_has_the_shipped_topologies():
    assert {"apn", "local", "metro", "two-sites"} <= set(topology.load_topologies())


def test_apn_shape():
    topo = topology.build("apn", {"workers": "4", "distance_km": "3000", "rate": "10gbit"})
    assert topology.storage_hosts(topo) == ["srv"]
    assert topology.worker_hosts(topo) == ["w1", "w2", "w3", "w4"]
    fibres = [l for l in topology.describe(topo)["links"] if l["kind"] == "fibre"]
    assert len(fibres) == 1
    assert fibres[0]["a"] == "srv" and fibres[0]["rate_mbit"] == 10_000
    assert fibres[0]["rtt_ms"] == pytest.approx(29.4, abs=0.01)
    assert len(topology.path_fibre(topo, "w3")) == 1


def test_local_has_no_fibre():
    desc = topology.describe(topology.build("local", {"workers": 2}))
    assert all(l["kind"] == "lan" for l in desc["links"])


def test_metro_is_60_km():
    desc = topology.describe(topology.build("metro"))
    (fibre,) = [l for l in desc["links"] if l["kind"] == "fibre"]
    assert fibre["distance_km"] == 60 and fibre["rtt_ms"] == pytest.approx(0.588, abs=0.001)


def test_two_sites_paths():
    topo = topology.build("two-sites", {"distance_a_km": 60, "distance_b_km": 3000})
    assert topology.path_fibre(topo, "a1")[0].distance_km == 60
    assert topology.path_fibre(topo, "b1")[0].distance_km == 3000


def test_addresses_unique():
    topo = topology.build("apn", {"workers": 32})
    ips = [h["ip"] for h in topology.describe(topo)["hosts"]]
    assert len(set(ips)) == 33


@pytest.mark.parametrize("name,params,match", [
    ("nope", {}, "unknown topology 'nope'"),
    ("apn", {"wrokers": 2}, "unknown parameter 'wrokers'"),
    ("apn", {"workers": "two"}, "workers"),
    ("apn", {"distance_km": -5}, "distance_km"),
    ("apn", {"loss_pct": 120}, "loss_pct"),
    ("apn", {"rate": "0gbit"}, "rate"),
    ("apn", {"workers": 0}, "workers"),
])
def test_bad_topology_input(name, params, match):
    with pytest.raises(SpecError, match=match):
        topology.build(name, params)


def test_parse_params():
    assert topology.parse_params(["a=1", "b = x"]) == {"a": "1", "b": "x"}
    with pytest.raises(SpecError, match="KEY=VALUE"):
        topology.parse_params(["oops"])


def test_duplicate_and_long_names():
    topo = topology.SiteTopo()
    topo.storage("srv")
    with pytest.raises(SpecError, match="duplicate node 'srv'"):
        topo.worker("srv")
    with pytest.raises(SpecError, match="15-character"):
        topo.worker("workerabcdefgh")
