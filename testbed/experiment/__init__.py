"""Experiments: an experiment file (TOML) -> a validated plan of points -> every decision
made (resolve) -> each point measured on a real testbed, its rows appended to
results.csv -> a report; and advise beside them. A package per stage, a module per step
(imports point down this list, advise and report aside: tests/unit/test_layers.py):

  plan/     dimensions  the table of knobs (one row per knob)
            parse       the file -> typed values, checked where written
            plan        values -> frozen, validated points with co-located baselines
            kinds       what a point measures: the loader, a trace replayed, checkpoints
            datapaths   direct / cache / staged, registered by name
  resolve/  resolve     every decision before a run starts (time_scale "auto": k per
                        point from a calibration, meta.json's on --resume, or nominal)
            dilation    time dilation's calibration: what a lab kernel moves per CPU
            explain     the model's bounds and the emulator's evidence for a row
  record/   record      the results folder's schema: results.csv's columns and rows,
                        steps.csv, meta.json
            marks       marks the host's evidence puts on a run's rows
            sink        the one writer of a results folder for runs measured elsewhere
            summary     slowdown, means and intervals over workers and repetitions
            reruns      the spread between reruns a single run's interval is widened by
  measure/  rig         one running testbed: network, nfsd and dataset, for points that
                        share them
            measure     one point on a rig: mounts, data path, loaders, rows
            measure_trace, measure_checkpoint  the other kinds' points
            capture     a packet capture of a point and its analysis
  run/      runner      every point of a resolved plan in order in this kernel, failed
                        points recorded, resume
            search      [search]: where a target stops being met, per setting
            estimate    `run --check`: the resolved plan as a table, clock notes and a
                        time estimate
            distribute  the same from the host, over lab kernels here or on Dask workers
            jobs        a job (some runs, or a search setting) and its wire spec
            job_host    a job's host side: a lab kernel started, its events followed
            job_kernel  a job's lab-kernel side (python -m testbed.experiment.run.job_kernel)
            pools       lab kernels on this host, or Dask workers
            ledger      what the distributing host keeps account of (Limit, Ledger)
  advise/   advise      `testbed advise`: the model's cheapest settings for a goal, the
                        experiment file of a setting, a confirmation judged
            confirm     the answer for a person, and the best candidates measured
            advice_grid advice.json, and a folder of answers as one table
  report/   report      tables, summaries, DLIO files and plots from results.csv
            markdown    a results folder (or advise answers) as GitHub markdown

Entry points: run_file (a file, start to report) and run_plan (a loaded plan, resolved
and run in this kernel). They import the steps when called, so importing this package
imports none of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from testbed.paths import EXPERIMENTS, REPO

if TYPE_CHECKING:
    from testbed.experiment.plan.plan import Plan
    from testbed.experiment.run.runner import Listener, Outcome

__all__ = ["DEMO_FILE", "DLIO_FILE", "REPO", "run_file", "run_plan"]

DEMO_FILE = EXPERIMENTS / "demo.toml"
DLIO_FILE = EXPERIMENTS / "dlio.toml"


def run_plan(plan: Plan, out: str | Path, resume: bool = False,
             listener: Listener | None = None) -> tuple[Plan, Outcome]:
    """Run a loaded plan in this kernel into `out`: the results folder opened (its checks
    fail before anything is built), the plan resolved (time_scale "auto": this kernel
    calibrated, or meta.json's calibration on resume), then run. (The plan as run, what
    the run did.)"""
    from testbed.experiment.resolve import dilation, resolve
    from testbed.experiment.run import runner
    store = runner.open_results(plan, Path(out), resume)
    plan, _ = resolve.auto_scale(plan, Path(out), resume, dilation.calibrate)
    return plan, runner.run(plan, store, resume=resume, listener=listener)


def run_file(path: str | Path, out: str | Path, resume: bool = False,
             overrides: dict[str, str] | None = None) -> Path:
    """Load, run and report an experiment file into `out` (for scripts and tests);
    returns `out`. Raises PointFailed naming the failed runs, after the report."""
    from testbed.errors import PointFailed
    from testbed.experiment.plan import plan as plan_mod
    from testbed.experiment.report import report
    plan, outcome = run_plan(plan_mod.load(path, overrides), out, resume)
    report.build(Path(out), plan)
    if outcome.failed:
        raise PointFailed(f"failed: {', '.join(outcome.failed)}")
    return Path(out)
