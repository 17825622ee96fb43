"""What the host keeps account of while lab kernels run a sweep, kept apart from any
process so that it can be tested without a kernel.

Limit   how many lab kernels run at once. `--parallel auto` starts from what the machine
        offers and backs off by one whenever a run comes out emulator-limited while other
        lab kernels of ours ran beside it (fewer kernels cannot help a run that ran
        alone); runs started before a back-off do not trigger another one.
Ledger  what happens to a finished run's rows: written (once: a run is never written
        twice, except that a measurement replaces an earlier failure, as --resume does),
        skipped (a lost job's run that came back twice), or held for one re-measurement
        (auto only: emulator-limited while sharing the machine; the re-measurement is
        written whatever it shows). It also says what to do with runs a job never
        reported (a killed worker, a crashed kernel): run them again, up to a limit,
        then record them as failed. Only the run the kernel was measuring when it died
        counts an attempt (when the host knows which: a local kernel's event log says);
        the runs it never started are simply measured later.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from testbed.experiment.record.marks import marked, ok

MAX_ATTEMPTS = 2   # a run whose lab kernel died twice is recorded as failed


@dataclass
class Limit:
    """Lab kernels at once (see the module docstring): `cap` is what was asked for, or
    what the machine or the Dask workers offer (auto; it may change as workers come and
    go); each back-off takes one away from it."""

    cap: int
    adaptive: bool
    epoch: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)

    @property
    def value(self) -> int:
        """Lab kernels to keep busy now."""
        return max(1, self.cap - len(self.history)) if self.adaptive else self.cap

    def observe(self, run_id: str, rows: list[dict[str, Any]], neighbours: int,
                job_epoch: int) -> bool:
        """Back off by one if this run says the machine was overloaded by us: it is
        emulator-limited, ran beside other lab kernels of ours, and its job started
        after the last back-off. True when the limit was lowered."""
        reasons = marked(rows)
        if not (self.adaptive and reasons and neighbours > 0 and job_epoch == self.epoch
                and self.value > 1):
            return False
        self.epoch += 1
        self.history.append({"run": run_id, "reasons": reasons, "neighbours": neighbours,
                             "parallel": self.value - 1})
        return True


@dataclass
class Ledger:
    """Which runs are written, held or owed (see the module docstring)."""

    retry_marked: bool
    written: dict[str, bool] = field(default_factory=dict)   # run id -> ok
    held: dict[str, dict[str, Any]] = field(default_factory=dict)
    remeasured: set[str] = field(default_factory=set)
    attempts: dict[str, int] = field(default_factory=dict)
    skipped: int = 0

    def decide(self, event: dict[str, Any], grid: bool) -> str:
        """"write", "skip" or "hold" for a finished run's event (its rows and how many
        of our lab kernels ran beside it)."""
        run, rows = event["run"], event["rows"]
        if run in self.written and (self.written[run] or not ok(rows)):
            self.skipped += 1
            return "skip"
        if (self.retry_marked and grid and run not in self.remeasured and marked(rows)
                and event.get("neighbours", 0) > 0):
            self.held[run] = event
            self.remeasured.add(run)
            return "hold"
        self.held.pop(run, None)
        self.written[run] = ok(rows)
        return "write"

    def unreported(self, run: str, charged: bool = True) -> str:
        """What to do with a run its job never reported: "release" (write the held
        measurement), "retry" (run it again), or "fail" (record it as failed).
        charged=False: the job died before it started this run (it was measuring
        another), so the run is retried without counting an attempt; this stays bounded,
        as every such loss charges the run that was under way."""
        if run in self.written:
            return "done"
        if run in self.held:
            return "release"
        if not charged:
            return "retry"
        self.attempts[run] = self.attempts.get(run, 0) + 1
        return "retry" if self.attempts[run] < MAX_ATTEMPTS else "fail"

    def release(self, run: str) -> dict[str, Any]:
        """The held event of a run whose re-measurement was lost; now written."""
        event = self.held.pop(run)
        self.written[run] = ok(event["rows"])
        return event
