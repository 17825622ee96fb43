"""The fibre engine on a real kernel: reachability, RTT, loss, rate, readback, live changes,
crash cleanup and scale.

Tolerances (the `tol` fixture, tests/system/conftest.py, says why and where measured):
  RTT      scapy probes: min within [configured, +0.5] ms, median within +0.5 ms, one-way
           within [half, +1.0] ms, median TCP handshake within [configured - 0.05, +1.5] ms
           on a direct kernel (user-mode Linux, KVM); under QEMU's software emulation
           +1.0 / +5.0 / +3.0 / +8.0 ms and at most 1 of 500 probes reordered; back at
           0 km the TCP median must be below the same allowance
  loss     the configured rate lies in the 99.9 % Wilson interval of 3,000 probes, each way
  rate     one TCP flow within +-10 % of a 200 Mbit/s shaped rate at 29.4 ms RTT (holds
           under emulation too: 200 Mbit/s is far below what TCG forwards)
"""

import difflib
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

from testbed import spec as spec_mod
from testbed import topology
from testbed.network import path_metrics, sockets, tcp_policy
from testbed.network.engine import Network
from testbed.network.namespace import NETNS_DIR, in_namespace
from testbed.packets import probe as probe_mod


def ping(net, src, dst, count=1):
    """True when any of `count` echo requests is answered (ping exits 0 on one reply):
    across a lossy fibre one request and its ARP exchange cross netem four times."""
    argv = net.procs.cmd(src, ["ping", "-c", str(count), "-i", "0.2", "-W", "3",
                               net.address(dst)])
    return subprocess.run(argv, capture_output=True).returncode == 0


def test_pingall_two_sites(make_net):
    net = make_net("two-sites", workers=2, distance_a_km=60, distance_b_km=500,
                   rate="200mbit")
    hosts = net.hosts
    failures = [(a, b) for a in hosts for b in hosts if a != b and not ping(net, a, b)]
    assert not failures


# netem takes its delay in whole microseconds (testbed.network.tc rounds each direction),
# so the floor it holds is the configured round trip within 2 x 0.5 us: 29.400064 ms
# measured at 3,000 km on the virtual clock, which reads it to the nanosecond, for a
# configured 29.400339 (the host's clock hides it under its own tens of microseconds).
NETEM_ROUNDING_MS = 0.001


def probe(net, count=1000, src="w1", dst="srv"):
    return probe_mod.probe(net.namespace(src), net.namespace(dst), net.address(dst),
                           count=count, src=src, dst=dst)


# On the virtual clock some runs lose the first few hundred probes of a fresh topology
# before they leave w1 (279 of 500 at 60 km in two of three runs, 2026-12-05, 7.2.12), and
# a fresh connection's SYN is sent twice (RTO 3 s): cause not found (docs/virtual-clock.md).
VIRTUAL_START_LOSS = "the first packets of a fresh topology are sometimes lost on the virtual clock"


@pytest.mark.real_clock(VIRTUAL_START_LOSS)
@pytest.mark.parametrize("distance_km", [0, 60, 1000, 3000])
def test_rtt_follows_distance(make_net, distance_km, tol):
    net = make_net("apn", workers=1, distance_km=distance_km, rate="200mbit")
    configured = topology.path_fibre(net.topo, "w1")[0].rtt_ms
    rep = probe(net, count=500)
    assert rep.returned == 500 and rep.socket_drops == 0, rep.render()
    assert rep.kernel_sent == 500, rep.render()  # send times are the kernel's, not Python's
    floor = configured - NETEM_ROUNDING_MS  # netem holds whole microseconds each way
    assert floor <= rep.rtt_min_ms <= configured + tol.rtt_min_ms, rep.render()
    assert rep.rtt_median_ms <= configured + tol.rtt_median_ms, rep.render()
    assert floor / 2 <= rep.one_way_median_ms <= configured / 2 + tol.one_way_ms, \
        rep.render()
    # A stalled lab kernel reorders what it holds (CI's lab VM, 2026-12-06: 27 of 500
    # reordered, all in flight while the probe's sender was stalled for > 1 ms, 73 times)
    fibre_reordered = rep.reordered - rep.reordered_in_stall
    assert fibre_reordered <= tol.reordered_max and rep.duplicates == 0, rep.render()
    tcp = path_metrics.tcp_rtt(net.namespace("w1"), net.namespace("srv"), net.address("srv"),
                               count=10)  # a second, independent method agrees
    assert configured - 0.05 <= tcp.median_ms <= configured + tol.tcp_median_ms, \
        tcp.samples_ms


