"""Kernel NFS in namespaces: the storage site's nfsd and the GPU workers' mounts.

NfsServer   kernel nfsd bound to the storage host's namespace. Its control plane (the nfsd
            filesystem, exportfs, rpc.nfsd, rpc.mountd) runs in that network namespace AND a
            private mount namespace in which /etc/exports and /var/lib/nfs are bind-mounted
            from the run's own folder, so several runs never share export tables. Exports
            are restricted to the topology's subnet. Lifecycle: start -> wait ready (end of
            the shortened NFSv4 grace period) -> stop (threads to 0, exports flushed,
            mountd killed by PID) -> folder removed.
NfsMount    one worker's mount, made with `nsenter --net=<worker ns> mount -t nfs`: the RPC
            transport belongs to the worker's namespace (its traffic crosses the fibre)
            while the mount is visible to every process. Read-ahead is set on the mount's
            bdi; the options the kernel actually uses are read back from /proc/mounts.
            Unmount at teardown: plain, then (the client shut down first, see shutdown)
            forced and lazy, each bounded, so that open files or a dead server cannot
            hold it.

A server that stops serving (NfsServer.why_down) leaves a hard mount retrying for ever:
its readers wait in the kernel and a plain umount waits on the server. NfsMount.shutdown
fails every RPC of the mount at once (EIO), through the NFS client's per-mount sysfs
knob; measured on the lab kernel (UML 7.2.7) after `rpc.nfsd 0`: a reader blocked in
read() got EIO within 0.1 s and a plain umount then took 0.0 s. Kernels without the knob
(Debian 12's 6.1) keep the old behaviour: the loader's own bound, then a lazy unmount.

Tools (mount, umount, exportfs, rpc.nfsd, rpc.mountd) run through testbed.launch.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from testbed import launch
from testbed.errors import ServiceError
from testbed.launch import last_line as _last_line
from testbed.launch import ns_shell
from testbed.network import state as state_mod
from testbed.network.engine import Network
from testbed.network.namespace import in_namespace
from testbed.services import slot_table
from testbed.spec import MountSpec, NfsServerSpec
from testbed.topology import SUBNET

log = logging.getLogger(__name__)

NFS_PORT = 2049
READY_TIMEOUT_S = 30.0
UMOUNT_S = 15.0


# Printed by the setup script once it has ended the NFSv4 grace period itself: a server
# started in a fresh namespace has no client state to reclaim, so nothing is lost, and
# every site saves grace_s (10 s). Kernels without v4_end_grace (before 5.0) wait it out.
GRACE_ENDED = "apn-grace-ended"
# The kernel ends a grace period early only with client tracking active, which (without
# the legacy tracking, absent from newer kernels such as the lab's 7.2) needs nfsdcld: run
# it before rpc.nfsd, on this namespace's own rpc_pipefs and the run's own database, in
# mountd's process group (stopped with it). With an empty database nfsd skips the grace
# period; otherwise v4_end_grace ends it, asynchronously: poll until it reads Y. Without
# nfsdcld the kernel waits ~1 s for it, then serves the whole grace period.
NFSDCLD = (
    "if command -v nfsdcld >/dev/null; then "
    "mount -t rpc_pipefs rpc_pipefs /var/lib/nfs/rpc_pipefs; "
    "nfsdcld -F -p /var/lib/nfs/rpc_pipefs -s /var/lib/nfs/nfsdcld & fi; "
)
END_GRACE = (
    "if [ -e /proc/fs/nfsd/v4_end_grace ]; then "
    "echo Y > /proc/fs/nfsd/v4_end_grace 2>/dev/null || true; i=0; "
    "while [ \"$(cat /proc/fs/nfsd/v4_end_grace)\" != Y ] && [ $i -lt 40 ]; do "
    "sleep 0.05; i=$((i+1)); done; "
    f"[ \"$(cat /proc/fs/nfsd/v4_end_grace)\" != Y ] || echo {GRACE_ENDED}; fi; "
)


def _run(argv: list[str], timeout: float, what: str) -> subprocess.CompletedProcess[str]:
    """launch.run without the exit-code check: callers word their own error."""
    return launch.run(argv, timeout=timeout, what=what, check=False)


class NfsServer:
    """Kernel nfsd in `node`'s namespace exporting `export_dir` to the topology's subnet,
    read-only unless `writable` (workers that write checkpoints)."""

    def __init__(self, net: Network, node: str, export_dir: str | Path,
                 spec: NfsServerSpec | None = None, writable: bool = False) -> None:
        self.net = net
        self.writable = writable
        self.node = node
        self.export_dir = Path(export_dir)
        self.spec = spec or NfsServerSpec()
        self.ns_path = net.netns_path(node)
        self.dir = net.run_dir / f"nfsd-{node}"  # made by start() as a scratch folder
        self.proc: subprocess.Popen[Any] | None = None
        self.ready_at = 0.0

    @property
    def address(self) -> str:
        """The server's address (its host's)."""
        return self.net.address(self.node)

    def remote_path(self, vers: str) -> str:
        """What a client mounts: the NFSv4 pseudo-root, or the export path for v3."""
        return "/" if vers != "3" else str(self.export_dir)

    def __enter__(self) -> NfsServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _control(self, body: str) -> str:
        """A shell script run in the server's private mount namespace (binds first)."""
        return (f"set -e; mount --make-rslave / ; "
                f"mount --bind {self.dir}/exports /etc/exports; "
                f"mount --bind {self.dir}/lib /var/lib/nfs; "
                f"mount -t nfsd nfsd /proc/fs/nfsd; {body}")

    def _argv(self, script: str) -> list[str]:
        """argv running `script` in the server's network namespace, privately mounted."""
        return ns_shell(self.ns_path, script)

    def start(self) -> None:
        """Start nfsd, exportfs and mountd in the storage namespace and wait until nfsd
        listens (the NFSv4 grace period then still runs: see wait_ready).

        Raises ServiceError if the export path is missing or nfsd does not come up."""
        if not self.export_dir.is_dir():
            raise ServiceError(f"NFS export path {self.export_dir} does not exist")
        self._write_config()
        self.net.state.add_nfsd(self.net.namespace(self.node))
        self.net.callback(self._stop_nfsd)
        with open(self.dir / "mountd.log", "w") as log_file:
            argv = self._argv(self._control(self._setup_script()))
            self.proc = self.net.procs.popen_raw(argv, stdout=log_file,
                                                 stderr=subprocess.STDOUT)
        started = time.monotonic()
        self._wait_listening(started + READY_TIMEOUT_S)
        self.ready_at = started + self.spec.grace_s + 0.5
        log.info("nfsd in %s listening; grace period ends in %.1f s", self.node,
                 self.ready_at - time.monotonic())

    def _write_config(self) -> None:
        """The run's own /etc/exports and /var/lib/nfs, in a scratch folder of the run."""
        self.dir = self.net.scratch(f"nfsd-{self.node}")
        (self.dir / "lib" / "v4recovery").mkdir(parents=True, exist_ok=True)
        (self.dir / "lib" / "rpc_pipefs").mkdir(exist_ok=True)
        (self.dir / "lib" / "nfsdcld").mkdir(mode=0o700, exist_ok=True)
        for name in ("etab", "rmtab", "xtab"):
            (self.dir / "lib" / name).touch()
        # Read-only unless asked (workers read the training set; checkpoints are written);
        # fsid=0 makes the export the NFSv4 pseudo-root; no_root_squash so root-run loaders
        # read like the owner; restricted to the testbed's own subnet, never the world.
        access = "rw" if self.writable else "ro"
        opts = f"{access},fsid=0,no_subtree_check,no_root_squash,insecure"
        (self.dir / "exports").write_text(f"{self.export_dir} {SUBNET}({opts})\n")

    def _keep_under_run(self) -> str:
        """Shell: /run covered by a private tmpfs, with the export's top folder under /run
        (the run registry's, /run/apn-testbed) bound back in from a descriptor opened
        before (mount -c: not canonicalised, so the kernel follows the descriptor)."""
        cover = "mount -t tmpfs -o mode=0755,size=1m apn-rpcbind /run; "
        parts = self.export_dir.resolve().parts
        if len(parts) < 3 or parts[1] != "run":
            return cover
        top = shlex.quote(f"/run/{parts[2]}")
        return (f"exec 9<{top}; {cover}mkdir -p {top}; "
                f"mount -c --bind /proc/self/fd/9 {top}; exec 9<&-; ")

    def _version_flags(self) -> str:
        """rpc.nfsd/rpc.mountd flags that switch off the versions the spec does not serve."""
        vflags = [] if "3" in self.spec.versions else ["-N", "3"]
        vflags += [x for v in ("4.1", "4.2") if v not in self.spec.versions for x in ("-N", v)]
        return " ".join(vflags + ["--no-udp"])

    def _setup_script(self) -> str:
        """The shell script that configures and starts nfsd, then becomes rpc.mountd."""
        # NFSv3 clients find mountd and nfsd through the server's portmapper: a private
        # rpcbind in this namespace, its /run (socket, lock, state) a tmpfs of this mount
        # namespace only, so it never meets the host's rpcbind. It runs in mountd's process
        # group and is stopped with it. An export under /run is bound back into the new
        # /run (through a descriptor opened before it was covered): mountd answers every
        # version's lookups, and one it cannot see is "No such file or directory".
        rpcbind = (
            f"{self._keep_under_run()}rpcbind -f & "
            "i=0; while [ ! -S /run/rpcbind.sock ] && [ $i -lt 200 ]; do sleep 0.05; "
            "i=$((i+1)); done; [ -S /run/rpcbind.sock ] || { echo rpcbind did not start; "
            "exit 1; }; "
        ) if "3" in self.spec.versions else ""
        flags = self._version_flags()
        return (
            "echo 1048576 > /proc/fs/nfsd/max_block_size 2>/dev/null || true; "
            f"echo {self.spec.grace_s} > /proc/fs/nfsd/nfsv4gracetime; "
            f"echo {self.spec.lease_s} > /proc/fs/nfsd/nfsv4leasetime; "
            "exportfs -r; "
            f"{rpcbind}{NFSDCLD}"
            f"rpc.nfsd {flags} {self.spec.threads}; "
            f"{END_GRACE}"
            f"exec rpc.mountd -F {flags}"
        )

    def _wait_listening(self, deadline: float) -> None:
        """Poll until nfsd listens on its port; ServiceError if mountd's script died or
        the deadline passed (with the log's last line)."""
        assert self.proc is not None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServiceError(f"nfsd in {self.node} failed to start: "
                                   f"{self._log_tail()}")
            if self._listening():
                return
            time.sleep(0.1)
        raise ServiceError(f"nfsd in {self.node} is not listening on port {NFS_PORT} "
                           f"after {READY_TIMEOUT_S:g} s: {self._log_tail()}")

    def _log_tail(self) -> str:
        try:
            lines = (self.dir / "mountd.log").read_text().strip().splitlines()
        except OSError:
            return "(no log)"
        return lines[-1] if lines else "(empty log)"

    def _listening(self) -> bool:
        with in_namespace(self.net.namespace(self.node)):
            text = Path("/proc/net/tcp").read_text() + Path("/proc/net/tcp6").read_text()
        return any(line.split()[1].endswith(f":{NFS_PORT:04X}") and line.split()[3] == "0A"
                   for line in text.splitlines()[1:] if len(line.split()) > 3)

    def wait_ready(self) -> None:
        """Block until the NFSv4 grace period is over (opens would stall until then)."""
        delay = self.ready_at - time.monotonic()
        if delay > 0 and not self._grace_ended():
            log.info("waiting up to %.1f s for the NFSv4 grace period to end", delay)
        while time.monotonic() < self.ready_at and not self._grace_ended():
            time.sleep(0.05)
        self.ready_at = min(self.ready_at, time.monotonic())

    def _grace_ended(self) -> bool:
        """Whether the setup script ended the grace period itself (GRACE_ENDED)."""
        try:
            return GRACE_ENDED in (self.dir / "mountd.log").read_text(errors="replace")
        except OSError:
            return False

    def threads(self) -> int:
        """nfsd threads running in this namespace, read from the kernel."""
        proc = _run(self._argv(self._control("cat /proc/fs/nfsd/threads")), 30, "nfsd threads")
        if proc.returncode != 0:
            raise ServiceError(f"cannot read nfsd threads in {self.node}: {_last_line(proc)}")
        return int(proc.stdout.strip() or 0)

    def portlist(self) -> list[str]:
        """nfsd's listeners in this namespace as the kernel lists them ("tcp 2049", ...)."""
        proc = _run(self._argv(self._control("cat /proc/fs/nfsd/portlist")), 30,
                    "nfsd portlist")
        if proc.returncode != 0:
            raise ServiceError(f"cannot read nfsd's portlist in {self.node}: "
                               f"{_last_line(proc)}")
        return [line.strip() for line in proc.stdout.splitlines() if line.strip()]

    def listen(self, transport: str, port: int) -> list[str]:
        """Add a listener (e.g. "rdma", 20049: NFS over RDMA, needs the rpcrdma module and
        an RDMA device in this namespace) and return the portlist read back."""
        if transport not in ("tcp", "rdma") or not 0 < port < 65536:
            raise ServiceError(f"nfsd listener {transport} {port}: transport must be tcp or "
                               "rdma and port 1-65535")
        if f"{transport} {port}" not in self.portlist():
            proc = _run(self._argv(self._control(
                f"echo '{transport} {port}' > /proc/fs/nfsd/portlist")), 30,
                f"nfsd listen {transport} {port}")
            if proc.returncode != 0:
                raise ServiceError(f"nfsd in {self.node} cannot listen on {transport} "
                                   f"{port}: {_last_line(proc)}")
        return self.portlist()

    def why_down(self) -> str | None:
        """None while nfsd serves (listens on its port in the storage namespace); else
        why not, naming the server. Reads the namespace's TCP table in this process (no
        tool started), so a watch may ask every second; call it from one thread at a time
        (it enters the namespace)."""
        if self._listening():
            return None
        return (f"nfsd in {self.node} ({self.net.namespace(self.node)}) stopped serving: "
                f"nothing listens on port {NFS_PORT}")

    def kill(self) -> None:
        """Stop serving abruptly (threads to 0), as a crashed server would."""
        proc = _run(self._argv(self._control("rpc.nfsd 0")), 30, "rpc.nfsd 0")
        if proc.returncode != 0:
            raise ServiceError(f"cannot stop nfsd in {self.node}: {_last_line(proc)}")

    def stop(self) -> None:
        """Threads to 0 and exports flushed while mountd still answers, then mountd."""
        self._stop_nfsd()
        if self.proc is not None:
            self.net.procs.stop(self.proc)
            self.proc = None

    def _stop_nfsd(self) -> None:
        ns = self.net.namespace(self.node)
        if ns not in self.net.state.nfsd_namespaces:
            return
        stop_nfsd(self.ns_path, self.dir)
        self.net.state.drop_nfsd(ns)



