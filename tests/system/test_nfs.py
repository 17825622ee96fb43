"""Kernel nfsd in the storage namespace, kernel NFS client in each worker namespace,
through the emulated fibre."""

import hashlib
import os
import subprocess
import time
from pathlib import Path

import pytest

from testbed import topology
from testbed.errors import ServiceError
from testbed.network.engine import Network
from testbed.services.nfs import NfsMount, NfsServer
from testbed.spec import MountSpec


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def site(tmp_path):
    """apn, 2 workers, 1,000 km (9.8 ms RTT) at 200 Mbit/s, nfsd exporting tmp_path/data."""
    data = tmp_path / "data"
    data.mkdir()
    for i in range(3):
        (data / f"f{i}.bin").write_bytes(os.urandom((2 + i) << 20))
    net = Network(topology.build("apn", {"workers": 2, "distance_km": 1000,
                                         "rate": "200mbit"}))
    net.start()
    try:
        server = net.enter(NfsServer(net, "srv", data))
        yield net, server, data
    finally:
        net.stop()


def test_byte_identical_on_every_worker_and_options_read_back(site):
    net, server, data = site
    m1 = net.enter(NfsMount(net, "w1", server, MountSpec(nconnect=4, read_ahead_kb=16384)))
    m2 = net.enter(NfsMount(net, "w2", server, MountSpec()))
    for m in (m1, m2):
        for f in sorted(data.iterdir()):
            assert sha(m.path / f.name) == sha(f)
    opts = m1.options()
    assert opts["vers"] == "4.2" and opts["rsize"] == "1048576"
    assert opts["nconnect"] == "4" and opts["read_ahead_kb"] == "16384"
    assert m1.connections() == 4
    assert m2.connections() == 1
    assert m2.options()["read_ahead_kb"] == "128"  # the kernel default, untouched
    assert server.threads() == 8
    idents = [subprocess.run(["nsenter", f"--net={net.netns_path(w)}", "unshare", "--mount",
                              "sh", "-c", "mount -t sysfs sysfs /sys && "
                              "cat /sys/fs/nfs/net/nfs_client/identifier"],
                             capture_output=True, text=True).stdout.strip() for w in ("w1", "w2")]
    assert idents[0] != idents[1] and "(null)" not in idents, idents  # two NFSv4 clients


