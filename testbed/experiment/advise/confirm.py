"""`testbed advise`: the model's candidates printed cheapest first, then the best of them
confirmed in emulation (testbed.experiment.advise.advise proposes and judges; this composes it
with the runner, as `testbed run` does, and prints).

A confirmation is an experiment file written into the output folder (CANDIDATE.toml:
the setting at the distance and co-located, `repetitions` runs each) and measured into
a results folder beside it, so every figure can be re-run and re-reported.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any, Callable

import pandas as pd
from rich.console import Console
from rich.table import Table

from testbed import atomic
from testbed.experiment.advise import advise as adv
from testbed.experiment.plan import plan as plan_mod
from testbed.experiment.report import report
from testbed.experiment.plan.plan import Plan

RunPlan = Callable[[Plan, Path], Any]  # measure a plan into a folder (as `testbed run`)


def scenario(args: argparse.Namespace) -> adv.Scenario:
    """The scenario the command line asks about."""
    return adv.Scenario(workload=args.workload, distance_km=args.distance_km, rate=args.rate,
                        loss_pct=args.loss_pct, workers=args.workers,
                        topology=args.topology, files=args.files,
                        repetitions=args.repetitions)


def goal(args: argparse.Namespace) -> adv.Goal:
    """The goal the command line sets (one of --slowdown-pct, --au-pct)."""
    if args.au_pct is not None:
        return adv.Goal("au_pct", args.au_pct)
    return adv.Goal("slowdown_pct", args.slowdown_pct)


def load(s: adv.Scenario, changes: tuple[tuple[str, Any], ...], folder: Path,
         name: str) -> Plan:
    """Write the experiment file of a setting into `folder` and load it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.toml"
    atomic.write_text(path, adv.experiment_text(s, changes, name))
    return plan_mod.load(path)


def rate(mb_s: float) -> str:
    """A rate in MB/s, readable from KB/s streams to GB/s reads."""
    return f"{mb_s:,.0f}" if mb_s >= 10 else f"{mb_s:.3g}"


def _table(a: adv.Advice) -> Table:
    """The model's way from the defaults to the goal, a row per candidate."""
    t = Table(title=f"the model's candidates, cheapest first (goal: {a.goal.text})",
              title_justify="left")
    for c in ("#", "setting (changed from the defaults)", "cost", "model MB/s", "AU %",
              "slowdown %", "limited by", "meets"):
        t.add_column(c, justify="left" if c.startswith("setting") else "right")
    for i, c in enumerate(a.path):
        t.add_row(str(i), c.text, adv.TIER_SHORT[c.tier], rate(c.model_MB_s),
                  f"{c.au_pct:.1f}", f"{c.slowdown_pct:.1f}", c.limited_by,
                  "yes" if c.meets else "")
    return t


def print_model(out: Console, a: adv.Advice, seconds: float) -> None:
    """The model's answer: its candidates, the recommendation and runner-up, or the
    limit that stops every candidate."""
    out.print(_table(a))
    for note in a.notes:
        out.print(f"note: {note}")
    if a.recommended is None:
        last = a.path[-1]
        out.print(f"no allowed setting meets the goal in the model: the best, {last.text}, "
                  f"reads {rate(last.model_MB_s)} of {rate(last.demand_MB_s)} MB/s, limited "
                  f"by {last.limited_by}; what would lift it: "
                  f"{adv.LIFTS.get(last.limited_by, '?')}")
    else:
        r = a.recommended
        out.print(f"model: {r.text} meets the goal ({r.au_pct:.1f} % AU, "
                  f"{rate(r.model_MB_s)} of {rate(r.demand_MB_s)} MB/s; cost: "
                  f"{adv.TIERS[r.tier]})")
        if a.runner_up is not None:
            out.print(f"runner-up: {a.runner_up.text} ({a.runner_up.au_pct:.1f} % AU; "
                      f"{adv.TIERS[a.runner_up.tier]})")
        out.print("to paste into an experiment file:\n" + adv.snippet(r))
    out.print(f"model answered in {seconds:.2f} s")


def confirm(out: Console, s: adv.Scenario, a: adv.Advice, folder: Path,
            run_plan: RunPlan, how_many: int) -> list[tuple[adv.Candidate, adv.Verdict]]:
    """Measure the model's best candidates (recommendation, runner-up; the best it found
    when nothing meets the goal) until one is confirmed; print each verdict. Returns
    every candidate measured with its verdict, the confirmed one (if any) last."""
    picks = [c for c in (a.recommended, a.runner_up) if c is not None] or [a.path[-1]]
    measured: list[tuple[adv.Candidate, adv.Verdict]] = []
    for i, cand in enumerate(picks[:how_many]):
        name = f"candidate-{i + 1}"
        plan = load(s, cand.changes, folder, name)
        t0 = time.monotonic()
        run_plan(plan, folder / name)
        built = report.build(folder / name, plan)  # writes summary.csv
        out.print(built.table)
        v = adv.judge(a.goal, pd.read_csv(folder / name / "summary.csv"))
        out.print(_verdict_line(cand, v, time.monotonic() - t0, folder / name))
        measured.append((cand, v))
        if v.confirmed:
            break
    return measured


RECORD = "advice.json"  # what advise answered, in its output folder


def record(folder: Path, s: adv.Scenario, a: adv.Advice,
           measured: list[tuple[adv.Candidate, adv.Verdict]], seconds: float) -> Path:
    """Write advise's answer (the scenario, the goal, the model's path, recommendation
    and runner-up, every confirmation's verdict, the wall time) as JSON into `folder`:
    what a table over many advise runs (benchmarks/poc_advise.py) is built from."""
    def cand(c: adv.Candidate | None) -> dict[str, Any] | None:
        if c is None:
            return None
        return {"setting": c.text, "changes": dict(c.changes), "tier": adv.TIERS[c.tier],
                "model_MB_s": c.model_MB_s, "demand_MB_s": c.demand_MB_s,
                "au_pct": c.au_pct, "limited_by": c.limited_by, "meets": c.meets}
    doc = {"scenario": dataclasses.asdict(s), "goal": a.goal.text,
           "path": [cand(c) for c in a.path], "recommended": cand(a.recommended),
           "runner_up": cand(a.runner_up), "stopped_by": a.stopped_by, "notes": a.notes,
           "confirmations": [{"candidate": cand(c), **dataclasses.asdict(v)}
                             for c, v in measured],
           "seconds": seconds}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / RECORD
    return atomic.write_text(path, json.dumps(doc, indent=1, allow_nan=True) + "\n")


def _pm(value: float, ci: float) -> str:
    """value +- ci, the interval left out when unknown."""
    return f"{value:.2f}" + (f" +- {ci:.2f}" if math.isfinite(ci) else "")


def _verdict_line(c: adv.Candidate, v: adv.Verdict, seconds: float, folder: Path) -> str:
    """One confirmation in a line."""
    state = "CONFIRMED" if v.confirmed else "not confirmed"
    return (f"{state}: {c.text}: AU {_pm(v.au_pct, v.au_ci)} %, slowdown "
            f"{_pm(v.slowdown_pct, v.slowdown_ci)} % over {v.n} run(s), "
            f"{rate(v.throughput_MB_s)} MB/s (model {rate(v.model_MB_s)}), limited by "
            f"{v.limited_by}; {v.why} ({seconds / 60:.1f} min, {folder})")
