"""Benchmark (host side): NFS across two lab kernels joined through the host, next to NFS
inside one: can a point spread over several kernels carry more than one kernel's CPU?

    .venv/bin/python -m benchmarks.two_kernels [--seconds 8] [--nconnect 4]
        [--link-options KEY=VALUE,...] [--scheduler tcp://HOST:PORT] [--skip-one-kernel]

Makes the join (by default two host taps on a host bridge, UML's tap transport;
`--join veth`: a host veth pair, a raw socket on each end; named apn2k-<pid>-*, removed
on exit), boots one user-mode Linux kernel on each end (`lab/run --link HOSTIF`), starts kernel nfsd exporting a 256 MiB file from tmpfs in the first, mounts it
(NFSv4.2, nconnect, 16 MiB read-ahead) in the second and reads it cold, pass after pass,
as the calibration behind `time_scale = "auto"` does inside one kernel
(testbed/experiment/resolve/dilation.py). Then the same read inside one kernel
(`benchmarks.multi_cpu --calibrate-here`). Prints MB/s and the host CPU each kernel used,
and closes with

    TWO_KERNELS one_kernel_MB_s=<x> two_kernels_MB_s=<y> ratio=<y/x> cpu_s_per_s=<a>+<b>

No fibre (no netem) between the kernels: this measures what the join itself carries.
The file is random; the client reads it once more after the timed passes and its SHA-256
must match the server's (`verified`); the bytes the client's vec0 received during the
read show it crossed the join; each kernel's busy share during the read (/proc/stat in the
guest) names what limited it (`limit`: the server's or the client's kernel CPU, or the
join when neither was busy).

--scheduler runs the two kernels as Dask tasks on two different workers of that
scheduler (the server's on the first, the client's on the second), the way a point
spanning hosts would place its sites (docs/multi-cpu.md); here the workers share this
host and its veth pair.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from pyroute2 import IPRoute

from benchmarks import multi_cpu
from testbed import launch
from testbed.paths import LAB, REPO

PREFIX = f"apn2k-{os.getpid()}"
SERVER_IP, CLIENT_IP = "10.199.0.1", "10.199.0.2"
MARK = "TWO_KERNELS_READ "
SHA = "TWO_KERNELS_SHA "
BUSY = "TWO_KERNELS_BUSY "
BUSY_LIMIT = 0.8  # a kernel this busy during the read is what limited it

SERVER = r"""
set -e
ip link set vec0 up; ip addr add {server}/24 dev vec0
mkdir -p /export /var/lib/nfs/v4recovery; touch /var/lib/nfs/etab /var/lib/nfs/rmtab
mount -t tmpfs -o size=400m export /export
dd if=/dev/urandom of=/export/big.bin bs=1M count=256 status=none
echo "/export {net}/24(ro,fsid=0,no_subtree_check,no_root_squash,insecure)" > /etc/exports
mount -t nfsd nfsd /proc/fs/nfsd
echo 1048576 > /proc/fs/nfsd/max_block_size
echo 10 > /proc/fs/nfsd/nfsv4gracetime; echo 10 > /proc/fs/nfsd/nfsv4leasetime
exportfs -r
rpc.nfsd -N 3 --no-udp 8
rpc.mountd -N 3 --no-udp -F >/dev/null 2>&1 &  # not holding the output pipe open
echo Y > /proc/fs/nfsd/v4_end_grace 2>/dev/null || true
{python} -c "import hashlib; print('{sha}' + hashlib.file_digest(open('/export/big.bin', 'rb'), 'sha256').hexdigest(), flush=True)"
touch {ready}
{python} - <<'EOF'
import json, socket
def cpu():
    v = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return sum(v), v[3] + v[4]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("{server}", 9999))
s.settimeout(600)
while (msg := s.recv(1)) != b"x":
    if msg == b"s":
        t0 = cpu()
    elif msg == b"e":
        t1 = cpu()
        busy = 1 - (t1[1] - t0[1]) / max(1, t1[0] - t0[0])
        print("{busy}" + json.dumps({{"busy": busy}}), flush=True)
