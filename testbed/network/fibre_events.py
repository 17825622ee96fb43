"""Fibre events played live on a running network: a span down, a reroute, a loss burst or a
rate change (testbed.spec.EventSpec), at planned times into a measured window.

EventPlayer  a thread of its own that, once begin(t0) says the window started, puts every
             span direction the event takes into its event state at each planned start
             and back at each planned end (tc.change on the running htb + netem tree: no
             packets flushed, every parameter restated), reads each change back from the
             kernel and records when it held; on stop, on an error and on exit, every
             direction still in its event state is put back
Applied      one change as the kernel reported it: planned and effective time, the
             direction's loss, delay and rate read back, and whether they are what was
             asked

Times are real seconds after the window's start (a dilated point's events are k times
longer and later: EventSpec.real_times). The player opens its own netlink sockets in the
spans' namespaces: the engine's are used by the measuring thread meanwhile.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from pyroute2 import IPRoute

from testbed.network import tc
from testbed.network.engine import Network
from testbed.network.namespace import ns_iproute
from testbed.spec import Direction, EventSpec, FibreSpec

log = logging.getLogger(__name__)
JOIN_S = 30.0  # the longest an exit waits for the player's thread (a netlink call or two)


@dataclass(frozen=True)
class Applied:
    """One change of one span direction, as read back (see the module docstring)."""

    span: str
    forward: bool
    occurrence: int
    state: str             # "event" (the event's state) or "restored"
    planned_s: float       # real seconds after the window's start
    applied_s: float       # real seconds after the window's start, once read back
    loss_pct: float
    delay_ms: float        # real (dilated) one-way delay
    rate_mbit: float       # real (dilated) rate
    matches: bool          # the readback is what was asked
    netem_drops: int = 0   # the direction's netem drop counter then (the event's own drops
                           # are the difference between a restore and its event)


def matches(asked: Direction, got: tc.Readback) -> bool:
    """Whether a readback holds what a direction asked for: loss, delay (to the
    microsecond netem keeps) and rate (htb's rate table rounds: within 1 %)."""
    return (abs(got.loss_pct - asked.loss_pct) < 1e-3
            and abs(got.delay_ms - asked.delay_ms) < 0.01
            and math.isclose(got.rate_mbit, asked.rate_mbit, rel_tol=0.01))


@dataclass(frozen=True)
class _End:
    """One sending end of a span: where it is, its normal and its event state."""

    span: str
    namespace: str
    ifname: str
    forward: bool
    normal: Direction
    during: Direction


class EventPlayer:
    """Plays `event` on the spans named in `spans` (name -> spec in force) of `net`;
    to_workers[name]: whether the span's forward (a->b) direction carries data to the
    workers. A context manager: use begin(t0) once the measured window started."""

    def __init__(self, net: Network, event: EventSpec, spans: dict[str, FibreSpec],
                 to_workers: dict[str, bool]) -> None:
        self.event = event
        self.ends = [_End(name, ns, ifname, fwd, spec.direction(fwd), event.during(spec, fwd))
                     for name, spec in spans.items()
                     for ns, ifname, fwd in net.fibre_ends(name)
                     if event.takes(fwd == to_workers[name])]
        self.applied: list[Applied] = []
        self.error: str | None = None
        self.t0: float | None = None
        self._begun, self._stop = threading.Event(), threading.Event()
        self._in_event: set[int] = set()
        self._thread = threading.Thread(target=self._run, name="fibre-events", daemon=True)

    def __enter__(self) -> EventPlayer:
        if self.ends:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def begin(self, t0: float) -> None:
        """The measured window started at t0 (time.perf_counter()): start the clock."""
        if self.t0 is None:
            self.t0 = t0
            self._begun.set()

    def stop(self) -> None:
        """Stop playing (what is in its event state is put back) and wait for it."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(JOIN_S)

    def _run(self) -> None:
        """The thread: wait for begin (or stop), then play every change in turn."""
        with ExitStack() as stack:
            iprs: dict[str, IPRoute] = {}
            for e in self.ends:
                if e.namespace not in iprs:
                    iprs[e.namespace] = stack.enter_context(ns_iproute(e.namespace))
            try:
                self._play(iprs)
            except Exception as exc:  # noqa: BLE001 (reported with the point)
                self.error = f"fibre event: {exc}"
                log.warning("%s", self.error)
            finally:
                self._put_back(iprs)

    def _play(self, iprs: dict[str, IPRoute]) -> None:
        """Each occurrence's start and end at its planned time, until stopped."""
        while not self._begun.wait(0.05):
            if self._stop.is_set():
                return
        assert self.t0 is not None
        for i, (start, end) in enumerate(self.event.real_times()):
            for at, state in ((start, "event"), (end, "restored")):
                if self._stop.wait(max(0.0, self.t0 + at - time.perf_counter())):
                    return
                for n, e in enumerate(self.ends):
                    self._change(iprs[e.namespace], n, e, i, state, at)

    def _change(self, ipr: IPRoute, n: int, e: _End, occurrence: int, state: str,
                planned: float) -> None:
        """Put one end into `state`, read it back and record it."""
        d = e.during if state == "event" else e.normal
        index = ipr.link_lookup(ifname=e.ifname)[0]
        tc.change(ipr, index, e.ifname, d)
        got = tc.read(ipr, index, e.ifname)
        assert self.t0 is not None
        self.applied.append(Applied(e.span, e.forward, occurrence, state, planned,
                                    time.perf_counter() - self.t0, got.loss_pct,
                                    got.delay_ms, got.rate_mbit, matches(d, got),
                                    got.netem_drops))
        (self._in_event.add if state == "event" else self._in_event.discard)(n)

    def _put_back(self, iprs: dict[str, IPRoute]) -> None:
        """Every end still in its event state back to normal (after a stop or an error)."""
        for n in sorted(self._in_event):
            e = self.ends[n]
            try:
                self._change(iprs[e.namespace], n, e, -1, "restored",
                             time.perf_counter() - (self.t0 or time.perf_counter()))
            except Exception as exc:  # noqa: BLE001 (the network's teardown follows)
                self.error = self.error or f"fibre event: {e.span} not put back: {exc}"
                log.warning("fibre %s not put back: %s", e.span, exc)

    def drops_during(self, span: str, forward: bool) -> int:
        """Packets netem dropped in one direction of `span` while it was in its event state
        (a span down drops everything sent meanwhile: the event's drops, not an
        overflowing queue's), from the counters read back at each change."""
        total, start = 0, None
        for a in self.applied:
            if a.span != span or a.forward != forward:
                continue
            if a.state == "event":
                start = a.netem_drops
            elif start is not None:
                total, start = total + max(0, a.netem_drops - start), None
        return total

    def summary(self, time_scale: float) -> dict[str, Any]:
        """The changes read back, in emulated seconds after the window's start: when the
        first event and the last restore held, the largest lag behind the plan (real
        ms), how many changes were read back, and whether all held what was asked."""
        ev = [a for a in self.applied if a.state == "event"]
        back = [a for a in self.applied if a.state == "restored"]
        return {
            "event_applied_s": ev[0].applied_s / time_scale if ev else math.nan,
            "event_restored_s": back[-1].applied_s / time_scale if back else math.nan,
            "event_lag_ms": 1000 * max((a.applied_s - a.planned_s for a in self.applied),
                                       default=math.nan),
            "event_changes": len(self.applied),
            "event_readback_ok": bool(self.applied) and all(a.matches for a in self.applied),
        }