def stop_nfsd(ns_path: str, run_dir: Path, seconds: float = 45.0) -> None:
    """Threads to 0 and exports flushed in the namespace at ns_path (also used by clean),
    within `seconds`."""
    if not Path(ns_path).exists():
        return
    binds = ""
    if (run_dir / "exports").exists():
        binds = (f"mount --bind {run_dir}/exports /etc/exports; "
                 f"mount --bind {run_dir}/lib /var/lib/nfs; ")
    part = max(1, int(seconds / 3))
    script = (f"mount --make-rslave / ; {binds}mount -t nfsd nfsd /proc/fs/nfsd && "
              f"echo stopping >&2; timeout {part} rpc.nfsd 0; echo unexporting >&2; "
              f"timeout {part} exportfs -au; echo flushing >&2; timeout {part} exportfs -f")
    proc = _run(ns_shell(ns_path, script), seconds + 5, "stop nfsd")
    log.debug("stop nfsd: %s", proc.stderr.strip().replace("\n", "; "))
    if proc.returncode != 0:
        log.warning("stopping nfsd in %s: %s", ns_path, _last_line(proc))


def stop_dead_nfsd(st: state_mod.RunState, seconds: float) -> None:
    """Stop nfsd (threads to 0, exports flushed) in each namespace a dead run ran it in:
    `testbed clean`'s step for the services layer (testbed.cleanup)."""
    for ns in st.nfsd_namespaces:
        node = ns.split("-", 1)[1]
        run_dir = Path(state_mod.STATE_DIR) / st.prefix / f"nfsd-{node}"
        stop_nfsd(f"/run/netns/{ns}", run_dir, seconds)


