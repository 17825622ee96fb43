"""End hosts' limits (a host profile, docs/hosts.md) in the lab kernel: each worker's
access link carries them as htb + fq (testbed/network/access.py), read back from the
kernel; and at a point built so that one host term is the smallest bound by a wide
margin, the worker reads (or a rank writes) within 15 % of the model, which names that
term. nconnect lifts the per-connection limit: four connections read ~4 x one.

Rates are lab-sized (tens of Mbit/s against a 1 Gbit/s line) so one lab CPU carries
them; one case is dilated (k = 5) to show the limits scale with every other rate. The
loader asks for 105 MB/s (4 MiB files, 40 ms of compute each: steps long enough that the
lab's timer jitter stays below the `timers` mark's 5 %)."""

import math

import pandas as pd
import pytest

from testbed import model
from testbed.experiment import run_file
from testbed.network import access
from testbed.spec import HostSpec
from testbed.workload import presets

pytestmark = pytest.mark.system

TOLERANCE = 0.15
PAYLOAD = model.payload_share(1500)

BASE = """
name = "hosts"
topology = "apn"
repetitions = 1
[fixed]
workers = {workers}
rate = "{rate}"
distance_km = {km}
time_scale = {k}
host = "h"
mount = "m"
[mounts.m]
tcp_buffer_mib = 16
read_ahead_kb = 4096
nconnect = {nconnect}
[hosts.h]
{host}
[dataset]
files = 16
file_kib = 4096
[workload]
batch = 1
compute_ms = 40
readers = 4
prefetch = 4
measure_s = 3
measure_max_s = 8
warmup_max_s = 3
min_steps = 6
"""
COMMON = dict(workers=1, rate="1gbit", km=60, k=1, nconnect=1)

# (what differs from COMMON, the label that must bind, the model's MB/s per worker)
CASES = [
    # one connection carries 80 Mbit/s of file data: 10 MB/s against a 119 MB/s line
    pytest.param(dict(host="conn_read_mbit = 80"), "host (connection)", 10.0,
                 id="connection"),
    # the server's most per connection, below the client's
    pytest.param(dict(host="server_conn_mbit = 80"), "host (server)", 10.0,
                 id="server-connection"),
    # two GPU workers on one host share its 200 Mbit/s NIC: 100 Mbit/s of line each
    pytest.param(dict(workers=2, host="host_gpus = 2\nhost_nic_read_mbit = 200"),
                 "host (nic)", 100 / 8 * PAYLOAD, id="nic-shared"),
    # two workers on two hosts share a server that moves 160 Mbit/s of data
    pytest.param(dict(workers=2, host="host_gpus = 1\nserver_total_mbit = 160"),
                 "host (server)", 10.0, id="server-total"),
    # dilated: 10 Gbit/s of line, 800 Mbit/s a connection, all k = 5 times slower
    pytest.param(dict(rate="5gbit", k=5, host="conn_read_mbit = 400"),
                 "host (connection)", 50.0, id="connection-dilated"),
]


def _far_rows(out) -> pd.DataFrame:
    """The rows of the points away from the storage (not the co-located baselines)."""
    df = pd.read_csv(out / "results.csv")
    return df[~df.baseline.astype(bool)]


def _run(tmp_path, name: str, **changes) -> pd.DataFrame:
    """Run BASE with `changes` in tmp_path/name; its far rows."""
    f = tmp_path / f"{name}.toml"
    f.write_text(BASE.format(**{**COMMON, **changes}))
    return _far_rows(run_file(f, tmp_path / name))


def _within(row, label: str, expected_MB_s: float) -> None:  # noqa: N803
    """The row was measured (the emulator kept up), names the limit the case was built
    for at the model's figure for it, and read within TOLERANCE of the model."""
    assert row.status == "ok", row.reason
    assert not row.emulator_limited, row.emulator_reason
    assert row.limited_by == label, (row.limited_by, row.model_MB_s)
    assert row.model_MB_s == pytest.approx(expected_MB_s, rel=1e-3)
    ratio = row.throughput_MB_s / row.model_MB_s
    assert 1 - TOLERANCE <= ratio <= 1 + TOLERANCE, (row.throughput_MB_s, row.model_MB_s)
    assert row.qdisc_drops == 0


@pytest.mark.keeps_up("each host limit's point must read within 15 % of the model")
@pytest.mark.parametrize("changes,label,expected", CASES)
def test_each_host_limit_binds_where_it_should(tmp_path, changes, label, expected):
    """Every worker of the point reads within 15 % of the model, which names the host
    term the case was built to bind."""
    for _, row in _run(tmp_path, "case", **changes).iterrows():
        _within(row, label, expected)