EOF
"""

CLIENT = r"""
set -e
ip link set vec0 up; ip addr add {client}/24 dev vec0
i=0; while [ ! -e {ready} ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
mkdir -p /mnt/nfs
i=0; until mount -t nfs4 -o vers=4.2,nconnect={nconnect} {server}:/ /mnt/nfs; do
  i=$((i+1)); [ $i -lt 30 ] || exit 1; sleep 1; done
echo 16384 > /sys/class/bdi/$(mountpoint -d /mnt/nfs)/read_ahead_kb
{python} - <<'EOF'
import hashlib, json, os, socket, time
def drop():
    with open("/proc/sys/vm/drop_caches", "w") as fh: fh.write("3")
def cpu():
    v = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return sum(v), v[3] + v[4]
def rx():
    return int(open("/sys/class/net/vec0/statistics/rx_bytes").read())
def tell(msg):
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(msg, ("{server}", 9999))
buf = bytearray(1 << 20); n = 0
tell(b"s"); c0, r0, t0 = cpu(), rx(), time.monotonic()
while time.monotonic() - t0 < {seconds}:
    drop()
    with open("/mnt/nfs/big.bin", "rb", buffering=0) as fh:
        while (got := fh.readinto(buf)):
            n += got
s = time.monotonic() - t0
c1, r1 = cpu(), rx(); tell(b"e")
drop()
sha = hashlib.file_digest(open("/mnt/nfs/big.bin", "rb"), "sha256").hexdigest()
print("{mark}" + json.dumps({{"MB_s": n / 1e6 / s, "seconds": s, "bytes": n,
      "rx_bytes": r1 - r0, "busy": 1 - (c1[1] - c0[1]) / max(1, c1[0] - c0[0]),
      "sha256": sha}}), flush=True)
EOF
umount /mnt/nfs || umount -l /mnt/nfs || true
{python} -c "import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('{server}', 9999))"
"""


@contextlib.contextmanager
def veth_pair(offloads: bool = False) -> Iterator[tuple[str, str]]:
    """A host veth pair named with this run's prefix, up, with its offloads off (so that a
    raw socket hands the guest whole, checksummed frames; with them on the join carried
    the same 18 MB/s, so they are not what stalls it) unless `offloads`; deleted on exit."""
    a, b = f"{PREFIX}-a"[:15], f"{PREFIX}-b"[:15]
    with IPRoute() as ipr:
        ipr.link("add", ifname=a, kind="veth", peer=b)
        try:
            for name in (a, b):
                ipr.link("set", index=ipr.link_lookup(ifname=name)[0], state="up")
                if not offloads:
                    launch.run(["ethtool", "-K", name, "tx", "off", "rx", "off", "tso",
                                "off", "gso", "off", "gro", "off"], timeout=10,
                               what="ethtool")
            yield a, b
        finally:
            with contextlib.suppress(Exception):
                ipr.link("del", index=ipr.link_lookup(ifname=a)[0])


@contextlib.contextmanager
def tap_bridge() -> Iterator[tuple[str, str]]:
    """Two persistent host tap devices on a host bridge, all named with this run's
    prefix and up (for `lab/run --link TAP,transport=tap`); deleted on exit."""
    br, a, b = (f"{PREFIX}-{s}"[:15] for s in ("br", "a", "b"))
    with IPRoute() as ipr, contextlib.ExitStack() as undo:
        ipr.link("add", ifname=br, kind="bridge")
        undo.callback(lambda: ipr.link("del", index=ipr.link_lookup(ifname=br)[0]))
        for name in (a, b):
            launch.run(["ip", "tuntap", "add", "dev", name, "mode", "tap", "vnet_hdr"],
                       timeout=10, what="ip tuntap")
            undo.callback(lambda n=name: launch.run(["ip", "tuntap", "del", "dev", n,
                                                     "mode", "tap"], timeout=10,
                                                    what="ip tuntap"))
            ipr.link("set", index=ipr.link_lookup(ifname=name)[0],
                     master=ipr.link_lookup(ifname=br)[0], state="up")
        ipr.link("set", index=ipr.link_lookup(ifname=br)[0], state="up")
        yield a, b


# How the two kernels are joined on this host: lab/run --link picks the vector transport
# from the device (tap for a tap, raw for anything else).
JOINS = {"tap": tap_bridge, "veth": veth_pair}


def boot(argv: list[str], repo: str) -> dict[str, Any]:
    """Run one lab kernel (`lab/run ...`) here to its end: its output, exit code, the host
    CPU seconds it and its kernel used (rusage of the waited-for child tree) and where it
    ran. Called in a thread, or as a Dask task on a worker."""
    proc = subprocess.Popen(argv, cwd=repo, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = rc = os.waitstatus_to_exitcode(status)
    return {"out": out, "rc": rc, "cpu_s": usage.ru_utime + usage.ru_stime,
            "host": socket.gethostname(), "pid": os.getpid()}


class Kernel(threading.Thread):
    """`lab/run --link HOSTIF sh SCRIPT` in a thread, here or (with `dask` a client and
    `worker` its address) as a task on that Dask worker: its output, exit code, host CPU
    seconds and where it ran."""

    def __init__(self, link: str, script: Path, dask: Any = None,
                 worker: str | None = None) -> None:
        """Not started yet: start() boots the kernel on `link` running `script`."""
        super().__init__(daemon=True)
        self.argv = [str(LAB / "run"), "--timeout", "300", "--link", link, "sh", str(script)]
        self.dask, self.worker = dask, worker
        self.out, self.cpu_s, self.rc, self.where = "", 0.0, -1, ""

    def run(self) -> None:
        """Boot it and wait for its end (on the worker if given)."""
        if self.dask is None:
            res = boot(self.argv, str(REPO))
        else:
            res = self.dask.submit(boot, self.argv, str(REPO), workers=[self.worker],
                                   allow_other_workers=False, pure=False).result()
        self.out, self.rc, self.cpu_s = res["out"], res["rc"], res["cpu_s"]
        self.where = f"{res['host']}:{res['pid']}"


def boot_pair(join: Any, suffix: str, run: Path, dask: Any = None,
              workers: tuple[str | None, str | None] = (None, None)
              ) -> tuple[Kernel, Kernel, float]:
    """Boot the server's kernel (run/server.sh) and the client's (run/client.sh) on the two
    ends of `join` (a context manager yielding two host interfaces; suffix: the vector
    options after each), here or on the two Dask workers, and wait for both to end; the
    two kernels and the seconds from their boot to the last one's end."""
    with join as (a, b):
        start = time.monotonic()
        server = Kernel(a + suffix, run / "server.sh", dask, workers[0])
        client = Kernel(b + suffix, run / "client.sh", dask, workers[1])
        server.start()
        client.start()
        client.join()
        server.join()
        wall = time.monotonic() - start
    return server, client, wall