def test_loss_within_binomial_interval(make_net):
    net = make_net("apn", workers=1, distance_km=100, rate="200mbit", loss_pct=2.0)
    # Neighbours resolved first: an ARP request or reply lost on the fibre (2 % each way)
    # holds the first second of probes, and all but the neighbour queue's ~100 are dropped
    # before netem (2026-12-06: 878 of 3,000 "lost", 835 never left w1).
    assert ping(net, "srv", "w1", count=10)
    rep = probe(net, count=3000)
    lo, hi = rep.loss_ci(z=3.29)  # 99.9 %
    assert rep.socket_drops == 0 and lo <= 0.02 <= hi, rep.render()
    sent, received = path_metrics.udp_loss(net.namespace("srv"), net.namespace("w1"),
                                           net.address("w1"), count=3000)  # the other direction
    lo, hi = path_metrics.binomial_ci(sent - received, sent)
    assert lo <= 0.02 <= hi, (sent, received)


def test_loss_seed_drops_the_same_datagrams_again(make_net, kernel_keeps_netem_seed):
    """A seeded netem drops the same datagrams each time it is given that seed (the
    points a run compares meet the same losses), another seed drops others, and the
    kernel reports the seed back for each direction. The draws follow the packets netem
    sees, so a neighbour probe in between shifts the rest by one: "the same" compares
    the gaps between losses (a shift changes one gap), in order."""
    net = make_net("apn", workers=1, distance_km=100, rate="200mbit", loss_pct=5.0)
    spec = net.fibre_links()[("srv", "s1")]
    # neighbours resolved: only the datagrams cross netem (10 tries: 5 % loss each way)
    assert ping(net, "srv", "w1", count=10)

    def lost(seed):
        net.set_fibre_spec("wan", spec.replace(loss_seed=seed))
        return set(range(2000)) - path_metrics.udp_received(
            net.namespace("srv"), net.namespace("w1"), net.address("w1"), count=2000)

    def common(a, b):
        gaps = [[y - x for x, y in zip(sorted(s), sorted(s)[1:])] for s in (a, b)]
        return difflib.SequenceMatcher(None, *gaps, autojunk=False).ratio()

    if not kernel_keeps_netem_seed:
        pytest.skip("this kernel keeps no netem seed (TCA_NETEM_PRNG_SEED: Linux >= 6.3)")
    first = lost(11)
    assert net.read_fibre("srv", "s1")[0].seed is not None, "the kernel lost netem's seed"
    other, again = lost(12), lost(11)
    assert 50 < len(first) < 200, len(first)
    assert common(first, again) >= 0.8 and common(first, other) <= 0.3, \
        (common(first, again), common(first, other))
    fwd, rev = net.read_fibre("srv", "s1")
    assert (fwd.seed, rev.seed) == (11, 11 ^ spec_mod.REVERSE_SEED_SALT)


def test_jitter_reorders_and_spreads_rtt(make_net):
    """netem jitter delays each packet independently, so probes 1 ms apart overtake one
    another: the probe must see it (and a jitter-free link must not)."""
    net = make_net("apn", workers=1, distance_km=1000, rate="200mbit", jitter_ms=2.0)
    rep = probe(net, count=1000)
    assert rep.reordered > 0, rep.render()
    assert rep.rtt_p99_ms - rep.rtt_min_ms > 2.0, rep.render()


def test_shaped_rate_at_30ms_without_queue_drops(make_net):
    net = make_net("apn", workers=1, distance_km=3000, rate="200mbit")
    mbit = path_metrics.tcp_goodput(net.namespace("srv"), net.namespace("w1"),
                                    net.address("w1"), seconds=8.0, warmup_s=2.0)
    fwd, _ = net.read_fibre("srv", "s1")
    assert 180.0 <= mbit <= 220.0, mbit
    assert fwd.netem_drops == 0 and fwd.htb_drops == 0, fwd


