"""`testbed run` from the host: a validated plan measured in lab kernels, several at once on
this host (--parallel) or on Dask workers on lab hosts (--scheduler), written into one
results folder as the runs arrive.

The plan is resolved first (resolve: time_scale "auto" from one calibration job in a lab
kernel alone, or meta.json's calibration on --resume) and every job carries that
capacity, so all lab kernels run the same plan. The grid's runs go out as jobs
(testbed.experiment.run.jobs: runs sharing a testbed, split over the free lab kernels); once
the grid is done, each setting of a [search] is one job (its bisection is sequential and
reuses the grid's rows; different settings run side by side). This process is the only
writer of results.csv (sink.Sink): every run's rows are marked with the host's evidence
(marks) and appended once, as its event arrives (ledger.Ledger); a job whose kernel or
worker died has its unreported runs sent out again. `--parallel auto` backs off when runs
come out emulator-limited while sharing the machine, and measures such runs once more
(ledger.Limit). meta.json records the plan, the lab kernels' environments, the
parallelism and every back-off.
"""

from __future__ import annotations

import json
import logging
import queue
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed import labkernel, results
from testbed.errors import SpecError, TestbedError
from testbed.experiment.run import estimate, jobs
from testbed.experiment.record import marks, record
from testbed.experiment.resolve import resolve
from testbed.experiment.run import search as search_mod
from testbed.experiment.run.ledger import Ledger, Limit
from testbed.experiment.plan.plan import Plan, search_settings
from testbed.experiment.run.pools import DaskPool, LocalPool
from testbed.experiment.run.runner import Listener, Outcome, Quiet
from testbed.experiment.record.sink import Sink

log = logging.getLogger(__name__)

BOOT_S = 10.0          # lab/run boot and the guest's Python start (measured 6.7 s)
TIMEOUT_FACTOR = 4.0   # a kernel is killed after 4x its estimated time + 5 minutes
CALIBRATE_TIMEOUT_S = 600  # boot, a testbed, 256 MiB read (capped at 60 s), teardown


@dataclass(frozen=True)
class Options:
    """How to spread a plan: parallel is a number or "auto"; scheduler a Dask address."""

    parallel: int | str = "auto"
    scheduler: str | None = None
    overrides: tuple[tuple[str, str], ...] = ()


def job_timeout_s(plan: Plan, job: jobs.Job) -> int:
    """Seconds before a job's lab kernel is killed: 4x the plan's estimate of its runs
    (a search job: its expected probes), plus the boot, plus 5 minutes."""
    if job.setting is None:
        index = jobs.grid_runs(plan)
        pts = [index[r][0] for r in job.runs]
    else:
        pts = list(plan.points)
    per = [estimate.run_seconds(plan, p) for p in pts]
    est = estimate.site_seconds(pts[0]) + BOOT_S if pts else BOOT_S
    est += sum(per) if job.setting is None else \
        2 * plan.repetitions * search_mod.expected_probes(plan) * max(per, default=0.0)
    return int(300 + TIMEOUT_FACTOR * est)


def start_limit(opts: Options, capacity: int | None) -> tuple[Limit, str]:
    """The starting number of lab kernels at once, and why (for meta.json and the CLI)."""
    if opts.parallel != "auto":
        return Limit(int(opts.parallel), adaptive=False), f"{opts.parallel} (as asked)"
    if capacity is not None:
        return Limit(capacity, adaptive=True), f"{capacity} (auto: the workers' threads)"
    n, why = labkernel.auto_parallel(labkernel.machine(), labkernel.mem_mb(),
                                     labkernel.cpus())
    return Limit(n, adaptive=True), f"auto: {why}"