def limit(busy_server: float, busy_client: float) -> str:
    """What bound the read across the join: the busier kernel if it was busy (its CPU),
    else the join itself (both kernels mostly idle: they waited on it)."""
    if max(busy_server, busy_client) >= BUSY_LIMIT:
        return "server-cpu" if busy_server >= busy_client else "client-cpu"
    return "join"


def one_kernel() -> float:
    """The calibration read inside one kernel (MB/s): multi_cpu's, at one CPU."""
    return float(multi_cpu.calibration(1)["rate_MB_s"])


@contextlib.contextmanager
def dask_workers(scheduler: str | None) -> Iterator[tuple[Any, list[str | None]]]:
    """(a Dask client or None, the two workers' addresses or [None, None]): the server's
    kernel goes to the first worker, the client's to the second."""
    if scheduler is None:
        yield None, [None, None]
        return
    from distributed import Client

    # The scheduler and workers import `benchmarks.two_kernels` (run them with this
    # checkout on PYTHONPATH).
    with Client(scheduler, timeout="30s") as client:
        client.wait_for_workers(2, timeout=60)
        workers = sorted(client.scheduler_info()["workers"])
        yield client, workers[:2]


def _marked(server: Kernel, client: Kernel) -> dict[str, Any]:
    """The marked lines of both kernels' output (the read, the server's SHA-256, its busy
    share); exits with both outputs' tails when one is missing."""
    found: dict[str, Any] = {}
    for out in (server.out, client.out):
        for line in out.splitlines():
            for mark in (MARK, SHA, BUSY):
                if line.startswith(mark):
                    text = line[len(mark):].strip()
                    found[mark] = text if mark == SHA else json.loads(text)
    if len(found) < 3:
        sys.exit(f"two_kernels: the read across kernels failed (server exit {server.rc}: "
                 f"{server.out[-300:]!r}; client exit {client.rc}: {client.out[-300:]!r})")
    return found