def test_kernel_state_read_back(make_net):
    net = make_net("apn", workers=1, distance_km=3000, rate="10gbit", loss_pct=0.01,
                   jitter_ms=0.5)
    spec = net.fibre_links()[("srv", "s1")]
    for got, want in zip(net.read_fibre("srv", "s1"), (spec.direction(True),
                                                       spec.direction(False))):
        assert got.delay_ms == pytest.approx(want.delay_ms, abs=0.001)
        assert got.jitter_ms == pytest.approx(want.jitter_ms, abs=0.001)
        assert got.loss_pct == pytest.approx(want.loss_pct, abs=1e-6)
        assert got.rate_mbit == pytest.approx(want.rate_mbit, rel=1e-6)  # > 32-bit rate
        assert got.limit_pkts == want.limit_pkts >= 1.5 * spec.bdp_bytes() / spec.mtu
    assert int(net.tcp.read_sysctl("w1", "net.ipv4.tcp_rmem").split()[2]) \
        >= 2 * spec.bdp_bytes()
    assert net.tcp.read_sysctl("w1", "net.ipv4.tcp_congestion_control") == "cubic"


def test_live_reconfiguration_and_back_to_zero(make_net, tol):
    net = make_net("apn", workers=1, distance_km=0, rate="100mbit")
    new = net.set_fibre("srv", "s1", distance_km=2000, loss_pct=0.5, rate_mbit=150,
                        jitter_ms=0.2)
    fwd, rev = net.read_fibre("srv", "s1")
    for got in (fwd, rev):
        assert got.delay_ms == pytest.approx(new.one_way_delay_ms, abs=0.001)
        assert got.loss_pct == pytest.approx(0.5, abs=1e-6)
        assert got.rate_mbit == pytest.approx(150)
        assert got.jitter_ms == pytest.approx(0.2, abs=0.001)
    rtt = path_metrics.tcp_rtt(net.namespace("w1"), net.namespace("srv"), net.address("srv"),
                               10)
    assert rtt.min_ms >= new.rtt_ms - 0.5  # jitter +-0.2 ms each way

    net.set_fibre("srv", "s1", distance_km=0, loss_pct=0, jitter_ms=0, rate_mbit=100)
    fwd, rev = net.read_fibre("srv", "s1")
    for got in (fwd, rev):
        assert (got.delay_ms, got.loss_pct, got.jitter_ms) == (0, 0, 0)
        assert got.rate_mbit == pytest.approx(100)
    rtt = path_metrics.tcp_rtt(net.namespace("w1"), net.namespace("srv"), net.address("srv"),
                               10)
    assert rtt.median_ms < tol.tcp_median_ms  # 2,000 km was 19.6 ms


def _ours():
    return sorted(n for n in os.listdir(NETNS_DIR) if n.startswith("tb")) \
        if NETNS_DIR.is_dir() else []


