"""[search]: the user's question answered, not read off a grid. For every setting (the
sweep's product without the searched knob) find where a target such as `au_pct >= 90`
stops holding as the knob grows, to within `tolerance`, by bisection: measure the range's
ends (or reuse grid points), then halve the bracket [last value that meets, first that
does not]. The answer is that bracket with the metric measured at both ends; it assumes
the metric is monotonic in the knob over the range (a violation is reported).

Results go to search.csv (one row per setting) and into the report.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from testbed import atomic
from testbed.experiment.record import record, summary
from testbed.experiment.plan.dimensions import Key
from testbed.experiment.plan.plan import Plan, Point, fixed_assignment, format_value, search_settings
from testbed.results import ResultStore


@dataclass
class Bracket:
    """What a search knows: values that met the target and values that did not."""

    meets: dict[float, float]
    fails: dict[float, float]

    @property
    def last_meet(self) -> float | None:
        """The largest value below every failing one that met the target."""
        below = [v for v in self.meets if not self.fails or v < min(self.fails)]
        return max(below) if below else None

    @property
    def first_fail(self) -> float | None:
        """The smallest failing value above the last meeting one."""
        lm = self.last_meet
        above = [v for v in self.fails if lm is None or v > lm]
        return min(above) if above else None

    @property
    def monotonic(self) -> bool:
        """False when some value met the target above one that failed."""
        return not (self.meets and self.fails and max(self.meets) > min(self.fails))


def expected_probes(plan: Plan) -> int:
    """Probes a bisection needs per setting: the range's ends and log2(range/tolerance)
    halvings (capped by max_points)."""
    s = plan.search
    if s is None:
        return 0
    return min(s.max_points, 2 + math.ceil(math.log2(max(1.0, (s.hi - s.lo) / s.tolerance))))


def max_runs(plan: Plan) -> int:
    """The (point, repetition) runs the search is expected to add (for progress and the
    estimate; grid values it reuses are free)."""
    if plan.search is None:
        return 0
    return len(search_settings(plan.resolver.raw)) * expected_probes(plan) * plan.repetitions


def _value(plan: Plan, v: float) -> float:
    """A probe value on a grid of tolerance / 4 (ints: whole numbers), within the range."""
    s = plan.search
    assert s is not None
    step = s.tolerance / 4
    v = min(s.hi, max(s.lo, round(v / step) * step))
    return float(round(v)) if s.key.dim.kind == "int" else float(v)


def _points(plan: Plan, setting: dict[Key, Any], value: float) -> list[Point]:
    """The point at `value` of a setting, preceded by its baseline if it is not one."""
    s = plan.search
    assert s is not None
    v: Any = int(value) if s.key.dim.kind == "int" else value
    assignment = {**fixed_assignment(plan), **setting, s.key: v}
    point = plan.resolver.point(assignment, plan.id_keys)
    if point.is_baseline:
        return [point]
    return [plan.resolver.point(plan.resolver.baseline_assignment(assignment), plan.id_keys),
            point]


def _metric(plan: Plan, store: ResultStore, point: Point) -> float:
    """The searched metric of a measured point: the mean over its ok rows."""
    assert plan.search is not None
    df = summary.ok_rows(summary.with_slowdown(store.frame()))
    rows = df[df["point_id"] == point.id]
    return float(rows[plan.search.metric].mean()) if len(rows) else math.nan


class Search:
    """One setting's bisection (see the module docstring)."""

    def __init__(self, plan: Plan, runner: Any, store: ResultStore,
                 setting: dict[Key, Any]) -> None:
        """An empty bracket for one setting of the plan's search."""
        self.plan, self.runner, self.store, self.setting = plan, runner, store, setting
        self.bracket = Bracket({}, {})
        self.probes = 0

    def probe(self, value: float) -> None:
        """Measure the knob at `value` (all repetitions; reusing what is in results.csv)
        and file the outcome in the bracket."""
        assert self.plan.search is not None
        points = _points(self.plan, self.setting, value)
        done = self.store.done()
        for p in points:
            for rep in range(self.plan.repetitions):
                if p.run_id(rep) not in done:
                    self.runner.measure(p, rep)
        point = points[-1]
        self.probes += 1
        metric = _metric(self.plan, self.store, point)
        target = self.bracket.meets if self.plan.search.meets(metric) else self.bracket.fails
        target[value] = metric

    def run(self) -> dict[str, Any]:
        """Bisect until the bracket is within tolerance or the probe budget is spent."""
        s = self.plan.search
        assert s is not None
        grid = [float(v) for v in self.plan.resolver.raw.sweep.get(s.key, [])
                if s.lo <= v <= s.hi]
        for v in sorted({s.lo, s.hi, *grid}):  # grid values are measured already: free
            self.probe(v)
        while self.probes < s.max_points + len(grid):
            a, b = self.bracket.last_meet, self.bracket.first_fail
            if a is None or b is None or b - a <= s.tolerance:
                break
            mid = _value(self.plan, (a + b) / 2)
            if mid in (a, b):
                break
            self.probe(mid)
        return self.result()

    def result(self) -> dict[str, Any]:
        """The search.csv row for this setting."""
        s = self.plan.search
        assert s is not None
        a, b = self.bracket.last_meet, self.bracket.first_fail
        note = "" if self.bracket.monotonic else "not monotonic: a larger value met the target"
        if a is None:
            note = note or f"fails already at {format_value(s.lo)}"
        elif b is None:
            note = note or f"meets over the whole range, up to {format_value(s.hi)}"
        crossing = (a + b) / 2 if a is not None and b is not None else math.nan
        return {"setting": "|".join(f"{k.column}={format_value(v)}"
                                    for k, v in self.setting.items()) or "all",
                "knob": s.key.text, "target": s.text, "meets_up_to": a, "fails_from": b,
                "metric_at_meets": self.bracket.meets.get(a, math.nan) if a is not None
                else math.nan,
                "metric_at_fails": self.bracket.fails.get(b, math.nan) if b is not None
                else math.nan,
                "crossing": crossing,
                "uncertainty": (b - a) / 2 if a is not None and b is not None else math.nan,
                "points": self.probes, "note": note}


def run(plan: Plan, runner: Any, store: ResultStore) -> list[dict[str, Any]]:
    """Run the plan's search for every setting; write search.csv; its rows."""
    out = [Search(plan, runner, store, setting).run()
           for setting in search_settings(plan.resolver.raw)]
    with atomic.replacing(store.out / "search.csv") as tmp, open(tmp, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=record.SEARCH_COLUMNS)
        w.writeheader()
        w.writerows(out)
    return out


def read(out: Any) -> pd.DataFrame:
    """search.csv of a results folder (empty if there was no search)."""
    path = out / "search.csv"
    return pd.read_csv(path) if path.exists() else pd.DataFrame(columns=record.SEARCH_COLUMNS)
