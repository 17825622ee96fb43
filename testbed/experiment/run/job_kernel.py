"""A job's lab-kernel side: `python -m testbed.experiment.run.job_kernel JOBDIR`, run by lab/run
in a fresh lab kernel that the host started for this job (testbed.experiment.run.job_host).

It reads JOBDIR/job.json (a spec from testbed.experiment.run.jobs), loads the plan from the
experiment's text exactly as the host did, resolves it as the host did (time_scale
"auto" at the host's calibration, carried by the spec; or, for the calibration job,
calibrates this kernel and stops there), and measures the job's runs with the ordinary
Runner (one rig per group, torn down in reverse) into JOBDIR, or runs one setting's
search there. The host is the only writer of the results folder, and marks what it
receives (marks); this side writes only into JOBDIR:

  events.jsonl  a line when a run starts, and one when it ends, fsynced at once: the run
                id, its rows, its steps.csv lines and seconds (the host streams them into
                results.csv)
  search.json   a search job's search.csv row
  status.json   last: ok with this kernel's environment, or the error (kind and line)
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

from testbed import atomic, results
from testbed.errors import SpecError, TestbedError
from testbed.experiment.resolve import dilation
from testbed.experiment.run import jobs
from testbed.experiment.plan import plan as plan_mod
from testbed.experiment.record import record
from testbed.experiment.resolve import resolve
from testbed.experiment.run import runner as runner_mod
from testbed.experiment.run import search as search_mod

log = logging.getLogger(__name__)


def to_json(value: Any) -> str:
    """One line of JSON; numpy scalars as plain numbers, NaN kept (Python reads it)."""
    return json.dumps(value, default=lambda o: o.item() if hasattr(o, "item") else str(o))


class EventLog:
    """A runner Listener that appends each finished run to JOBDIR/events.jsonl."""

    def __init__(self, jobdir: Path) -> None:
        """Append to jobdir/events.jsonl; steps.csv is read from its start."""
        self.jobdir = jobdir
        self._steps_at = 0

    def planned(self, total: int, done: int) -> None:
        """Ignore."""

    def started(self, run_id: str) -> None:
        """Log it on the console and mark its start in events.jsonl (the host measures
        its lab kernel's CPU share from here)."""
        log.info("run %s", run_id)
        self._append({"run": run_id, "started": True})

    def _append(self, event: dict[str, Any]) -> None:
        """Append one event line and fsync it."""
        with open(self.jobdir / "events.jsonl", "a") as fh:
            fh.write(to_json(event) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def _new_steps(self) -> list[str]:
        """steps.csv lines written since the last run (the header excluded)."""
        path = self.jobdir / "steps.csv"
        if not path.exists():
            return []
        with open(path) as fh:
            fh.seek(self._steps_at)
            text = fh.read()
            self._steps_at = fh.tell()
        lines = text.splitlines()
        return [l for l in lines if l and not l.startswith(record.STEP_COLUMNS[0] + ",")]

    def finished(self, run_id: str, rows: list[dict[str, Any]], seconds: float) -> None:
        """Append the run's event line (rows, steps, seconds) and fsync it."""
        self._append({"run": run_id, "rows": rows, "steps": self._new_steps(),
                      "seconds": seconds})


def _user_file(jobdir: Path, sent: dict[str, str] | None, kind: str) -> Path | None:
    """The DLIO config or trace the host read, written into the job's folder as it read
    it (None when the plan names none)."""
    if not sent:
        return None
    at = jobdir / kind / Path(sent["name"]).name
    at.parent.mkdir(exist_ok=True)
    at.write_text(sent["text"], encoding="utf-8")
    return at


def measure_job(spec: dict[str, Any], jobdir: Path) -> dict[str, Any]:
    """Load the plan from the spec and measure its runs (or its search setting) into
    jobdir; what happened, for status.json. Raises SpecError as the host's run would."""
    path = jobdir / spec["experiment"]["name"]
    path.write_text(spec["experiment"]["text"], encoding="utf-8")
    dlio_at, trace_at = (_user_file(jobdir, spec.get(k), k) for k in ("dlio", "trace"))
    plan = plan_mod.load(path, spec["overrides"], dlio_at, trace_at)
    if spec.get("calibrate"):
        return {"calibrated_MB_s": dilation.calibrate()}
    if spec.get("capacity_MB_s"):
        plan, _ = resolve.apply_capacity(plan, float(spec["capacity_MB_s"]))
    store = results.ResultStore(jobdir, record.columns(plan))
    if spec.get("seed_csv"):
        store.csv.write_text(spec["seed_csv"])
    runner_mod.check_memory(plan)
    runner_mod.check_capture(plan)
    with runner_mod.Runner(plan, store, EventLog(jobdir)) as runner:
        if spec["setting"] is None:
            for point, rep in jobs.runs_of(plan, spec["runs"]):
                runner.measure(point, rep)
            return {"measured": runner.outcome.measured, "failed": runner.outcome.failed}
        settings = plan_mod.search_settings(plan.resolver.raw)
        row = search_mod.Search(plan, runner, store, settings[spec["setting"]]).run()
    atomic.write_text(jobdir / "search.json", to_json(row))
    return {"search": True}


def main(argv: list[str] | None = None) -> int:
    """Run the job in JOBDIR (argv[0]); 0 done, 2 bad input, 1 a runtime failure."""
    args = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: "
                        "%(message)s")
    jobdir = Path(args[0]).resolve()
    spec = json.loads((jobdir / "job.json").read_text())
    status: dict[str, Any] = {"ok": False, "experiment_path": str(jobdir /
                                                                  spec["experiment"]["name"])}
    try:
        status.update(measure_job(spec, jobdir), ok=True)
        rc = 0
    except SpecError as exc:
        status.update(error="spec", message=str(exc))
        rc = 2
    except (TestbedError, OSError) as exc:
        status.update(error="runtime", message=f"{type(exc).__name__}: {exc}")
        rc = 1
    status["environment"] = results.environment()
    atomic.write_text(jobdir / "status.json", to_json(status))
    return rc


if __name__ == "__main__":
    sys.exit(main())
