"""Experiments: an experiment file (TOML) -> a validated plan of points -> each point
measured on a real testbed, its rows appended to results.csv -> a report.

    dimensions  the table of knobs (one row per knob)
    parse       the file -> typed values, checked where written
    plan        values -> frozen, validated points with co-located baselines
    datapaths   direct / cache / staged, registered by name
    rig         one running testbed: network, nfsd and dataset, for points that share them
    measure     one point on a rig: mounts, data path, loaders, rows
    runner      every point in order, failed points recorded, resume
    search      [search]: where a target stops being met, per setting
    report      tables, summaries, DLIO files and plots from results.csv
"""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
DEMO_FILE = REPO / "experiments" / "demo.toml"


def run_file(path: str | Path, out: str | Path, resume: bool = False,
             overrides: dict[str, str] | None = None) -> Path:
    """Load, run and report an experiment file into `out` (for scripts and tests);
    returns `out`. Raises PointFailed naming the failed runs, after the report."""
    from testbed.errors import PointFailed
    from testbed.experiment import plan as plan_mod, report, runner
    plan = plan_mod.load(path, overrides)
    outcome = runner.run(plan, Path(out), resume=resume)
    report.build(Path(out), plan)
    if outcome.failed:
        raise PointFailed(f"failed: {', '.join(outcome.failed)}")
    return Path(out)