UDEV_CONTROL = Path("/run/udev/control")


def settle_udev(timeout_s: int = 30) -> None:
    """Wait until udev has handled every queued kernel event, if udev runs here (a lab
    kernel started without it has nothing to wait for)."""
    if not UDEV_CONTROL.exists() or shutil.which("udevadm") is None:
        return
    proc = _run(["udevadm", "settle", f"--timeout={timeout_s}"], timeout_s + 10,
                "udevadm settle")
    if proc.returncode != 0:
        log.warning("udevadm settle: %s", _last_line(proc))


def bdi_of(path: Path) -> Path:
    """The backing-device folder in sysfs of the filesystem holding `path`."""
    st = os.stat(path)
    return Path(f"/sys/class/bdi/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")


def mount_options(path: Path) -> dict[str, str]:
    """The options the kernel reports for the mount at `path` (from /proc/mounts)."""
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[1] == str(path) and fields[2].startswith("nfs"):
            out: dict[str, str] = {"fstype": fields[2], "source": fields[0]}
            for opt in fields[3].split(","):
                k, _, v = opt.partition("=")
                out[k] = v
            return out
    raise ServiceError(f"{path} is not an NFS mount")


def mount_rpc_stats(path: Path) -> dict[str, dict[str, int]]:
    """Per-operation RPC counters of the NFS mount at `path` (/proc/self/mountstats):
    op -> ops, transmissions, timeouts, bytes_sent, bytes_recv, queue_ms, rtt_ms,
    execute_ms (cumulative), plus "xprt" -> the transport's sends/recvs/backlog."""
    names = ("ops", "trans", "timeouts", "bytes_sent", "bytes_recv", "queue_ms", "rtt_ms",
             "execute_ms")
    out: dict[str, dict[str, int]] = {}
    mine = False
    for line in Path("/proc/self/mountstats").read_text().splitlines():
        if line.startswith("device "):
            fields = line.split()
            mine = len(fields) > 4 and fields[4] == str(path)
            continue
        if not mine:
            continue
        head, _, rest = line.strip().partition(":")
        values = rest.split()
        if head.isupper() and values and all(v.isdigit() for v in values[:8]):
            out[head] = {n: int(v) for n, v in zip(names, values)}
    if not out:
        raise ServiceError(f"{path}: no NFS statistics in /proc/self/mountstats")
    return out


