"""Running a resolved plan in this kernel: every (point, repetition) in order, on the
rigs they need, each point's rows appended to results.csv as soon as it is measured (a
crash or Ctrl-C loses nothing; --resume skips what is done). A point that fails is
recorded as failed with its reason, its rig is torn down, and the next point starts on a
fresh one. Every decision about the plan (time_scale "auto") is made before it gets here
(resolve); the checks that must fail first are open_results'.

The runner knows nothing of terminals: it tells a Listener what it is doing.
"""

from __future__ import annotations

import logging
import math
import os
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from testbed import labkernel, results
from testbed.errors import ResultsError, SpecError, TestbedError
from testbed.experiment.plan import kinds
from testbed.experiment.record import marks
from testbed.experiment.measure import measure as measure_mod
from testbed.experiment.record import record
from testbed.experiment.resolve import resolve
from testbed.experiment.run import search as search_mod
from testbed.experiment.plan.plan import Plan, Point
from testbed.experiment.measure.rig import Rig

log = logging.getLogger(__name__)

MEMORY_HEADROOM = 0.6  # the dataset copies may use this share of the kernel's free memory
# In the user-mode lab kernel one guest process cannot grow past ~256 MiB (UML maps guest
# pages one by one into the host process: the host's vm.max_map_count, 65530 by default,
# x 4 KiB). Dissecting a capture holds its streams: a 48 MiB pcap peaked at 259 MiB.
UML_CAPTURE_MIB = 32


class Listener(Protocol):
    """What a runner reports while it works (the CLI draws progress from it)."""

    def planned(self, total: int, done: int) -> None:
        """The number of runs (point x repetition) and how many are done already."""

    def started(self, run_id: str) -> None:
        """A run is starting."""

    def finished(self, run_id: str, rows: list[dict[str, Any]], seconds: float) -> None:
        """A run ended (its rows say whether it failed)."""


class Quiet:
    """A Listener that reports nothing."""

    def planned(self, total: int, done: int) -> None:
        """Ignore."""

    def started(self, run_id: str) -> None:
        """Ignore."""

    def finished(self, run_id: str, rows: list[dict[str, Any]], seconds: float) -> None:
        """Ignore."""


@dataclass
class Outcome:
    """What a run of a plan did."""

    out: Path
    measured: int = 0
    failed: list[str] = field(default_factory=list)
    skipped: int = 0


BDP_MEMORY = 3.0  # per fibre: the BDP in netem's queue and in socket buffers, with skb overhead


def memory_need_bytes(plan: Plan) -> int:
    """The most memory one point needs at once: the training set on the storage host, a
    staged copy per worker where a point stages, the cache's image where a point caches
    (it lives in the run's folder, in RAM, and fills with each worker's copy up to its
    size: an 11 GiB cache in a 4 GiB lab kernel ended in "No space left on device" mid-
    point, 2026-12-05), and per fibre BDP_MEMORY x its emulated bandwidth-delay product
    (bytes in flight do not shrink under time dilation)."""
    need = 0
    for p in plan.points:
        flight = sum(BDP_MEMORY * f.bdp_bytes() for _, f in p.fibres)
        export = kinds.export_bytes(plan, p)
        if export is not None:  # a trace's files or the checkpoints written
            need = max(need, int(export + flight))
            continue
        copies = 1 + (p.workers if p.data_path == "staged" else 0)
        cache = min(int(p.value("cache_mib")) << 20, p.workers * p.dataset.total_bytes) \
            if p.data_path == "cache" else 0
        need = max(need, int(copies * p.dataset.total_bytes + cache + flight))
    return need


def check_capture(plan: Plan) -> None:
    """SpecError when a capture is larger than the lab kernel can dissect (see above)."""
    if plan.capture is not None and os.environ.get("APN_LAB_KERNEL") == "uml" \
            and plan.capture.max_mib > UML_CAPTURE_MIB:
        raise SpecError(f"{plan.path}: [capture] max_mib = {plan.capture.max_mib}: the "
                        f"user-mode lab kernel can dissect at most {UML_CAPTURE_MIB} MiB (a "
                        "guest process is limited to ~256 MiB by the host's vm.max_map_count); "
                        "lower it, or run in the VM lab (lab/run --vm)")