class Dispatcher:
    """Hands jobs to a pool, writes what comes back (see the module docstring)."""

    def __init__(self, plan: Plan, opts: Options, sink: Sink, pool: Any, limit: Limit,
                 listener: Listener) -> None:
        """Nothing in flight yet: the grid is handed out by run()."""
        self.plan, self.opts, self.sink, self.pool = plan, opts, sink, pool
        self.limit, self.listener = limit, listener
        self.ledger = Ledger(retry_marked=limit.adaptive)
        self.events: queue.Queue[tuple[str, str, Any]] = queue.Queue()
        self.flying: dict[str, tuple[jobs.Job, int, set[str]]] = {}
        self.search_rows: dict[int, dict[str, Any]] = {}
        self.environments: list[dict[str, Any]] = []
        self.where: dict[str, dict[str, Any]] = {}
        self.outcome = Outcome(sink.out)
        self.batcher = jobs.Batcher(plan, [])
        self.searches: list[jobs.Job] = []

    def submit(self, job: jobs.Job) -> None:
        """Send a job to the pool; its events and result come back on the queue."""
        seed = self.sink.store.csv.read_text() if job.setting is not None \
            and self.sink.store.csv.exists() else None
        spec = jobs.spec(job, self.plan, dict(self.opts.overrides), seed,
                         job_timeout_s(self.plan, job), self.plan.capacity_MB_s)
        self.flying[job.id] = (job, self.limit.epoch, set())
        self.listener.started(job.label)
        fut = self.pool.submit(spec, lambda ev, j=job.id: self.events.put(("event", j, ev)))
        fut.add_done_callback(lambda f, j=job.id: self.events.put(("done", j, f)))

    def loop(self, take: Any) -> None:
        """Submit jobs from take(free) while lab kernels are free; handle what comes back
        until nothing is in flight and take has nothing more."""
        while True:
            if self.limit.adaptive and isinstance(self.pool, DaskPool):
                self.limit.cap = self.pool.capacity()  # workers come and go
            while len(self.flying) < self.limit.value:
                job = take(self.limit.value)
                if job is None:
                    break
                self.submit(job)
            if not self.flying:
                return
            kind, job_id, payload = self.events.get()
            if kind == "event":
                self.on_event(job_id, payload)
            else:
                self.on_done(job_id, payload)

    def on_event(self, job_id: str, ev: dict[str, Any]) -> None:
        """A run finished in a lab kernel: write, skip or hold it; maybe back off."""
        job, epoch, seen = self.flying[job_id]
        if ev["run"] in seen:
            return
        seen.add(ev["run"])
        marks.host_mark_rows(ev["rows"])  # the meter's figure its kernel recorded per row
        if marks.host_mark(ev):
            log.warning("run %s: its lab kernel waited for a CPU %.0f %% of the time and its "
                        "machine's hypervisor took %.0f %%; marked emulator-limited (%s)",
                        ev["run"], ev.get("host_wait_pct", 0.0), ev.get("host_steal_pct", 0.0),
                        ev["rows"][0].get("emulator_reason", ""))
        if self.limit.observe(ev["run"], ev["rows"], ev.get("neighbours", 0), epoch):
            log.warning("run %s was emulator-limited beside %d other lab kernel(s): %d at "
                        "once from now on", ev["run"], ev.get("neighbours", 0),
                        self.limit.value)
        decision = self.ledger.decide(ev, grid=job.setting is None)
        if decision == "hold":
            log.warning("run %s will be measured again with fewer lab kernels", ev["run"])
            self.requeue(ev["run"])
        elif decision == "write":
            self.write(ev)

    def write(self, ev: dict[str, Any]) -> None:
        """Append a run's rows and steps; count it; tell the listener."""
        self.sink.steps(ev.get("steps", []))
        self.sink.rows(ev["rows"])
        ok = all(r.get("status", "ok") == "ok" for r in ev["rows"])
        if ok:
            self.outcome.measured += 1
            if ev["run"] in self.outcome.failed:
                self.outcome.failed.remove(ev["run"])
        elif ev["run"] not in self.outcome.failed:
            self.outcome.failed.append(ev["run"])
        self.where[ev["run"]] = {k: ev[k] for k in ("host", "neighbours", "host_cpu_pct",
                                                    "host_wait_pct", "host_steal_pct")
                                 if k in ev}
        self.listener.finished(ev["run"], ev["rows"], float(ev.get("seconds", 0.0)))

    def requeue(self, run_id: str) -> None:
        """Measure a grid run again in a later job."""
        point, _ = jobs.grid_runs(self.plan)[run_id]
        self.batcher.add(run_id, point.group)

    def on_done(self, job_id: str, fut: Any) -> None:
        """A job ended: its events not yet seen, then its unreported runs."""
        job = self.flying[job_id][0]
        try:
            result = fut.result()
        except Exception as exc:  # a lost worker (KilledWorker), a failing host
            log.warning("job %s (%s) lost: %s", job_id, job.label, exc)
            result = {"events": [], "status": None, "rc": None,
                      "console": f"{type(exc).__name__}: {exc}"}
        for ev in result["events"]:
            self.on_event(job_id, ev)
        _, _, seen = self.flying.pop(job_id)
        self.settle(job, result, seen)

    def settle(self, job: jobs.Job, result: dict[str, Any], seen: set[str]) -> None:
        """Files, environment, search row; a spec error stops the run; runs the job did
        not report are run again (or recorded as failed)."""
        status = _checked_status(result, self.plan)
        self.sink.files(result.get("files") or {})
        if status.get("environment"):
            self.environments.append({**status["environment"], "job": job.id})
        why = _failure(result)
        if job.setting is not None:
            self.settle_search(job, result, why)
        running = result.get("running")
        for run in job.runs:
            if run not in seen:
                self.settle_run(run, why, charged=running is None or run == running)

    def settle_run(self, run: str, why: str, charged: bool = True) -> None:
        """A run its job did not report: write its held rows, retry it, or fail it
        (charged: whether this loss counts as one of its attempts, Ledger.unreported)."""
        action = self.ledger.unreported(run, charged)
        if action == "release":
            self.write(self.ledger.release(run))
        elif action == "retry":
            log.warning("run %s lost (%s); measuring it again", run, why)
            self.requeue(run)
        elif action == "fail":
            point, rep = jobs.grid_runs(self.plan)[run]
            rows = record.failed_rows(self.plan, point, rep, f"lost twice: {why}", [])
            self.ledger.written[run] = False
            self.write({"run": run, "rows": rows, "steps": []})

    def settle_search(self, job: jobs.Job, result: dict[str, Any], why: str) -> None:
        """Keep a search job's row; a lost search job runs again once."""
        assert job.setting is not None
        if result.get("search"):
            self.search_rows[job.setting] = result["search"]
        elif job.attempt + 1 < 2:
            self.searches.append(jobs.Job(f"s{job.setting}r", setting=job.setting,
                                                attempt=job.attempt + 1))
        else:
            self.search_rows[job.setting] = {"setting": f"#{job.setting}",
                                             "note": f"search lost: {why}"[:300]}

    def run(self, todo: list[str]) -> None:
        """The grid's runs in todo, then the search settings, until all are written."""
        self.batcher = jobs.Batcher(self.plan, todo)
        self.loop(self.batcher.take)
        if self.plan.search is None:
            return
        self.searches = [jobs.Job(f"s{i}", setting=i)
                         for i in range(len(search_settings(self.plan.resolver.raw)))]
        self.loop(lambda free: self.searches.pop(0) if self.searches else None)
        self.sink.search([self.search_rows[i] for i in sorted(self.search_rows)])