@pytest.mark.keeps_up("four connections must read four times one")
def test_nconnect_lifts_the_connection_limit(tmp_path):
    """With 80 Mbit/s a connection, four connections read ~4 x one (the line, the
    window and the readers' round trips all allow more), each within 15 % of the
    model."""
    one = _run(tmp_path, "one", host="conn_read_mbit = 80").iloc[0]
    four = _run(tmp_path, "four", host="conn_read_mbit = 80", nconnect=4).iloc[0]
    _within(one, "host (connection)", 10.0)
    _within(four, "host (connection)", 40.0)
    assert 3.4 <= four.throughput_MB_s / one.throughput_MB_s <= 4.6


def test_access_links_carry_the_profile_read_back(make_net):
    """The qdiscs of each worker's access link, read back: htb at its share of its
    host's NIC and of the server, fq at one connection's most (shared by the workers on
    a host), both on the wire and / k; a limit that cannot bind below the line is left
    out, and the ideal profile leaves the links as they were."""
    net = make_net("apn", workers=3, distance_km=60, rate="1gbit")
    spec = HostSpec(gpus=2, nic_read_mbit=200, nic_write_mbit=100, conn_read_mbit=80,
                    conn_write_mbit=40, server_total_mbit=600, time_scale=4)
    lines = {w: 1000.0 for w in ("w1", "w2", "w3")}
    access.shape_hosts(net, spec, "tcp", PAYLOAD, lines, net.tcp.buffer_bytes, 1500)
    got = {w: access.read_worker(net, w) for w in lines}
    for w, on_host in (("w1", 2), ("w2", 2), ("w3", 1)):
        read, write = got[w]["read"], got[w]["write"]
        assert read.rate_mbit == pytest.approx(min(200 / on_host, 200 / PAYLOAD) / 4,
                                               rel=1e-6)
        assert read.flow_mbit == pytest.approx(80 / on_host / PAYLOAD / 4, rel=1e-5)
        assert write.rate_mbit == pytest.approx(100 / on_host / 4, rel=1e-6)
        assert write.flow_mbit == pytest.approx(40 / on_host / PAYLOAD / 4, rel=1e-5)
        assert read.flow_limit_pkts * 1448 >= net.tcp.buffer_bytes and read.drops == 0
    access.shape_hosts(net, HostSpec(gpus=1, conn_read_mbit=2000, nic_read_mbit=math.inf),
                       "tcp", PAYLOAD, lines, net.tcp.buffer_bytes, 1500)
    assert access.read_worker(net, "w1")["read"] is None  # 2 Gbit/s cannot bind at 1
    access.shape_hosts(net, HostSpec.from_profile("ideal"), "tcp", PAYLOAD, lines,
                       net.tcp.buffer_bytes, 1500)
    assert all(v is None for w in lines for v in access.read_worker(net, w).values())


CHECKPOINT = """
name = "ckpt"
topology = "apn"
[fixed]
workers = 1
rate = "1gbit"
distance_km = 60
time_scale = 1
host = "h"
[sweep]
mount = ["one", "four"]
[mounts.one]
nconnect = 1
[mounts.four]
nconnect = 4
[hosts.h]
conn_write_mbit = 80
[workload]
dlio = "{config}"
scale = 0.001
"""


@pytest.mark.keeps_up("the write time is held to the model's")
def test_a_rank_writes_at_what_its_connections_allow(tmp_path):
    """A checkpoint rank (llama3 8B's, 1/1000: 13.4 MiB) writes through connections
    that carry 80 Mbit/s of data each: its write and fsync take within 15 % of the
    model's time, which names the connections; four connections take ~1/4 of one's."""
    f = tmp_path / "ckpt.toml"
    f.write_text(CHECKPOINT.format(config=presets.MLPERF_DIR / "llama3_8b.yaml"))
    rows = _far_rows(run_file(f, tmp_path / "out")).set_index("mount")
    for mount in ("one", "four"):
        row = rows.loc[mount]
        assert row.status == "ok" and not row.emulator_limited, row.emulator_reason
        assert row.limited_by == "host (connection)", (mount, row.limited_by)
        ratio = row.write_s / row.write_model_s
        assert 1 - TOLERANCE <= ratio <= 1 + TOLERANCE, (mount, row.write_s,
                                                         row.write_model_s)
    assert 3.0 <= rows.loc["one"].write_s / rows.loc["four"].write_s <= 4.6