def check_memory(plan: Plan, meminfo: Path = Path("/proc/meminfo")) -> None:
    """SpecError, before anything is built, when the data cannot fit this kernel's
    memory (the storage host's files live in RAM)."""
    fields = dict(line.split(":", 1) for line in meminfo.read_text().splitlines() if ":" in line)
    avail = int(fields.get("MemAvailable", fields.get("MemFree", "0 kB")).split()[0]) * 1024
    need = memory_need_bytes(plan)
    if need > MEMORY_HEADROOM * avail:
        total = int(fields.get("MemTotal", "0 kB").split()[0]) * 1024
        want = (total - avail + need / MEMORY_HEADROOM) / 2**30
        raise SpecError(f"{plan.path}: the data and the bytes in flight need "
                        f"{need / 2**20:.0f} MiB of memory at once; this kernel has "
                        f"{avail / 2**20:.0f} MiB available (use at most "
                        f"{MEMORY_HEADROOM * avail / 2**20:.0f}): {_smaller(plan)}, or "
                        f"a lab kernel with about {math.ceil(want)} GiB "
                        f"(LAB_MEM={math.ceil(want)}G lab/run ...)")


# What makes a plan's data smaller, by its kind of workload (check_memory's advice).
SMALLER = {kinds.CHECKPOINT: "a smaller [workload] scale (the share of each rank's "
                             "checkpoint the lab writes; its model still gives the full size)",
           kinds.TRACE: "a trace of fewer or smaller files"}


def _smaller(plan: Plan) -> str:
    """How to make a plan's data fit (SMALLER; files for a loader's training set)."""
    return SMALLER.get(kinds.name_of(plan), "fewer or smaller files")


def _require_resolved(plan: Plan) -> None:
    """ValueError for a plan that still leaves a decision open (resolve decides it)."""
    if not resolve.is_resolved(plan):
        raise ValueError(f"{plan.path}: time_scale \"auto\" is not resolved: resolve "
                         "the plan before running it")


# A run the machine took CPU from (marks.remeasure) is measured again at most this many
# times; the last measurement is written whatever it shows, marked if it still is.
MAX_REMEASURE = 2
# Before measuring again, wait until the machine has given the CPU back for QUIET_WINDOW_S
# (steal came for a minute at a time here, 2026-12-07), at most QUIET_WAIT_S; a machine
# still short then keeps its mark, and the next QUIET_SKIP_S of marks are not waited for
# (a kernel held to a quota for good would otherwise wait at every point).
QUIET_WINDOW_S = 5.0
QUIET_WAIT_S = 90.0
QUIET_SKIP_S = 300.0


def machine_taken(window_s: float = QUIET_WINDOW_S) -> list[str]:
    """The ways the machine takes CPU from this kernel now (marks.taken over window_s of
    the host meter) while this kernel asks for a CPU the whole time (a busy loop: an idle
    kernel waits for nothing and its machine steals little, whatever the host's load);
    empty: it is quiet."""
    before = labkernel.meter_sample()
    end = time.monotonic() + window_s
    while time.monotonic() < end:
        pass
    return marks.taken(labkernel.host_share(before, labkernel.meter_sample()))


