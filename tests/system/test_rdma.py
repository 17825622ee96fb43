"""NFS over RDMA through the emulated fibre: soft-RoCE in the storage and worker namespaces,
nfsd listening on rdma 20049, a proto=rdma mount reading the dataset.

Marked `rdma`: it needs a kernel whose soft-RoCE devices can be endpoints inside network
namespaces (per-namespace rxe sockets; testbed/services/rdma.py says which kernels). lab/test
runs it in the lab VM with Debian testing's kernel (`lab/test --vm`); on user-mode Linux
(no RDMA modules) and Debian 12's 6.1 it is deselected by lab/test, and run by hand it fails
with the reason, never skips.
"""

import hashlib
import os
from pathlib import Path

import pytest

from testbed import topology
from testbed.network.engine import Network
from testbed.services.nfs import NfsMount, NfsServer
from testbed.services.rdma import ROCE_PORT, rdma_site, udp_port_bound
from testbed.spec import NFS_RDMA_PORT, MountSpec

pytestmark = [pytest.mark.system, pytest.mark.rdma]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_rdma_mount_reads_the_dataset_across_the_fibre(tmp_path):
    """apn, 1 worker, 1,000 km (9.8 ms RTT) at 200 Mbit/s: every file reads back
    byte-identical over proto=rdma, nfsd lists rdma 20049, the mount holds no TCP connection
    to the NFS port, and the RoCE packets went through the fibre's qdiscs (netem counted
    them, both ways)."""
    data = tmp_path / "data"
    data.mkdir()
    for i in range(3):
        (data / f"f{i}.bin").write_bytes(os.urandom((2 + i) << 20))
    net = Network(topology.build("apn", {"workers": 1, "distance_km": 1000,
                                         "rate": "200mbit"}))
    net.start()
    try:
        server = net.enter(NfsServer(net, "srv", data))
        devices = rdma_site(net, server, ["w1"])
        assert f"rdma {NFS_RDMA_PORT}" in server.portlist()
        for dev in devices:
            assert "ACTIVE" in dev.state(), dev.state()
            assert udp_port_bound(net.namespace(dev.node), ROCE_PORT)
        before = net.read_fibre("srv", "s1")
        m = net.enter(NfsMount(net, "w1", server, MountSpec(transport="rdma")))
        opts = m.options()
        assert opts["proto"] == "rdma" and opts["port"] == str(NFS_RDMA_PORT), opts
        for f in sorted(data.iterdir()):
            assert sha(m.path / f.name) == sha(f)
        assert m.rpc_stats()["READ"]["ops"] >= 9  # 2+3+4 MiB in 1 MiB READs, over the wire
        assert m.connections() == 0  # no TCP connection to the NFS port
        after = net.read_fibre("srv", "s1")
        sent = [a.sent_pkts - b.sent_pkts for a, b in zip(after, before)]
        # 9 MiB of READ data need >= 9 MiB / 4 KiB RoCE packets srv -> s1 (their payload
        # is at most the path MTU: 1 KiB on this 1,500-byte link).
        assert sent[0] >= (9 << 20) // 4096 and sent[1] > 0, sent
    finally:
        net.stop()
