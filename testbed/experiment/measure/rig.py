"""A rig: one running testbed (network, dataset, nfsd) that a run of consecutive points
shares (named apart from the topology's storage and GPU sites, which a rig contains).

The points of a plan that agree on every knob that cannot change live (topology and
workers, MTU, nfsd, the dataset) share one: the network built with the first point's
fibres, the training set generated on the storage host and the kernel nfsd serving it.
Each point then sets its own fibres and its host profile's access links live
(Rig.apply). A Rig is a context manager: its
exit tears all of it down, in reverse (the Network's own stack).
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from testbed import labkernel, model, procfs, topology
from testbed.experiment.plan.plan import Point
from testbed.network import access, tcp_memory
from testbed.network.engine import Network
from testbed.network.tc import Readback
from testbed.services.nfs import NfsServer
from testbed.services.rdma import rdma_site

log = logging.getLogger(__name__)


def loss_seed(point: Point, rep: int, link: str) -> int:
    """netem's seed for one fibre in one repetition of a point: from the point's `seed`
    knob, the repetition and the fibre's name only, so that every setting a run compares
    (time scale, mount, distance, loss) meets the same draw of losses and jitter and
    differs by the setting alone, while each repetition draws afresh."""
    text = f"{point.value('seed')}|{rep}|{link}".encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")


def counters(r: Readback) -> tuple[int, int, int]:
    """A direction's (netem drops, bytes sent, htb overlimits), as the kernel counts them."""
    return r.netem_drops, r.sent_bytes, r.htb_overlimits


def build_topology(point: Point) -> topology.SiteTopo:
    """The point's topology (its workers), every link at its MTU, its fibres as set."""
    topo = topology.build(point.topology, point.topo_params)
    topology.set_mtu(topo, int(point.value("mtu")))
    for name, spec in point.fibres:
        topology.set_fibre(topo, name, spec)
    return topo


@dataclass(frozen=True)
class MachineSample:
    """What the machine has done so far, read before and after a measurement: the CPU's
    busy and total jiffies, the host meter (labkernel.meter_sample: lab/run's, or this
    machine's own steal outside a lab kernel) and how often the hosts' TCP met the
    kernel's memory pressure."""

    cpu: tuple[float, float]
    host: labkernel.HostSample
    pressures: int

    def since(self, before: MachineSample) -> tuple[float, dict[str, float], int]:
        """Between `before` and this sample: the CPU's busy share (%), the host meter's
        host_cpu_pct, host_wait_pct and host_steal_pct (NaN where unknown) and the
        memory pressures met."""
        return (procfs.busy_pct(before.cpu, self.cpu),
                labkernel.host_share(before.host, self.host), self.pressures - before.pressures)


class Rig:
    """Network + dataset + nfsd for the points of one group (see the module docstring)."""

    def __init__(self, point: Point, writable: bool = False,
                 fill: Callable[[Point, Path], None] | None = None) -> None:
        """The point's topology and network, not started yet (see start). The export is
        filled by `fill` (default: the point's training set) and served read-only unless
        `writable` (checkpoints: experiment.kinds)."""
        self.group = point.group
        self.point = point
        self.dataset = point.dataset
        self.writable = writable
        self.fill = fill or (lambda p, folder: p.dataset.generate(folder))
        self.server_spec = point.server
        self.topo = build_topology(point)
        self.net = Network(self.topo)
        self.server: NfsServer | None = None
        self.dataset_s = 0.0
        self.rdma = False

    @property
    def workers(self) -> list[str]:
        """The GPU workers' host names."""
        return topology.worker_hosts(self.topo)

    def __enter__(self) -> Rig:
        """The rig, started."""
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        """Tear it all down."""
        self.close()

    def start(self) -> None:
        """Build the network, generate the dataset on the storage host, start nfsd."""
        self.net.state.set_phase("network")
        self.net.start()
        try:
            self._serve()
        except BaseException:
            self.net.stop()
            raise

    def _serve(self) -> None:
        """The training set in a scratch folder of the run (tmpfs: exportable), and nfsd
        in the storage host's namespace serving it."""
        data = self.net.scratch("dataset")
        t0 = time.monotonic()
        self.fill(self.point, data)
        self.dataset_s = time.monotonic() - t0
        log.info("export filled in %.1f s", self.dataset_s)
        self.net.state.set_phase("nfsd")
        storage = topology.storage_hosts(self.topo)[0]
        self.server = self.net.enter(NfsServer(self.net, storage, data, self.server_spec,
                                               writable=self.writable))
        self.server.wait_ready()  # the NFSv4 grace period: part of the rig's start-up

    def close(self) -> None:
        """Tear everything down (idempotent)."""
        self.net.stop()

    def apply(self, point: Point, rep: int = 0) -> None:
        """Put every fibre into the point's state (live; restates every parameter, netem
        reseeded for this repetition), the hosts' route timers at the point's time scale
        and ACK policy, their loss probes, and their congestion control (the point's mounts are fresh: their
        connections start with it)."""
        self.net.tcp.buffer_override = point.tcp_buffer_bytes
        for name, spec in point.fibres:
            self.net.set_fibre_spec(name, spec.replace(loss_seed=loss_seed(point, rep, name)),
                                    restate=True)
        self.net.tcp.set_buffers(point.tcp_buffer_bytes)
        self.net.tcp.set_time_scale(point.time_scale)
        self.net.tcp.set_delayed_ack(point.delayed_ack)
        self.net.tcp.set_loss_probe(point.loss_probe)
        self.net.tcp.set_slow_start_after_idle(point.slow_start_after_idle)
        self.net.tcp.set_congestion(point.congestion)
        self._shape_hosts(point)
        if point.mount.transport == "rdma":
            self._enable_rdma()

    def _shape_hosts(self, point: Point) -> None:
        """Every worker's access link shaped as the point's host profile allows
        (network.access; nothing where no limit can bind below the worker's line)."""
        mtu = int(point.value("mtu"))
        lines = {w: min((point.fibre(n).rate_mbit for n, _ in
                         topology.path_fibres(self.topo, w)), default=math.inf)
                 for w in self.workers}
        access.shape_hosts(self.net, point.host, point.mount.transport,
                           model.payload_share(mtu, point.mount.transport), lines,
                           self.net.tcp.buffer_bytes, mtu)

    def _enable_rdma(self) -> None:
        """Soft-RoCE on the storage host and every worker, nfsd listening on RDMA: once per
        rig, the first time a point mounts over RDMA (undone with the network). Fails
        with the reason on a kernel whose soft-RoCE cannot live in a namespace."""
        if self.rdma:
            return
        assert self.server is not None
        rdma_site(self.net, self.server, self.workers)
        self.rdma = True

    def fibre_readback(self) -> dict[str, Readback]:
        """Per fibre, its storage-to-GPU direction as the kernel reports it: counters
        (see counters()) and netem's seed (None: this kernel keeps none)."""
        return {name: self.net.read_fibre(a, b)[0]
                for name, (a, b) in self.net.fibre_names().items()}

    def machine(self) -> MachineSample:
        """The machine's counters now (MachineSample; a difference in TCP's memory
        pressures marks a measurement "tcpmem")."""
        return MachineSample(procfs.cpu_times(), labkernel.meter_sample(),
                             tcp_memory.total_pressures(self.net.namespace(h)
                                                        for h in self.net.hosts))

    def describe(self) -> dict[str, Any]:
        """What this rig is, for logs: prefix, group knobs."""
        return {"prefix": self.net.prefix, **dict(self.group)}
