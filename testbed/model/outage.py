"""The expected cost of a fibre outage of D seconds to a training job reading over it.

While the span is down every packet is lost. The side with data or a request in flight
retransmits after its RTO (RTT + max(4 x RTT variance, TCP_RTO_MIN) on a steady path),
then after 2, 4, 8 ... RTOs (TCP_RTO_MAX at most): the first retransmission after the
outage ends gets through, and data flows again one RTT later (resume_wait_s after the
end). The sender then starts from its loss window (one segment) and slow-starts back to
the window the job's pre-event rate needs per connection: log2(W / MSS) RTTs, during
which it delivers about two windows, so it loses about ramp - 2 RTTs of full-rate time
(ramp_lost_s). The loader's queue hides the first queue_s of it: a compute-bound loader
(AU >= STALL_AU) holds `prefetch` batches read ahead, prefetch x compute of work; an
I/O-bound one holds nothing. So

    extra_s   = max(0, D + resume_wait_s + ramp_lost_s - queue_s)
    recover_s = resume_wait_s + ramp_s        (after the outage ends)

A staged copy reads nothing over the fibre ("local": nothing lost). FS-Cache serves the
data from the GPU site, but every open revalidates the file's attributes with the server
(close-to-open), a small request: it waits out the RTO backoff without a slow start.

limited_by names the largest part of what was lost: "queue_drained" (the outage outlasted
the queue: D - queue_s), "rto_backoff" (the wait for the backed-off retransmission),
"slow_start" (the ramp back to the window); "hidden" when the queue held it all, "local"
when nothing crossed the fibre.

Time dilation: TCP's timers run on the kernel's clock, which dilation does not slow: the
model works in real seconds (every emulated duration x k, RTO_MIN as the kernel has it)
and reports emulated ones (/ k), as the testbed measures them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from testbed import kernel

STALL_AU = 99.0  # at or above this AU the loader runs ahead: its queue is full
DATA = ("network", "metadata", "local")  # what crosses the fibre: data, attributes, nothing


@dataclass(frozen=True)
class Job:
    """What the job does before the outage (emulated units): the path's RTT, the time
    dilation k, each step's compute, batches read ahead, its AU, the bytes it reads per
    second, over how many TCP connections, at which MSS, and what crosses the fibre."""

    rtt_s: float
    time_scale: float
    compute_s: float
    prefetch: int
    au_pct: float
    read_Bps: float
    connections: int
    mss_bytes: int
    data: str = "network"


@dataclass(frozen=True)
class OutageCost:
    """The model's prediction (emulated seconds, see the module docstring)."""

    extra_s: float
    recover_s: float
    resume_wait_s: float
    ramp_s: float
    queue_s: float
    limited_by: str


def rto_s(rtt_s: float) -> float:
    """The first RTO of a steady path (real seconds): RTT + TCP_RTO_MIN, at most RTO_MAX."""
    return min(rtt_s + kernel.TCP_RTO_MIN_S, kernel.TCP_RTO_MAX_S)


def resume_s(outage_s: float, rtt_s: float) -> float:
    """When data flows again after an outage that began as a packet was sent (real
    seconds from its start): the first retransmission at or after its end, + one RTT."""
    rto, t = rto_s(rtt_s), 0.0
    while True:
        t += rto
        if t >= outage_s:
            return t + rtt_s
        rto = min(2 * rto, kernel.TCP_RTO_MAX_S)


def ramp_s(job: Job, rtt_s: float) -> float:
    """Slow start from the loss window to the window the pre-event rate needs per
    connection (real seconds; 0 for attribute requests or when one segment is enough)."""
    if job.data != "network" or job.read_Bps <= 0:
        return 0.0
    window = job.read_Bps * job.rtt_s / max(job.connections, 1)  # invariant under k
    segments = window / job.mss_bytes / kernel.TCP_LOSS_WINDOW
    return rtt_s * math.log2(segments) if segments > 1 else 0.0


def predict(outage_s: float, job: Job) -> OutageCost:
    """The cost of an outage of outage_s emulated seconds (see the module docstring)."""
    if job.data == "local":
        return OutageCost(0.0, 0.0, 0.0, 0.0, 0.0, "local")
    k = job.time_scale
    d, rtt = outage_s * k, job.rtt_s * k
    wait = resume_s(d, rtt) - d
    ramp = ramp_s(job, rtt)
    ramp_lost = max(0.0, ramp - 2 * rtt)
    queue = job.prefetch * job.compute_s * k if job.au_pct >= STALL_AU else 0.0
    extra = max(0.0, d + wait + ramp_lost - queue)
    parts = {"queue_drained": d - min(queue, d), "rto_backoff": wait,
             "slow_start": ramp_lost}
    limited = max(parts, key=parts.__getitem__) if extra > 0 else "hidden"
    return OutageCost(extra / k, (wait + ramp) / k, wait / k, ramp / k, queue / k, limited)