def run(plan: Plan, out: Path, opts: Options, resume: bool = False,
        listener: Listener | None = None) -> Outcome:
    """Measure a plan in lab kernels into `out` (results.csv, steps.csv, search.csv,
    meta.json), as runner.run does in one kernel; the report is built from it the same
    way. Raises SpecError when out holds results and resume is False, or a lab kernel
    found the plan invalid there (e.g. its data does not fit the kernel's memory)."""
    store = record.open_store(plan, out, resume)
    done = store.done() if resume else set()
    todo = [r for r in jobs.grid_runs(plan) if r not in done]
    listener = listener or Quiet()
    t0 = time.monotonic()
    with ExitStack() as stack:
        if opts.scheduler:
            pool: Any = stack.enter_context(DaskPool(opts.scheduler))
            limit, why = start_limit(opts, pool.capacity())
        else:
            labkernel.lab_ready()
            limit, why = start_limit(opts, None)
            pool = stack.enter_context(LocalPool(limit.value))
        plan, _ = calibrate_auto(plan, opts, pool, out, resume)  # before any other job
        meta = {**record.meta_of(plan), "execution": _execution(opts, limit, why, pool)}
        store.write_meta(meta)
        listener.planned(len(plan.runs()) + search_mod.max_runs(plan), len(done))
        d = Dispatcher(plan, opts, Sink(store), pool, limit, listener)
        d.outcome.skipped = len(plan.runs()) - len(todo)
        stack.callback(lambda: _finish_meta(store, meta, d, time.monotonic() - t0))
        d.run(todo)
    return d.outcome


