"""`testbed advise`'s answer for a person, and its confirmation in emulation: the model's
candidates as a table and lines (advise.advise proposes; the CLI prints what this module
returns, the library never prints), then the best of them measured and judged
(advise.judge) until one is confirmed.

A confirmation is an experiment file written into the output folder (CANDIDATE.toml:
the setting at the distance and co-located, `repetitions` runs each) and measured into
a results folder beside it by the caller's runner, which reports it as `testbed run`
does, so every figure can be re-run and re-reported. What advise answered is kept in
advice.json (advice_grid.record).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Callable

import pandas as pd
from rich.table import Table
from rich.text import Text

from testbed import atomic
from testbed.errors import TestbedError
from testbed.experiment.advise import advise as adv
from testbed.experiment.advise.advice_grid import rate
from testbed.experiment.plan import plan as plan_mod
from testbed.experiment.plan.plan import Plan
from testbed.schema import HOST_PROFILES

# Measure a plan into a folder and write its report (summary.csv), as `testbed run` does.
RunPlan = Callable[[Plan, Path], Any]
Show = Callable[[Any], None]  # shows a person a line or a table as it happens (the CLI's)


def load(s: adv.Scenario, changes: tuple[tuple[str, Any], ...], folder: Path,
         name: str) -> Plan:
    """Write the experiment file of a setting into `folder` and load it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.toml"
    atomic.write_text(path, adv.experiment_text(s, changes, name))
    return plan_mod.load(path)


def _writes(a: adv.Advice) -> bool:
    """Whether the advice is a checkpoint job's (its candidates rated by the write model)."""
    return any(math.isfinite(c.write_s) for c in a.path)


def _table(a: adv.Advice) -> Table:
    """The model's way from the defaults to the goal, a row per candidate: AU and
    slowdown for reads, seconds per checkpoint and training time lost for writes."""
    t = Table(title=f"the model's candidates, cheapest first (goal: {a.goal.text})",
              title_justify="left")
    writes = _writes(a)
    figures = ("MB/s a rank", "write s", "lost %") if writes else \
        ("model MB/s", "AU %", "slowdown %")
    for c in ("#", "setting (changed from the defaults)", "cost", *figures, "limited by",
              "meets"):
        t.add_column(c, justify="left" if c.startswith("setting") else "right")
    for i, c in enumerate(a.path):
        shown = (f"{c.write_s:.2f}", f"{c.lost_pct:.2f}") if writes else \
            (f"{c.au_pct:.1f}", f"{c.slowdown_pct:.1f}")
        t.add_row(str(i), c.text, adv.TIER_SHORT[c.tier], rate(c.model_MB_s), *shown,
                  c.limited_by, "yes" if c.meets else "")
    return t


def _figures(c: adv.Candidate) -> str:
    """A candidate's figures in words: AU and rates for reads, a checkpoint's seconds
    and the training time it loses for writes."""
    if math.isfinite(c.write_s):
        return (f"{c.write_s:.2f} s a checkpoint, {c.lost_pct:.2f} % of training time "
                f"lost at {c.interval_s:g} s between checkpoints; {rate(c.model_MB_s)} "
                f"MB/s a rank where the goal needs {rate(c.demand_MB_s)}")
    return f"{c.au_pct:.1f} % AU, {rate(c.model_MB_s)} of {rate(c.demand_MB_s)} MB/s"


def host_text(name: str) -> str:
    """A host profile in words: a preset's description, or "[hosts.NAME]"."""
    profile = HOST_PROFILES.get(name)
    return profile.what if profile else f"[hosts.{name}] of the experiment file"


def model_answer(a: adv.Advice, seconds: float, host: str = "") -> list[Any]:
    """The model's answer, to show in order: the host profile it assumed, its candidates
    (a table), the notes, the recommendation and runner-up or the limit that stops every
    candidate, the time."""
    shown: list[Any] = [Text(f"host profile: {host} ({host_text(host)}; docs/hosts.md)")] \
        if host else []
    shown += [_table(a), *(f"note: {note}" for note in a.notes)]
    if a.recommended is None:
        last = a.path[-1]
        shown.append(f"no allowed setting meets the goal in the model: the best, {last.text}: "
                     f"{_figures(last)}; limited by {last.limited_by}; what would lift it: "
                     f"{adv.LIFTS.get(last.limited_by, '?')}")
    else:
        r = a.recommended
        shown.append(f"model: {r.text} meets the goal ({_figures(r)}; cost: "
                     f"{adv.TIERS[r.tier]})")
        if a.runner_up is not None:
            shown.append(f"runner-up: {a.runner_up.text} ({_figures(a.runner_up)}; "
                         f"{adv.TIERS[a.runner_up.tier]})")
        shown.append("to paste into an experiment file:\n" + adv.snippet(r))
    return [*shown, f"model answered in {seconds:.2f} s"]


def confirm(s: adv.Scenario, a: adv.Advice, folder: Path, run_plan: RunPlan,
            how_many: int, show: Show) -> list[tuple[adv.Candidate, adv.Verdict]]:
    """Measure the model's best candidates (recommendation, runner-up; the best it found
    when nothing meets the goal) until one is confirmed; show each verdict. Returns
    every candidate measured with its verdict, the confirmed one (if any) last. A
    candidate this lab cannot carry (e.g. more memory than its kernel has) is recorded as
    not measured, with the reason, and the next one is tried: what was measured before it
    is never lost to it."""
    picks = [c for c in (a.recommended, a.runner_up) if c is not None] or [a.path[-1]]
    measured: list[tuple[adv.Candidate, adv.Verdict]] = []
    for i, cand in enumerate(picks[:how_many]):
        name = f"candidate-{i + 1}"
        plan = load(s, cand.changes, folder, name)
        t0 = time.monotonic()
        try:
            run_plan(plan, folder / name)
        except TestbedError as e:
            v = not_measured(cand, str(e))
            show(f"not measured: {cand.text}: {e}")
            measured.append((cand, v))
            continue
        v = adv.judge(a.goal, pd.read_csv(folder / name / "summary.csv"))
        show(_verdict_line(cand, v, time.monotonic() - t0, folder / name))
        measured.append((cand, v))
        if v.confirmed:
            break
    return measured


def not_measured(c: adv.Candidate, reason: str) -> adv.Verdict:
    """The verdict of a candidate the lab could not measure: no figures, the reason."""
    nan = math.nan
    return adv.Verdict(nan, nan, nan, nan, nan, c.model_MB_s, "lab", 0, False,
                       f"not measured in this lab: {reason}")


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
