"""Benchmark (host side): NFS across two lab kernels joined through the host, next to NFS
inside one: can a point spread over several kernels carry more than one kernel's CPU?

    .venv/bin/python -m benchmarks.two_kernels [--seconds 8] [--nconnect 4]

Makes a host veth pair (named apn2k-<pid>-a/-b, removed on exit), boots one user-mode
Linux kernel on each end (`lab/run --link HOSTIF`: UML's vector transport on a raw
socket), starts kernel nfsd exporting a 256 MiB file from tmpfs in the first, mounts it
(NFSv4.2, nconnect, 16 MiB read-ahead) in the second and reads it cold, pass after pass,
as the calibration behind `time_scale = "auto"` does inside one kernel
(testbed/experiment/resolve/dilation.py). Then the same read inside one kernel
(`benchmarks.multi_cpu --calibrate-here`). Prints MB/s and the host CPU each kernel used,
and closes with

    TWO_KERNELS one_kernel_MB_s=<x> two_kernels_MB_s=<y> ratio=<y/x> cpu_s_per_s=<a>+<b>

No fibre (no netem) between the kernels: this measures what the join itself carries.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

from pyroute2 import IPRoute

from benchmarks import multi_cpu
from testbed import launch
from testbed.paths import LAB, REPO

PREFIX = f"apn2k-{os.getpid()}"
SERVER_IP, CLIENT_IP = "10.199.0.1", "10.199.0.2"
MARK = "TWO_KERNELS_READ "

SERVER = r"""
set -e
ip link set vec0 up; ip addr add {server}/24 dev vec0
mkdir -p /export /var/lib/nfs/v4recovery; touch /var/lib/nfs/etab /var/lib/nfs/rmtab
mount -t tmpfs -o size=400m export /export
dd if=/dev/zero of=/export/big.bin bs=1M count=256 status=none
echo "/export {net}/24(ro,fsid=0,no_subtree_check,no_root_squash,insecure)" > /etc/exports
mount -t nfsd nfsd /proc/fs/nfsd
echo 1048576 > /proc/fs/nfsd/max_block_size
echo 10 > /proc/fs/nfsd/nfsv4gracetime; echo 10 > /proc/fs/nfsd/nfsv4leasetime
exportfs -r
rpc.nfsd -N 3 --no-udp 8
rpc.mountd -N 3 --no-udp -F &
echo Y > /proc/fs/nfsd/v4_end_grace 2>/dev/null || true
touch {ready}
{python} -c "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('{server}', 9999)); s.settimeout(600); s.recv(1)"
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
import json, os, time
def drop():
    with open("/proc/sys/vm/drop_caches", "w") as fh: fh.write("3")
buf = bytearray(1 << 20); n = 0; t0 = time.monotonic()
while time.monotonic() - t0 < {seconds}:
    drop()
    with open("/mnt/nfs/big.bin", "rb", buffering=0) as fh:
        while (got := fh.readinto(buf)):
            n += got
s = time.monotonic() - t0
print("{mark}" + json.dumps({{"MB_s": n / 1e6 / s, "seconds": s}}), flush=True)
EOF
umount /mnt/nfs
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


class Kernel(threading.Thread):
    """`lab/run --link HOSTIF sh SCRIPT` in a thread: its output, and the host CPU
    seconds it and its kernel used (rusage of the waited-for child tree)."""

    def __init__(self, link: str, script: Path) -> None:
        """Not started yet: start() boots the kernel on `link` running `script`."""
        super().__init__(daemon=True)
        self.argv = [str(LAB / "run"), "--timeout", "300", "--link", link, "sh", str(script)]
        self.out, self.cpu_s, self.rc = "", 0.0, -1

    def run(self) -> None:
        """Start it, read its output to the end, reap it by its PID with its rusage."""
        proc = subprocess.Popen(self.argv, cwd=REPO, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        self.out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = self.rc = os.waitstatus_to_exitcode(status)
        self.cpu_s = usage.ru_utime + usage.ru_stime


def one_kernel() -> float:
    """The calibration read inside one kernel (MB/s): multi_cpu's, at one CPU."""
    return float(multi_cpu.calibration(1)["rate_MB_s"])


def two_kernels(seconds: float, nconnect: int) -> tuple[float, float, float]:
    """The read across two kernels: (MB/s, server kernel CPU-s/s, client kernel CPU-s/s)."""
    run = REPO / "results" / f"{PREFIX}"
    run.mkdir(parents=True, exist_ok=True)
    ready = run / "ready"
    fmt = dict(server=SERVER_IP, client=CLIENT_IP, net="10.199.0.0", ready=ready,
               nconnect=nconnect, seconds=seconds, mark=MARK,
               python=sys.executable)
    (run / "server.sh").write_text(SERVER.format(**fmt))
    (run / "client.sh").write_text(CLIENT.format(**fmt))
    with veth_pair() as (a, b):
        start = time.monotonic()
        server, client = Kernel(a, run / "server.sh"), Kernel(b, run / "client.sh")
        server.start()
        client.start()
        client.join()
        server.join()
        wall = time.monotonic() - start
    for line in client.out.splitlines():
        if line.startswith(MARK):
            rate = float(json.loads(line[len(MARK):])["MB_s"])
            return rate, server.cpu_s / wall, client.cpu_s / wall
    sys.exit(f"two_kernels: the read across kernels failed (server exit {server.rc}: "
             f"{server.out[-300:]!r}; client exit {client.rc}: {client.out[-300:]!r})")


def main() -> None:
    """One kernel, then two, then the closing line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--nconnect", type=int, default=4)
    args = ap.parse_args()
    one = one_kernel()
    print(f"one kernel: {one:.0f} MB/s", flush=True)
    two, cpu_a, cpu_b = two_kernels(args.seconds, args.nconnect)
    print(f"two kernels: {two:.0f} MB/s (server kernel {cpu_a:.2f}, client kernel "
          f"{cpu_b:.2f} CPU-s/s over the whole run, boots included)", flush=True)
    print(f"TWO_KERNELS one_kernel_MB_s={one:.0f} two_kernels_MB_s={two:.0f} "
          f"ratio={two / one:.2f} cpu_s_per_s={cpu_a:.2f}+{cpu_b:.2f}")


if __name__ == "__main__":
    main()