def calibrate_auto(plan: Plan, opts: Options, pool: Any, out: Path | None = None,
                   resume: bool = False) -> tuple[Plan, dict[str, Any]]:
    """For time_scale = "auto": the plan resolved before any run starts, as in one kernel
    (resolve.auto_scale), calibrated by one calibration job in a lab kernel alone (before
    any other starts, so that it measures the machine undisturbed), or on --resume from
    meta.json; (plan, meta.json's record). Every job then carries its capacity."""
    return resolve.auto_scale(plan, out, resume, lambda: _calibration_job(plan, opts, pool))


def _calibration_job(plan: Plan, opts: Options, pool: Any) -> float:
    """What a lab kernel moves per CPU (MB/s), from a calibration job in the pool."""
    log.warning("time_scale auto: calibrating what a lab kernel moves per CPU")
    job = jobs.Job("cal", calibrate=True)
    fut = pool.submit(jobs.spec(job, plan, dict(opts.overrides), None, CALIBRATE_TIMEOUT_S),
                      lambda ev: None)
    try:
        result = fut.result()
    except Exception as exc:  # a lost worker, a failing host
        raise TestbedError(f"time_scale auto: the calibration job was lost: {exc}") from None
    status = _checked_status(result, plan)
    if not status.get("calibrated_MB_s"):
        raise TestbedError(f"time_scale auto: the calibration failed: {_failure(result)}"
                           [:500])
    return float(status["calibrated_MB_s"])


def _checked_status(result: dict[str, Any], plan: Plan) -> dict[str, Any]:
    """A job's status.json; SpecError (naming the host's file) when the lab kernel found
    the plan invalid."""
    status = result.get("status") or {}
    if status.get("error") == "spec":
        msg = str(status.get("message", "bad input"))
        raise SpecError(msg.replace(str(status.get("experiment_path")), str(plan.path)))
    return status


def _failure(result: dict[str, Any]) -> str:
    """Why a job did not deliver: the guest's message, or lab/run's exit and its own
    words on it (a kill, a timeout), else the console's last lines."""
    status = result.get("status") or {}
    return status.get("message") or f"lab kernel exit {result.get('rc')}: " \
        f"{result.get('verdict') or result.get('console', '')}"


def _execution(opts: Options, limit: Limit, why: str, pool: Any) -> dict[str, Any]:
    """meta.json's execution block at the start."""
    return {"where": f"dask {opts.scheduler}" if opts.scheduler else "lab kernels on "
            "this host", "parallel_requested": opts.parallel, "parallel_start": limit.value,
            "parallel_why": why, "client": results.environment(),
            "workers": pool.workers() if isinstance(pool, DaskPool) else None}


def _finish_meta(store: results.ResultStore, meta: dict[str, Any], d: Dispatcher,
                 seconds: float) -> None:
    """meta.json at the end: the lab kernels' environments (the first is `environment`:
    where the figures were measured), back-offs, re-measured runs, where each run ran."""
    envs = d.environments
    if envs:
        meta["environment"] = {k: v for k, v in envs[0].items() if k != "job"}
    meta["execution"].update({
        "parallel_end": d.limit.value, "backoffs": d.limit.history,
        "remeasured": sorted(d.ledger.remeasured), "duplicates_skipped": d.ledger.skipped,
        "lab_kernels": envs, "runs": d.where, "seconds": round(seconds, 1)})
    store.write_meta(meta)


def read_execution(out: Path) -> str:
    """One line on how a results folder's runs were spread (from meta.json's execution
    block; "" when it was measured in one kernel)."""
    try:
        ex = json.loads((out / "meta.json").read_text()).get("execution") or {}
    except (OSError, ValueError):
        return ""
    if not ex:
        return ""
    line = f"lab kernels: {ex.get('where')}, {ex.get('parallel_why')}"
    for b in ex.get("backoffs", []):
        line += (f"; backed off to {b['parallel']} after {b['run']} came out "
                 f"emulator-limited ({'+'.join(b['reasons'])}) beside {b['neighbours']} other(s)")
    if ex.get("remeasured"):
        line += f"; measured again with fewer kernels: {', '.join(ex['remeasured'])}"
    return line + f"; {ex.get('seconds', 0):.0f} s"
