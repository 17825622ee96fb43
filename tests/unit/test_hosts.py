"""End hosts (docs/hosts.md), no kernel: the host knobs and profiles in the schema, their
validation (one line, exit 2), the model's host terms and limited_by, the emulator's
shares and rates (HostSpec.access). advise under host profiles: test_advise.py."""

import math
import subprocess
import sys

import pytest

from testbed import model, schema, topology
from testbed.cli import main
from testbed.errors import SpecError
from testbed.experiment.plan import plan as plan_mod
from testbed.model.host import CONNECTION, NIC, SERVER, HostShare, binding, host_terms
from testbed.network import fq
from testbed.spec import HostSpec

PAYLOAD = model.payload_share(1500)
MB = 1e6


# ------------------------------------------------------------------ knobs and profiles

def test_every_host_knob_has_a_unit_in_its_name_and_a_source():
    for name in schema.HOST_KNOBS:
        d = schema.row(name)
        assert d.source, name
        assert (d.unit == "Mbit/s") == name.endswith("_mbit"), name
    assert schema.row("host").default == schema.DEFAULT_HOST in schema.HOST_PROFILES


def test_presets_are_valid_and_ideal_limits_nothing():
    for p in schema.HOST_PROFILES.values():
        for k, v in p.values.items():
            assert schema.row(k).check(v) == v, (p.name, k)
        HostSpec.from_profile(p.name)
    ideal = HostSpec.from_profile("ideal")
    assert all(math.isinf(v) for k, v in vars(ideal).items() if k.endswith("_mbit"))
    assert HostSpec.from_profile(schema.DEFAULT_HOST) == HostSpec()
    with pytest.raises(SpecError, match="known presets"):
        HostSpec.from_profile("nope")


def test_a_limit_takes_a_rate_text_or_none():
    row = schema.row("conn_read_mbit")
    assert row.parse("none", text=True) == math.inf and row.parse("12.5gbit") == 12_500
    for bad in ("fast", 0, -1, 2e6, True, math.nan, "None"):
        with pytest.raises(ValueError, match="none"):
            row.parse(bad)


def test_knobs_prints_the_host_knobs_with_their_sources(capsys):
    assert main(["knobs"]) == 0
    text = capsys.readouterr().out.replace("\n", " ")
    for name in schema.HOST_KNOBS:
        assert name in text
    assert "Azure NetApp" in text and "VAST" in text and "A900" in text
    assert all(name in text for name in schema.HOST_PROFILES)


# ------------------------------------------------------------------------- validation

FILE = """
[fixed]
host = "{host}"
[hosts.mine]
{table}
"""


def _run_check(tmp_path, host="mine", table="conn_read_mbit = 800", *args):
    f = tmp_path / "h.toml"
    f.write_text(FILE.format(host=host, table=table))
    return subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(f), "--check",
                           "--out", str(tmp_path / "out"), *args], capture_output=True,
                          text=True, timeout=120)


def test_a_host_profile_of_the_file_is_taken(tmp_path):
    f = tmp_path / "h.toml"
    f.write_text(FILE.format(host="mine", table="conn_read_mbit = \"800mbit\"\nhost_gpus = 2"))
    p = plan_mod.load(f).points[0]
    assert p.host.conn_read_mbit == 800 and p.host.gpus == 2
    assert p.host.nic_read_mbit == schema.default("host_nic_read_mbit")
    q = plan_mod.load(f, {"host": "ideal", "server_total_mbit": "none"}).points[0]
    assert math.isinf(q.host.conn_read_mbit) and math.isinf(q.host.server_total_mbit)
    r = plan_mod.load(f, {"conn_read_mbit": "40"}).points[0]  # [fixed] over the profile
    assert r.host.conn_read_mbit == 40 and r.host.gpus == 2


@pytest.mark.parametrize("host,table,needle", [
    ("mine", "conn_read_mbit = \"fast\"", "conn_read_mbit"),
    ("mine", "conn_read_mbit = 0", "out of range"),
    ("mine", "nconnect = 4", "not a host knob"),
    ("mine", "host_gpus = 0", "host_gpus"),
    ("idael", "host_gpus = 1", "did you mean 'ideal'"),
    ("ideal", "host_gpus = 1\n[hosts.ideal]\nhost_gpus = 2", "preset"),
])
def test_bad_host_input_is_one_line_and_creates_nothing(tmp_path, host, table, needle):
    proc = _run_check(tmp_path, host, table)
    assert proc.returncode == 2, proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------ model

def test_the_connection_term_is_per_connection_times_nconnect_shared_on_a_host():
    spec = HostSpec(conn_read_mbit=8000)
    one = host_terms(spec, HostShare(connections=1, payload=PAYLOAD))
    assert one[CONNECTION] == pytest.approx(1000 * MB)
    four = host_terms(spec, HostShare(connections=4, on_host=8, payload=PAYLOAD))
    assert four[CONNECTION] == pytest.approx(500 * MB)  # 4 connections, 8 GPUs
    assert host_terms(spec, HostShare(write=True))[CONNECTION] == pytest.approx(
        13_800 / 8 * MB)
    assert host_terms(spec, HostShare(transport="rdma"))[CONNECTION] == pytest.approx(
        50_000 / 8 * MB)


