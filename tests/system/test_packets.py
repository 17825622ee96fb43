"""Packet-level checks in the lab kernel: capture bounds and clean-up, and the NFS/RPC
analysis of a capture of a known read. (The probe's delay/loss/reordering checks are in
test_fibre.py, next to the fibre they check.)"""

import subprocess
import time

import pandas as pd
import pytest

from testbed import topology, workload
from testbed.experiment import run_file
from testbed.network.engine import Network
from testbed.packets import nfs_rpc
from testbed.packets.sniffer import Capture
from testbed.services.nfs import NfsMount, NfsServer
from testbed.spec import MountSpec

pytestmark = pytest.mark.system


@pytest.fixture
def site(tmp_path):
    """apn, 1 worker, 60 km at 1 Gbit/s; nfsd exports one 64 MiB file."""
    data = tmp_path / "data"
    workload.generate(data, 1, 64 << 20, "raw")
    net = Network(topology.build("apn", {"workers": 1, "distance_km": 60, "rate": "1gbit"}))
    net.start()
    try:
        yield net, net.enter(NfsServer(net, "srv", data)), data
    finally:
        net.stop()


def test_capture_of_a_64_MiB_read_finds_64_one_MiB_READs(site, tmp_path):
    net, server, data = site
    pcap = tmp_path / "read.pcap"
    with open("/proc/sys/vm/drop_caches", "w") as fh:
        fh.write("3")
    with Capture(net.namespace("w1"), "w1-eth0", pcap, seconds=300) as cap:
        with NfsMount(net, "w1", server, MountSpec(rsize=1 << 20)) as m:
            got = workload.read_sample((str(m.path / "sample_000000.bin"), 0, -1))
    assert got == 64 << 20
    res = cap.result
    assert res.stopped_by == "stop" and res.dropped == 0 and res.bytes > 64 << 20
    a = nfs_rpc.analyse(pcap, rate_bps=1e9, rtt_s=0.00059)
    reads = a.rpcs[a.rpcs.op == "READ"]
    assert len(reads) == 64, a.rpcs.op.value_counts()
    assert set(reads["count"]) == {1 << 20}
    assert sorted(reads["offset"]) == [i << 20 for i in range(64)]
    assert reads["reply_bytes"].min() > 1 << 20 and reads["latency_ms"].min() >= 0.59
    s = a.summary
    assert s["read_bytes"] == 64 << 20 and s["streams_skipped"] == 0
    assert s["reads_in_flight_max"] >= 1 and s["bdp_bytes"] == pytest.approx(1e9 / 8 * 0.00059)
    assert (a.timeline["reads_in_flight"].iloc[-1]) == 0
    cap.remove()
    assert not pcap.exists()


def test_capture_stops_at_each_bound(site, tmp_path):
    net, server, _ = site
    ns, dst = net.namespace("w1"), net.address("srv")
    ping = ["ping", "-q", "-i", "0.01", "-c", "300", dst]
    with Capture(ns, "w1-eth0", tmp_path / "n.pcap", count=50) as cap:
        subprocess.run(net.procs.cmd("w1", ping), capture_output=True, timeout=60)
        assert cap.wait(30)
    assert cap.result.stopped_by == "count" and cap.result.packets == 50
    t0 = time.monotonic()
    cap = Capture(ns, "w1-eth0", tmp_path / "t.pcap", seconds=1.0)
    cap.start()
    assert cap.wait(10) and cap.result.stopped_by == "time"
    assert time.monotonic() - t0 < 5
    with Capture(ns, "w1-eth0", tmp_path / "b.pcap", max_bytes=10_000) as cap:
        subprocess.run(net.procs.cmd("w1", ping), capture_output=True, timeout=60)
        assert cap.wait(30)
    assert cap.result.stopped_by == "bytes" and 10_000 <= cap.result.bytes < 12_000
    for name in ("n", "t", "b"):
        p = tmp_path / f"{name}.pcap"
        assert p.stat().st_size > 0
    cap.remove()
    assert not (tmp_path / "b.pcap").exists()


@pytest.mark.runner  # the runner's [capture] option; the capture itself is checked above on every kernel
def test_experiment_capture_option(real_kernel, tmp_path):
    f = tmp_path / "cap.toml"
    f.write_text("""
name = "cap"
[fixed]
workers = 1
rate = "1gbit"
[sweep]
distance_km = [0, 3000]
[capture]
seconds = 60
[dataset]
files = 8
file_kib = 1024
[workload]
batch = 2
compute_ms = 20
measure_s = 1
measure_max_s = 2
warmup_max_s = 2
min_steps = 4
readers = 1
""")
    out = run_file(f, tmp_path / "out")
    df = pd.read_csv(out / "results.csv")
    assert df["captured"].all() and (df["capture_dropped"] == 0).all()
    far = df[df.distance_km == 3000].iloc[0]
    assert far.bdp_bytes == pytest.approx(1e9 / 8 * 0.0294, rel=0.01)
    assert far.read_size_median > 0 and far.reads_in_flight_mean > 0
    dirs = sorted((out / "capture").iterdir())
    assert len(dirs) == 2
    for d in dirs:
        assert {p.name for p in d.iterdir()} == {"rpcs.csv", "timeline.csv", "summary.json",
                                                 "inflight.png"}
    assert not list(out.rglob("*.pcap"))