def test_sigkill_then_clean_leaves_nothing_of_ours():
    # Something that is not ours and must survive: a namespace and a host link.
    subprocess.run(["ip", "netns", "add", "bystander"], check=True)
    subprocess.run(["ip", "link", "add", "bystander0", "type", "dummy"], check=True)
    try:
        up = subprocess.Popen([sys.executable, "-m", "testbed.cli", "up", "apn",
                               "-p", "workers=3", "-p", "distance_km=1000"],
                              stdout=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        for line in up.stdout:  # type: ignore[union-attr]
            if "Ctrl-C" in line or time.monotonic() > deadline:
                break
        assert len(_ours()) == 5  # srv, w1..w3, s1
        up.send_signal(signal.SIGKILL)
        up.wait(timeout=10)
        assert len(_ours()) == 5  # a crash leaves them behind
        out = subprocess.run([sys.executable, "-m", "testbed.cli", "clean"],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert _ours() == []
        assert not list(Path("/run/apn-testbed").glob("tb*.json"))
        assert "bystander" in os.listdir(NETNS_DIR)
        assert Path("/sys/class/net/bystander0").exists()
        again = subprocess.run([sys.executable, "-m", "testbed.cli", "clean"],
                               capture_output=True, text=True, timeout=60)
        assert again.returncode == 0 and "nothing to clean" in again.stdout
    finally:
        subprocess.run(["ip", "link", "del", "bystander0"], check=False)
        subprocess.run(["ip", "netns", "del", "bystander"], check=False)


def test_clean_leaves_a_live_run_alone(make_net):
    net = make_net("local", workers=1)
    out = subprocess.run([sys.executable, "-m", "testbed.cli", "clean"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0
    assert net.prefix in out.stdout  # reported as still running
    assert (NETNS_DIR / net.namespace("srv")).exists()


def test_32_worker_apn_builds_and_tears_down():
    topo = topology.build("apn", {"workers": 32, "distance_km": 3000, "rate": "10gbit"})
    with Network(topo) as net:
        assert len(_ours()) == 34
        assert ping(net, "w32", "srv")
    assert _ours() == []


def test_exception_inside_tears_down():
    topo = topology.build("apn", {"workers": 2})
    with pytest.raises(RuntimeError):
        with Network(topo):
            assert len(_ours()) == 4
            raise RuntimeError("boom")
    assert _ours() == []


def _tcp_rto_ms(net, client: str, server: str, port: int = 5301) -> float:
    """The RTO (ms) TCP gives a fresh connection from client to server (TCP_INFO)."""
    lst = sockets.ns_socket(net.namespace(server))
    lst.bind((net.address(server), port))
    lst.listen(1)
    c = sockets.ns_socket(net.namespace(client))
    try:
        c.connect((net.address(server), port))
        peer, _ = lst.accept()
        c.sendall(b"x" * 1000)
        peer.recv(1000)
        peer.sendall(b"y")
        c.recv(1)
        info = c.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
        peer.close()
        return struct.unpack_from("I", info, 8)[0] / 1000.0  # tcpi_rto, microseconds
    finally:
        c.close()
        lst.close()


@pytest.mark.real_clock(VIRTUAL_START_LOSS)
def test_time_scale_stretches_the_rto_tcp_uses(make_net):
    """Dilation by k: TCP's minimum RTO becomes k x 200 ms on every host's routes, as TCP
    itself reports it (the route metric is ignored unless locked), and back at k = 1."""
    net = make_net("apn", workers=1, distance_km=100, rate="100mbit")
    net.tcp.set_time_scale(10)
    assert set(tcp_policy.route_rto_min_ms(net.ipr("w1"))) == {2000}
    assert 1990 <= _tcp_rto_ms(net, "w1", "srv") <= 2300
    net.tcp.set_time_scale(1)
    assert set(tcp_policy.route_rto_min_ms(net.ipr("srv"))) == {None}
    assert 190 <= _tcp_rto_ms(net, "w1", "srv", port=5302) <= 500


def _tcp_ext(net, node: str, name: str) -> int:
    """A TcpExt counter of node's namespace (/proc/net/netstat as the namespace sees it)."""
    with in_namespace(net.namespace(node)):
        lines = Path("/proc/thread-self/net/netstat").read_text().splitlines()
    names, values = next((a.split(), b.split()) for a, b in zip(lines, lines[1:])
                         if a.startswith("TcpExt:") and b.startswith("TcpExt:"))
    return int(values[names.index(name)])


def _delayed_acks(net, receiver: str) -> int:
    """TcpExt DelayedACKs of receiver's namespace: ACKs its delayed-ACK timer sent."""
    return _tcp_ext(net, receiver, "DelayedACKs")


@contextmanager
def _connection(net, sender: str, receiver: str,
                port: int) -> Iterator[tuple[socket.socket, socket.socket]]:
    """A TCP connection from sender to receiver's address:port, Nagle off (each write a
    segment at once): (the sender's socket, the receiver's accepted one), all closed after."""
    with closing(sockets.ns_socket(net.namespace(receiver))) as lst:
        lst.bind((net.address(receiver), port))
        lst.listen(1)
        with closing(sockets.ns_socket(net.namespace(sender))) as c:
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            c.connect((net.address(receiver), port))
            peer, _ = lst.accept()
            with closing(peer):
                yield c, peer


def _trickle(net, sender: str, receiver: str, port: int) -> None:
    """30 one-byte segments, 50 ms apart, that the receiver reads only at the end (a read
    sends a pending ACK) and never answers: past its first 16 quick ACKs each waits for
    the delayed-ACK timer (40 ms at first; segments closer than a quarter of it to a
    pending timer are ACKed without it) unless the route says quickack."""
    with _connection(net, sender, receiver, port) as (c, peer):
        for _ in range(30):
            c.sendall(b"x")
            time.sleep(0.05)
        got = b""
        while len(got) < 30:
            got += peer.recv(30)


def test_delayed_ack_off_sets_quickack_on_every_route(make_net):
    """delayed_ack = false: every host's routes carry quickack (alongside a dilated
    rto_min), and a receiver's delayed-ACK timer then never fires; on again, it does."""
    net = make_net("apn", workers=1, distance_km=100, rate="100mbit")
    net.tcp.set_time_scale(10)
    net.tcp.set_delayed_ack(False)
    assert set(tcp_policy.route_quickack(net.ipr("w1"))) == {True}
    assert set(tcp_policy.route_rto_min_ms(net.ipr("srv"))) == {2000}
    before = _delayed_acks(net, "srv")
    _trickle(net, "w1", "srv", 5401)
    assert _delayed_acks(net, "srv") == before
    net.tcp.set_delayed_ack(True)
    assert set(tcp_policy.route_quickack(net.ipr("srv"))) == {False}
    assert set(tcp_policy.route_rto_min_ms(net.ipr("w1"))) == {2000}
    before = _delayed_acks(net, "srv")
    _trickle(net, "w1", "srv", 5402)
    assert _delayed_acks(net, "srv") > before


def _tails(net, sender: str, receiver: str, port: int) -> None:
    """60 flights of ten segments (14,000 bytes), 60 ms apart: when a flight's tail or
    its last ACKs are lost the sender's loss probe fires (2 x srtt + two jiffies, with
    more than one segment out) long before the next flight or the retransmission
    timeout. (A lone segment's probe waits about as long as the timeout.)"""
    with _connection(net, sender, receiver, port) as (c, peer):
        got = 0
        for _ in range(60):
            c.sendall(b"x" * 14_000)
            time.sleep(0.06)
            peer.setblocking(False)
            try:
                while chunk := peer.recv(65536):
                    got += len(chunk)
            except BlockingIOError:
                pass
        peer.setblocking(True)
        while got < 60 * 14_000:
            got += len(peer.recv(65536))


def test_loss_probe_off_stops_tail_loss_probes(make_net):
    """loss_probe = false: a sender whose tail segments meet a lossy fibre (10 %) sends
    no tail loss probe (TcpExt TCPLossProbes), where with Linux's default it sends some.
    Off first: a closing connection may still probe a lost FIN scheduled before a switch."""
    net = make_net("apn", workers=1, distance_km=100, rate="100mbit", loss_pct=10.0)
    assert {net.tcp.read_sysctl(h, "net.ipv4.tcp_early_retrans")
            for h in ("srv", "w1")} == {"3"}
    net.tcp.set_loss_probe(False)
    assert {net.tcp.read_sysctl(h, "net.ipv4.tcp_early_retrans")
            for h in ("srv", "w1")} == {"0"}
    before = _tcp_ext(net, "srv", "TCPLossProbes")
    _tails(net, "srv", "w1", 5501)
    assert _tcp_ext(net, "srv", "TCPLossProbes") == before
    net.tcp.set_loss_probe(True)
    assert {net.tcp.read_sysctl(h, "net.ipv4.tcp_early_retrans")
            for h in ("srv", "w1")} == {"3"}
    before = _tcp_ext(net, "srv", "TCPLossProbes")
    _tails(net, "srv", "w1", 5502)
    assert _tcp_ext(net, "srv", "TCPLossProbes") > before


def test_congestion_control_is_set_on_every_host(make_net):
    net = make_net("apn", workers=2, distance_km=100, rate="100mbit")
    net.tcp.set_congestion("reno")
    assert {net.tcp.read_sysctl(h, "net.ipv4.tcp_congestion_control")
            for h in ("srv", "w1", "w2")} == {"reno"}