def test_the_nic_term_is_the_hosts_line_rate_shared_as_payload():
    t = host_terms(HostSpec(nic_read_mbit=400_000, nic_write_mbit=80_000),
                   HostShare(on_host=8, payload=PAYLOAD))
    assert t[NIC] == pytest.approx(400_000 / 8 / 8 * PAYLOAD * MB)
    w = host_terms(HostSpec(nic_write_mbit=80_000), HostShare(write=True, on_host=8,
                                                                payload=PAYLOAD))
    assert w[NIC] == pytest.approx(80_000 / 8 / 8 * PAYLOAD * MB)


def test_the_server_binds_per_connection_or_in_all():
    t = host_terms(HostSpec(server_conn_mbit=800), HostShare(connections=2))
    assert math.isinf(t[CONNECTION]) and t[SERVER] == pytest.approx(200 * MB)
    t = host_terms(HostSpec(server_total_mbit=1600), HostShare(on_server=4))
    assert t[SERVER] == pytest.approx(50 * MB) and binding(t) == (SERVER, t[SERVER])
    ideal = host_terms(HostSpec.from_profile("ideal"), HostShare())
    assert all(math.isinf(v) for v in ideal.values())
    assert binding({}) == (CONNECTION, math.inf)


def test_limited_by_names_the_host_term_and_latency_at_the_hosts_rate_is_theirs():
    def bounds(latency, host):
        return model.Bounds(1e12, 1e10, 1e10, math.inf, latency, host_terms=host)
    assert bounds(1e10, {CONNECTION: 1e9, NIC: 2e9}).limited_by == CONNECTION
    assert bounds(1e10, {NIC: 1e9}).limited_by == NIC
    assert bounds(0.97e9, {SERVER: 1e9}).limited_by == SERVER  # the sim at the hosts' rate
    assert bounds(0.5e9, {SERVER: 1e9}).limited_by == "latency"
    b = bounds(1e10, {CONNECTION: 1e9})
    assert b.values["host"] == b.host == b.predicted == 1e9


def test_the_readers_replies_cross_the_hosts_rate():
    r = model.Reading(4, 4 << 20, 1 << 20, 1 << 20, 16 << 20)
    free = model.predict(model.Path(0.0006, 1.25e9), r, math.inf)
    capped = model.predict(model.Path(0.0006, 1.25e9, host={CONNECTION: 100 * MB}), r,
                           math.inf)
    assert capped.limited_by == CONNECTION and capped.predicted == 100 * MB
    assert capped.latency < free.latency and capped.latency >= 100 * MB


def test_the_write_path_takes_the_host_terms():
    path = model.WritePath(0.001, 1e9, host={CONNECTION: 10 * MB})
    b = model.write_bound(path, [64 << 20])
    assert b.limited_by == CONNECTION and b.terms[CONNECTION] == pytest.approx(6.7, rel=0.01)
    with pytest.raises(SpecError, match="host term"):
        model.WritePath(0.001, 1e9, host={"host": 1.0})
    with pytest.raises(SpecError, match="host \\(nic\\)"):
        model.WritePath(0.001, 1e9, host={NIC: 0.0})


# ---------------------------------------------------------------- emulator's shares

def test_access_shares_the_nic_and_the_server_and_divides_by_k():
    spec = HostSpec(nic_read_mbit=800, conn_read_mbit=80, server_total_mbit=900,
                    conn_write_mbit=4000, time_scale=10)
    a = spec.access("tcp", on_host=4, on_server=3, payload=PAYLOAD, line_mbit=1000,
                    buffer_bytes=16 << 20, mtu=1500)
    assert a.read_rate_mbit == pytest.approx(200 / 10)  # NIC 800 / 4 < server 300 / 0.96
    assert a.read_flow_mbit == pytest.approx(80 / 4 / PAYLOAD / 10)
    assert a.write_rate_mbit == pytest.approx(300 / PAYLOAD / 10)  # the server, writing
    assert math.isinf(a.write_flow_mbit)  # 4 Gbit/s a connection cannot bind at 1
    b = HostSpec(server_total_mbit=math.inf).access("tcp", 1, 1, PAYLOAD, 1000, 1, 1500)
    assert b.unlimited  # 400 Gbit/s of NIC, 12.5 a connection: nothing binds at 1
    assert a.flow_limit_pkts * 1448 >= 16 << 20 and not a.unlimited
    assert HostSpec.from_profile("ideal").access("tcp", 1, 1, PAYLOAD, 1000, 1, 1500).unlimited


def test_hosts_group_a_sites_workers_and_each_has_an_access_link():
    topo = topology.build("two-sites", {"workers": 3})
    assert topology.host_sizes(topo, 2) == {"a1": 2, "a2": 2, "a3": 1, "b1": 2, "b2": 2,
                                            "b3": 1}
    assert topology.host_sizes(topology.build("apn", {"workers": 10}), 8)["w10"] == 2
    assert topology.access_link(topo, "a1") == ("a1-eth0", "s1", "s1-eth2")
    with pytest.raises(SpecError, match="no access link"):
        topology.access_link(topology.build("apn", {"workers": 1}), "srv")


def test_fq_options_are_encoded_as_the_kernel_takes_them():
    opts = fq.get_parameters({"maxrate": 1250, "flow_limit": 200, "limit": 3400,
                              "orphan_mask": 1023, "other": 1})
    assert opts == {"attrs": [["TCA_FQ_PLIMIT", 3400], ["TCA_FQ_FLOW_PLIMIT", 200],
                              ["TCA_FQ_FLOW_MAX_RATE", 1250], ["TCA_FQ_ORPHAN_MASK", 1023]]}