class NfsMount:
    """`worker` mounts `server`'s export at a mount point of the run's own."""

    def __init__(self, net: Network, worker: str, server: NfsServer,
                 spec: MountSpec | None = None, mountpoint: str | Path | None = None,
                 subdir: str = "") -> None:
        self.net = net
        self.subdir = subdir.strip("/")
        self.worker = worker
        self.server = server
        self.spec = spec or MountSpec()
        self.path = Path(mountpoint) if mountpoint else net.run_dir / f"mnt-{worker}"
        self.mounted = False

    def __enter__(self) -> NfsMount:
        self.mount()
        return self

    def __exit__(self, *exc: object) -> None:
        self.unmount()

    def mount(self) -> None:
        """Mount from the worker's namespace (waits out the server's grace period first)
        and apply the read-ahead. The mount point is recorded in the run registry BEFORE
        mount runs, so a crash at any moment leaves nothing `testbed clean` cannot find.

        Raises ServiceError with the kernel's reason when the mount is refused."""
        remote = self.server.remote_path(self.spec.vers).rstrip("/")
        source = f"{self.server.address}:{remote}/{self.subdir}"
        # A cache volume per worker, as each GPU server would have its own cache.
        opts = self.spec.options(fsc_tag=f"{self.net.prefix}-{self.worker}")
        argv = self.net.procs.cmd(self.worker, ["mount", "-t", "nfs", "-o", opts, source,
                                          str(self.path)])
        self.server.wait_ready()
        self._set_client_identifier()
        self.net.state.add_mount(str(self.path))
        self.mounted = True
        self.path.mkdir(parents=True, exist_ok=True)
        self.net.callback(self.unmount)
        # A soft mount gives up by itself; a hard one may retry for a long time.
        with slot_table.held(self.net.state, self.spec.rpc_slots):  # read as it is made
            proc = _run(argv, 120 if self.spec.hard else 45,
                        f"mount {source} on {self.worker}")
        if proc.returncode != 0:
            refused = f"mount {source} on {self.worker} refused: {_last_line(proc)}"
            try:
                self.unmount()
            except ServiceError as exc:  # the refusal is the news, not its leftovers
                log.warning("%s; then %s", refused, exc)
            raise ServiceError(refused)
        if self.spec.read_ahead_kb is not None:
            self.set_read_ahead(self.spec.read_ahead_kb)

    def _set_client_identifier(self) -> None:
        """Give this worker's network namespace its own NFSv4 client identity. Worker
        namespaces share the host's name, so without it every worker presents the same
        client owner from a different address: the server takes each EXCHANGE_ID for a
        reboot of the same client and drops the others' state, and at a distance the
        workers stall for seconds or hang (measured: 2 workers at 3,000 km fell to 25 %
        AU, 4 never finished). The identifier lives in the namespace's sysfs view
        (kernel >= 5.18) and goes with the namespace."""
        _run(["modprobe", "-q", "nfsv4"], 30, "load nfsv4")
        ident = f"apn-testbed-{self.net.prefix}-{self.worker}"
        f = "/sys/fs/nfs/net/nfs_client/identifier"
        script = (f"mount -t sysfs sysfs /sys && [ -e {f} ] || exit 3; "
                  f"[ \"$(cat {f})\" = '(null)' ] && echo {ident} > {f}; "
                  f"[ \"$(cat {f})\" != '(null)' ]")
        proc = _run(ns_shell(self.net.netns_path(self.worker), script), 30,
                    "NFS client identifier")
        if proc.returncode != 0:
            log.warning("no per-namespace NFS client identifier in %s (kernel < 5.18?): "
                        "several workers will share one NFSv4 client identity",
                        self.worker)

    def set_read_ahead(self, kib: int) -> None:
        """Write read_ahead_kb on the mount's bdi once udev is done with it, and read it back.

        nfs-utils >= 2.6 (Debian 12's nfs-common) installs a udev rule (99-nfs.rules) that
        runs nfsrahead for every new NFS bdi and writes the configured default read-ahead
        (128 KiB unless /etc/nfs.conf [nfsrahead] says otherwise). udev does that after
        mount(8) has returned, so on a system running udev (the Vagrant VM) it overwrote
        our value: the tuned mount read back 128. Where udev runs we wait for its queue to
        drain first (udevadm settle); the read-back catches any other writer."""
        settle_udev()
        ra = bdi_of(self.path) / "read_ahead_kb"
        try:
            ra.write_text(str(kib))
        except OSError as exc:
            raise ServiceError(f"read_ahead_kb={kib} on {self.path}: {exc.strerror}") from None
        got = self.read_ahead_kb()
        if got != kib - kib % 4:  # the kernel keeps whole 4 KiB pages
            raise ServiceError(f"read_ahead_kb on {self.path} ({ra.parent.name}) reads back "
                               f"{got}, not {kib}: something else sets it")

    def read_ahead_kb(self) -> int:
        """The mount's read-ahead as the kernel reports it (KiB)."""
        return int((bdi_of(self.path) / "read_ahead_kb").read_text())

    def options(self) -> dict[str, str]:
        """Mount options as the kernel reports them, plus the bdi's read-ahead."""
        opts = mount_options(self.path)
        opts["read_ahead_kb"] = str(self.read_ahead_kb())
        return opts

    def rpc_stats(self) -> dict[str, dict[str, int]]:
        """The mount's per-operation RPC counters (see mount_rpc_stats)."""
        return mount_rpc_stats(self.path)

    def connections(self) -> int:
        """Established TCP connections from this worker to the server's NFS port."""
        with in_namespace(self.net.namespace(self.worker)):
            text = Path("/proc/net/tcp").read_text()
        n = 0
        for line in text.splitlines()[1:]:
            f = line.split()
            if len(f) > 3 and f[2].endswith(f":{NFS_PORT:04X}") and f[3] == "01":
                n += 1
        return n

    def shutdown(self) -> bool:
        """Fail every outstanding and later RPC of this mount at once (EIO): the NFS
        client's per-mount knob /sys/fs/nfs/<major:minor>/shutdown, which the kernel lists
        in the sysfs view of the worker's namespace (where the mount's client lives).
        What ends a hard mount's wait on a server that died (see the module docstring).
        False where the kernel has no such knob or the mount is gone; never raises."""
        dev = _device_of(self.path)
        if dev is None:
            return False
        knob = f"/sys/fs/nfs/{dev}/shutdown"
        script = f"mount -t sysfs sysfs /sys && [ -e {knob} ] || exit 3; echo 1 > {knob}"
        try:
            proc = _run(ns_shell(self.net.netns_path(self.worker), script), 30,
                        f"shut down the NFS client of {self.path}")
        except ServiceError as exc:
            log.warning("%s", exc)
            return False
        if proc.returncode != 0:
            log.warning("cannot shut down the NFS client of %s (%s): %s", self.path,
                        "no shutdown knob in this kernel" if proc.returncode == 3
                        else "error", _last_line(proc))
            return False
        log.info("NFS client of %s shut down: its RPCs fail from now on", self.path)
        return True

    def unmount(self) -> None:
        """Unmount and remove the mount point; idempotent. A plain umount first; if it
        fails or overruns UMOUNT_S (files still open; a dead server's hard mount waits on
        it), the client is shut down (shutdown) and forced, then lazy unmounts follow,
        each bounded. Raises ServiceError if every attempt failed."""
        if not self.mounted:
            return
        if _is_mounted(self.path):
            for flags in ([], ["-f"], ["-l"]):
                why = self._umount(flags)
                if not why or not _is_mounted(self.path):  # a killed umount may finish
                    break
                log.info("umount %s %s: %s", " ".join(flags), self.path, why)
                if not flags:
                    self.shutdown()
            else:
                raise ServiceError(f"cannot unmount {self.path}: {why}")
        self.mounted = False
        self.net.state.drop_mount(str(self.path))
        try:
            self.path.rmdir()
        except OSError:
            pass

    def _umount(self, flags: list[str]) -> str:
        """One bounded umount attempt: "" when it worked, else why not (a hung umount is
        killed after UMOUNT_S and reported, never raised)."""
        try:
            proc = _run(["umount", *flags, str(self.path)], UMOUNT_S, f"umount {self.path}")
        except ServiceError as exc:
            return str(exc)
        return "" if proc.returncode == 0 else _last_line(proc)


def _device_of(path: Path) -> str | None:
    """The major:minor of the mount at `path` (/proc/self/mountinfo, read without
    touching the path, so a dead server cannot hang it); None if nothing is mounted."""
    found = None
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if len(fields) > 4 and fields[4] == str(path):
            found = fields[2]  # the last one: the mount on top
    return found


def _is_mounted(path: Path) -> bool:
    """True when `path` is a mount point in /proc/mounts (read without touching the path,
    so a dead server cannot hang the check)."""
    target = str(path)
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) > 1 and fields[1] == target:
            return True
    return False