def test_killed_server_gives_bounded_io_error_on_soft_mount(site):
    net, server, data = site
    m = net.enter(NfsMount(net, "w1", server, MountSpec(hard=False, timeo_ds=10, retrans=1)))
    assert sha(m.path / "f0.bin") == sha(data / "f0.bin")
    server.kill()
    t0 = time.monotonic()
    proc = subprocess.run(["dd", f"if={m.path / 'f2.bin'}", "of=/dev/null", "bs=1M"],
                          capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - t0
    assert proc.returncode != 0 and "Input/output error" in proc.stderr, proc.stderr
    assert elapsed < 30, elapsed  # timeo=1 s x (retrans+1), plus reconnect attempts


def test_missing_export_path_is_a_clear_error(make_net, tmp_path):
    net = make_net("apn", workers=1, distance_km=0)
    with pytest.raises(ServiceError, match="does not exist"):
        NfsServer(net, "srv", tmp_path / "nope").start()


def test_refused_mount_reports_the_reason(site):
    net, server, _ = site
    with pytest.raises(ServiceError, match="refused: .*No such file or directory"):
        NfsMount(net, "w1", server, subdir="not-exported").mount()
    with pytest.raises(ServiceError, match="refused: .*Connection refused"):  # v4-only server
        NfsMount(net, "w1", server, MountSpec(vers="3")).mount()


def test_teardown_with_open_files_leaves_no_mounts_or_threads(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "x").write_bytes(b"x" * 100_000)
    net = Network(topology.build("apn", {"workers": 1, "distance_km": 10}))
    net.start()
    try:
        server = net.enter(NfsServer(net, "srv", data))
        m = net.enter(NfsMount(net, "w1", server))
        # A reader that keeps the file open across teardown.
        holder = subprocess.Popen(["sh", "-c", f"exec 3<{m.path / 'x'}; echo open; sleep 600"],
                                  stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline().strip() == "open"
        mount_path, ns = str(m.path), net.netns_path("srv")
    finally:
        net.stop()
    # The lazily detached mount is gone from the tree; its last user can still be killed
    # (hard NFS mounts wait killably), after which nothing of it remains.
    holder.kill()
    holder.wait(timeout=30)
    assert mount_path not in Path("/proc/mounts").read_text()
    assert not Path(mount_path).exists()
    assert not list(Path("/run/apn-testbed").glob(f"{net.prefix}*"))
    # Threads of nfsd in the (now deleted) namespace are gone: no nfsd kernel threads left.
    threads = [p for p in os.listdir("/proc") if p.isdigit()
               and Path(f"/proc/{p}/comm").exists()
               and Path(f"/proc/{p}/comm").read_text().strip() == "nfsd"]
    assert threads == []
    assert not Path(ns).exists()


def _pids_named(name: str) -> set[int]:
    out = set()
    for p in os.listdir("/proc"):
        try:
            if p.isdigit() and Path(f"/proc/{p}/comm").read_text().strip() == name:
                out.add(int(p))
        except OSError:
            pass
    return out


@pytest.mark.parametrize("export", ["tmp", "run"])
def test_nfsv3_through_a_private_rpcbind(tmp_path, export):
    """v3 and v4.2 from one nfsd, the export in a folder of its own (tmp) or, as
    experiments place it, in the run's scratch folder under /run, which the private
    rpcbind's /run covers in mountd's mount namespace unless bound back in."""
    from testbed.spec import NfsServerSpec
    before = _pids_named("rpcbind")
    net = Network(topology.build("apn", {"workers": 2, "distance_km": 60}))
    net.start()
    try:
        data = tmp_path / "data" if export == "tmp" else net.scratch("data")
        data.mkdir(exist_ok=True)
        (data / "v3.bin").write_bytes(os.urandom(3 << 20))
        server = net.enter(NfsServer(net, "srv", data, NfsServerSpec(versions=("3", "4.2"))))
        m3 = net.enter(NfsMount(net, "w1", server, MountSpec(vers="3")))
        m4 = net.enter(NfsMount(net, "w2", server, MountSpec(vers="4.2")))
        assert m3.options()["vers"] == "3" and m4.options()["vers"] == "4.2"
        assert sha(m3.path / "v3.bin") == sha(m4.path / "v3.bin") == sha(data / "v3.bin")
        ours = _pids_named("rpcbind") - before
        assert ours  # the portmapper answers only inside the testbed: ours lives in the
        root_net = os.readlink("/proc/1/ns/net")  # server's namespace, not the root's
        assert all(os.readlink(f"/proc/{pid}/ns/net") != root_net for pid in ours), ours
    finally:
        net.stop()
    assert _pids_named("rpcbind") == before


def _drop_caches() -> None:
    Path("/proc/sys/vm/drop_caches").write_text("3")


def test_fscache_serves_the_second_read_locally(site):
    """fsc mount: the first read crosses the fibre and fills the cache; after the page
    cache is dropped the second read is served by the local cache (no new NFS READs)."""
    from testbed.services.fscache import CacheFiles, fscache_stats
    net, server, data = site
    cache = net.enter(CacheFiles(net))
    m = net.enter(NfsMount(net, "w1", server, MountSpec(fsc=True)))
    assert "fsc" in m.options()
    f = data / "f2.bin"
    assert sha(m.path / f.name) == sha(f)
    reads_cold = m.rpc_stats()["READ"]["ops"]
    assert reads_cold >= 4  # 4 MiB at rsize 1 MiB, over the wire
    deadline = time.monotonic() + 20  # cachefiles writes the cache asynchronously
    while cache.used_bytes() < f.stat().st_size and time.monotonic() < deadline:
        time.sleep(0.2)
    assert cache.used_bytes() >= f.stat().st_size
    _drop_caches()
    before = fscache_stats()
    assert sha(m.path / f.name) == sha(f)
    assert m.rpc_stats()["READ"]["ops"] == reads_cold  # nothing fetched again
    after = fscache_stats()
    # "IO: rd=" counts reads served by the cache (the same name on 6.1 and 7.x; the other
    # read counters differ between the kernels' fscache versions).
    assert after.get("IO.rd", 0) > before.get("IO.rd", 0), (before, after)
    cache_dir = cache.dir
    net.stop()
    assert not cache_dir.exists()


def test_staged_copy_is_complete_and_timed(site):
    from testbed.services.stage import StagedCopy
    net, server, data = site
    m = net.enter(NfsMount(net, "w1", server, MountSpec(nconnect=4)))
    staged = StagedCopy(net, "w1", m.path, parallel=3)
    res = staged.stage()
    assert res.files == 3 and res.bytes == sum(f.stat().st_size for f in data.iterdir())
    assert res.seconds > 0 and res.MB_s > 0
    for f in data.iterdir():
        assert sha(staged.path / f.name) == sha(f)
    path = staged.path
    net.stop()
    assert not path.exists()