def await_quiet(deadline_s: float) -> bool:
    """Wait until the machine is quiet (machine_taken), at most deadline_s; whether it
    became quiet."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if not machine_taken():
            return True
    return False


class Runner:
    """Measures points one by one, keeping one rig up while consecutive points share it.
    The plan comes resolved (resolve): a runner decides nothing about it.

    Each measurement gets the host's marks (marks.host_mark_rows: lab/run's meter, as
    the kernel recorded it per row); a run the machine took CPU from, or a search probe
    with any load-caused mark, is set aside and measured again (MAX_REMEASURE), and the
    rows written say how often and why (remeasured, remeasured_why)."""

    def __init__(self, plan: Plan, store: results.ResultStore,
                 listener: Listener | None = None) -> None:
        """No rig yet: the first point builds one."""
        _require_resolved(plan)
        self.plan, self.store = plan, store
        self.listener = listener or Quiet()
        self._rig: Rig | None = None
        self._stack = ExitStack()
        self.outcome = Outcome(store.out)
        self._short_until = 0.0  # until then, marked runs are kept (see _quiet)

    def __enter__(self) -> Runner:
        """The runner; its rig is torn down on exit."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Tear down the current rig."""
        self.close()

    def close(self) -> None:
        """Tear down the current rig, if any."""
        self._stack.close()
        self._rig = None

    def _rig_for(self, point: Point) -> Rig:
        """The running rig if the point shares its group, else a fresh one (the old
        one torn down first)."""
        if self._rig is not None and self._rig.group == point.group:
            return self._rig
        self.close()
        self._stack = ExitStack()
        export = kinds.export_of(self.plan)
        self._rig = self._stack.enter_context(Rig(point, export.writable, export.fill))
        return self._rig

    def _attempt(self, point: Point, rep: int) -> measure_mod.Measured:
        """One measurement of a run, marked with the host's evidence; a failure becomes
        failed rows (and a fresh rig for the next point); only a results folder that
        refuses writes (ResultsError) stops the run."""
        workers: list[str] = []
        try:
            rig = self._rig_for(point)
            workers = rig.workers
            measured = measure_mod.measure(self.plan, rig, point, rep, self.store.out)
            marks.host_mark_rows(measured.rows)
            return measured
        except ResultsError:
            raise  # the results folder refuses writes (a full disk): stop, not a failed point
        except (TestbedError, OSError) as exc:
            log.warning("point %s failed: %s", point.run_id(rep), exc)
            self.close()
            return measure_mod.Measured(
                record.failed_rows(self.plan, point, rep, str(exc), workers), [])

    def _kept(self, point: Point, rep: int, probe: bool) -> measure_mod.Measured:
        """The measurement of a run to keep: measured again while the machine took its
        CPU (or, for a probe, any load-caused mark), at most MAX_REMEASURE times; its
        rows say how often and why (the figures set aside, in remeasured_why)."""
        set_aside: list[str] = []
        while True:
            measured = self._attempt(point, rep)
            why = marks.remeasure(measured.rows, probe)
            if not why or len(set_aside) == MAX_REMEASURE:
                break
            text = marks.aside(measured.rows, why)
            log.warning("run %s: %s; set aside, to be measured again once the machine gives "
                        "the CPU back", point.run_id(rep), text)
            if not self._quiet(point, rep):
                break
            set_aside.append(text)
        for row in measured.rows:
            row.update(remeasured=len(set_aside), remeasured_why="; ".join(set_aside))
        return measured

    def _quiet(self, point: Point, rep: int) -> bool:
        """Whether to measure a marked run again now: after the machine is quiet again
        (await_quiet), unless it stayed short of CPU within the last QUIET_SKIP_S."""
        if time.monotonic() < self._short_until:
            return False
        if await_quiet(QUIET_WAIT_S):
            return True
        self._short_until = time.monotonic() + QUIET_SKIP_S
        log.warning("run %s: the machine stayed short of CPU for %.0f s; kept as marked, and "
                    "marked runs of the next %.0f s are not measured again",
                    point.run_id(rep), QUIET_WAIT_S, QUIET_SKIP_S)
        return False

    def measure(self, point: Point, rep: int, probe: bool = False) -> list[dict[str, Any]]:
        """Measure one repetition of a point (see _kept; probe: a search's probe), append
        its steps and rows; its rows."""
        run_id = point.run_id(rep)
        log.info("run %s", run_id)
        self.listener.started(run_id)
        t0 = time.monotonic()
        measured = self._kept(point, rep, probe)
        if marks.ok(measured.rows):
            self.outcome.measured += 1
        else:
            self.outcome.failed.append(run_id)
        record.write_steps(self.store.out, measured.steps)
        self.store.append_rows(measured.rows)
        self.listener.finished(run_id, measured.rows, time.monotonic() - t0)
        return measured.rows

    def run_grid(self, done: set[str]) -> None:
        """Every (point, repetition) of the plan's grid not in `done`."""
        todo = [(p, r) for p, r in self.plan.runs() if p.run_id(r) not in done]
        self.outcome.skipped = len(self.plan.runs()) - len(todo)
        for point, rep in todo:
            self.measure(point, rep)


def open_results(plan: Plan, out: Path, resume: bool = False) -> results.ResultStore:
    """The results folder for a run in this kernel, after the checks that must fail
    before anything is built or calibrated: SpecError when `out` holds results and
    resume is False, the data cannot fit this kernel's memory, or a capture is too large
    to dissect here."""
    store = record.open_store(plan, out, resume)
    check_memory(plan)
    check_capture(plan)
    return store


def run(plan: Plan, store: results.ResultStore, resume: bool = False,
        listener: Listener | None = None) -> Outcome:
    """Run a resolved plan (resolve: nothing is decided here) into its results folder
    (open_results: results.csv, meta.json); the grid first, then [search]."""
    _require_resolved(plan)
    done = store.done() if resume else set()
    store.write_meta(record.meta_of(plan))
    listener = listener or Quiet()
    listener.planned(len(plan.runs()) + search_mod.max_runs(plan), len(done))
    with Runner(plan, store, listener) as runner:
        runner.run_grid(done)
        if plan.search is not None:
            search_mod.run(plan, runner, store)
    return runner.outcome