def two_kernels(seconds: float, nconnect: int, link_options: str = "",
                scheduler: str | None = None, join: str = "tap") -> dict[str, Any]:
    """The read across two kernels: MB/s, each kernel's host CPU-s/s over the whole run
    and busy share during the read, the bytes that crossed the join, whether the file
    read back matched the server's, what limited it, and where each kernel ran."""
    run = REPO / "results" / f"{PREFIX}"
    run.mkdir(parents=True, exist_ok=True)
    ready = run / "ready"
    fmt = dict(server=SERVER_IP, client=CLIENT_IP, net="10.199.0.0", ready=ready,
               nconnect=nconnect, seconds=seconds, mark=MARK, sha=SHA, busy=BUSY,
               python=sys.executable)
    (run / "server.sh").write_text(SERVER.format(**fmt))
    (run / "client.sh").write_text(CLIENT.format(**fmt))
    suffix = f",{link_options}" if link_options else ""
    with dask_workers(scheduler) as (dask, workers):
        server, client, wall = boot_pair(JOINS[join](), suffix, run, dask,
                                         (workers[0], workers[1]))
    found = _marked(server, client)
    read, busy_server = found[MARK], float(found[BUSY]["busy"])
    return {"MB_s": float(read["MB_s"]), "bytes": int(read["bytes"]),
            "crossed_bytes": int(read["rx_bytes"]),
            "verified": read["sha256"] == found[SHA],
            "busy_server": busy_server, "busy_client": float(read["busy"]),
            "limit": limit(busy_server, float(read["busy"])),
            "cpu_s_per_s": (server.cpu_s / wall, client.cpu_s / wall),
            "where": (server.where, client.where)}


def main() -> None:
    """One kernel, then two, then the closing line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--nconnect", type=int, default=4)
    ap.add_argument("--link-options", default="",
                    help="the vector devices' options (lab/run --link HOSTIF,KEY=VALUE)")
    ap.add_argument("--scheduler", default=None,
                    help="run the two kernels as tasks on two workers of this Dask "
                         "scheduler")
    ap.add_argument("--join", choices=sorted(JOINS), default="tap",
                    help="tap: two host taps on a host bridge (default); veth: a host "
                         "veth pair, raw sockets (what stalled NFS, docs/multi-cpu.md)")
    ap.add_argument("--skip-one-kernel", action="store_true",
                    help="only the read across two kernels (ratio left out)")
    args = ap.parse_args()
    one = None if args.skip_one_kernel else one_kernel()
    if one is not None:
        print(f"one kernel: {one:.0f} MB/s", flush=True)
    two = two_kernels(args.seconds, args.nconnect, args.link_options, args.scheduler,
                      args.join)
    cpu_a, cpu_b = two["cpu_s_per_s"]
    print(f"two kernels: {two['MB_s']:.0f} MB/s (server kernel {cpu_a:.2f}, client kernel "
          f"{cpu_b:.2f} CPU-s/s over the whole run, boots included; busy during the read "
          f"{two['busy_server']:.2f} / {two['busy_client']:.2f}; "
          f"{two['crossed_bytes'] / 1e6:.0f} MB crossed the join for "
          f"{two['bytes'] / 1e6:.0f} MB read; verified={two['verified']}; "
          f"ran on {two['where'][0]} and {two['where'][1]})", flush=True)
    ratio = f"{two['MB_s'] / one:.2f}" if one else "n/a"
    print(f"TWO_KERNELS one_kernel_MB_s={one or 0:.0f} two_kernels_MB_s={two['MB_s']:.0f} "
          f"ratio={ratio} cpu_s_per_s={cpu_a:.2f}+{cpu_b:.2f} limit={two['limit']} "
          f"verified={two['verified']}")


if __name__ == "__main__":
    main()
