"""The read-back model (testbed/model/read_back.py) against the lab kernel without time
dilation: one rank writes a lab-sized llama3 8B checkpoint (2 + 12 MiB in two files)
over NFS at 1,000 km and 1 Gbit/s through one connection or eight (nconnect), drops its
cache and reads it back cold three times (the first a warm-up, as in the checkpoint
table);
tcp_slow_start_after_idle on (Linux's default) and off. Prints the measured time in
round trips beside the model's, with each connection's RTO and window (ss on nfsd's
side), and holds the read to 15 % of the model (eight connections with the sysctl on
excepted, strictly: below).

At k = 1 the RTO is the kernel's own (RTT + 200 ms); the checkpoint table's dilated runs
(docs/own-job.md) measured the eight-connection read-back at 66 round trips, what every
READ restarting from the initial window gives, where this model says 12; at k = 1 eight
connections read within the model with the sysctl off (17.5 round trips against 19.1)."""

import re
import shutil

import pytest

from testbed import topology
from testbed.model.bounds import SKB_WINDOW_SHARE, fibre_Bps
from testbed.model.bounds import Path as ReadPath
from testbed.model.read_back import read_back_bound
from testbed.model.write import WritePath
from testbed.services.nfs import NfsMount, NfsServer
from testbed.spec import MountSpec
from testbed.workload import checkpoint as ck
from testbed.workload import checkpoint_size as cs

pytestmark = pytest.mark.system

MIB = 1 << 20
FILES = (2 * MIB, 12 * MIB)
TOLERANCE = 0.15
RATE_MBIT = 1000


def server_sockets(net) -> str:
    """rto and cwnd of nfsd's connections, as ss reports them."""
    out = net.procs.run("srv", ["ss", "-tin", "state", "established", "sport", "=",
                                ":2049"]).stdout
    return " | ".join(f"rto {r} cwnd {c}" for r, c in
                      re.findall(r"rto:([\d.]+).*?cwnd:(\d+)", out.replace("\n", " ")))


# What the model lacks (measured here, UML 7.2.7, 2026-12-08): with the sysctl on, eight
# connections stay in a restarting regime after the warm-up read (61 and 44 RTTs against
# the model's 19): each connection's turn comes back after more than its RTO while the
# others ramp from cold, so the restarts feed themselves; the model ramps once and keeps
# the windows. Strict: the day the model carries that, this case must be made a plain one.
RESTARTING = pytest.mark.xfail(strict=True, reason="the read-back model keeps eight "
                               "connections' windows after the warm-up; the kernel keeps "
                               "restarting them (docs/own-job.md)")


@pytest.mark.keeps_up("a cold read-back must take within 15 % of the read-back model")
@pytest.mark.parametrize("nconnect, idle_restart", [
    (1, True), (1, False), (8, False), pytest.param(8, True, marks=RESTARTING)],
    ids=["1-restart", "1-keep", "8-keep", "8-restart"])
def test_read_back_within_the_model(make_net, tmp_path, nconnect, idle_restart):
    net = make_net("apn", workers=1, distance_km=1000, rate=f"{RATE_MBIT}mbit")
    net.tcp.set_slow_start_after_idle(idle_restart)
    export = tmp_path / "export"
    export.mkdir()
    server = net.enter(NfsServer(net, "srv", export, writable=True))
    root = net.enter(NfsMount(net, "w1", server, MountSpec(nconnect=nconnect))).path / "ck"
    root.mkdir()
    layout = tuple(cs.ShardFile(f"shard_{i}.pt", n) for i, n in enumerate(FILES))
    ck.write(root, 0, sum(FILES), 1, MIB, index=1, files=layout)
    ck.drop_cache(root)
    rtt_s = topology.path_fibres(net.topo, "w1")[0][1].rtt_ms / 1000.0
    buffer = int(net.tcp.read_sysctl("srv", "net.ipv4.tcp_rmem").split()[2])
    got = []
    for _ in range(3):
        ck.drop_cache(root)
        r = ck.read_back(root, 0, sum(FILES), 1, MIB, index=1, files=layout)
        assert r.problem is None, r.problem
        got.append(r.read_s)
    sockets = server_sockets(net)
    net.stop()
    shutil.rmtree(export)
    path = WritePath(rtt_s, fibre_Bps(ReadPath(rtt_s, RATE_MBIT * 1e6 / 8)),
                     connections=nconnect, buffer_bytes=buffer,
                     window_share=SKB_WINDOW_SHARE, slow_start_after_idle=idle_restart)
    bound = read_back_bound(path, list(FILES), 0.0, checkpoints=2)
    timed = got[1:]
    mean = sum(timed) / len(timed)
    print(f"\nnconnect {nconnect}, slow_start_after_idle {int(idle_restart)}, RTT "
          f"{rtt_s * 1000:.1f} ms: read back " + ", ".join(f"{g:.3f}" for g in got)
          + f" s (warm-up first) = {mean / rtt_s:.1f} RTTs; model {bound.seconds:.3f} s = "
          f"{bound.seconds / rtt_s:.1f} RTTs ({bound.limited_by}, {bound.restarts} "
          f"restarts); x model {mean / bound.seconds:.2f}; nfsd: {sockets}")
    assert 1 - TOLERANCE <= mean / bound.seconds <= 1 + TOLERANCE
