"""[search]: the user's question answered, not read off a grid. For every setting (the
sweep's product without the searched knob) find where a target such as `au_pct >= 90`
stops holding as the knob grows, to within `tolerance`, by bisection: measure the range's
ends (or reuse grid points), then probe inside the bracket [last value that meets, first
that does not]. The answer is that bracket with the metric measured at both ends; it
assumes the metric is monotonic in the knob over the range (a violation is reported).

One probe must not move the answer. A probe's side is decided from an interval that
covers a rerun (its runs' own intervals and the rerun spread known for its kind of point,
reruns.RERUN_SD; with three runs or more, their own spread if larger): a probe whose
interval holds the target is measured again (another repetition, a new file order) until
it decides or has max_runs runs, and is then left undecided. A run the emulator marked
(after the runner measured it again: runner.MAX_REMEASURE) is no evidence either way; a
probe with nothing else is left undecided too, naming the marks. Undecided probes sit in
the bracket without closing it: the search probes the gaps beside them, and the
crossing's ± is the half-width of the bracket between decided probes.

Results go to search.csv (one row per setting) and into the report.
"""

from __future__ import annotations

import csv
import math
import statistics
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from testbed import atomic
from testbed.experiment.record import marks, record, reruns, summary
from testbed.experiment.plan.dimensions import Key
from testbed.experiment.plan.parse import SearchSpec
from testbed.experiment.plan.plan import Plan, Point, fixed_assignment, format_value, search_settings
from testbed.results import ResultStore
from testbed.stats import Z95, t95


@dataclass(frozen=True)
class Verdict:
    """A probe's side of the target: "meets", "fails" or "undecided", from the mean of
    its unmarked runs and the 95 % half-width that covers a rerun; `marks` names what
    the emulator marked in the runs set aside (empty: none)."""

    side: str
    mean: float
    half: float
    runs: int
    marks: str = ""

    def text(self) -> str:
        """The probe's evidence in words: "90.3 ± 1.2 over 5 runs"."""
        seen = (f"{self.mean:.1f} ± {self.half:.1f}" if math.isfinite(self.half)
                else f"{self.mean:.1f}") if self.runs else "nothing measured"
        marked = f"; emulator ({self.marks})" if self.marks else ""
        return f"{seen} over {self.runs} run{'s' * (self.runs != 1)}{marked}"


def _runs(rows: pd.DataFrame, metric: str) -> pd.DataFrame:
    """A probe's unmarked measured runs: per run, the metric's mean over its workers and
    its own standard error (batch means, from the row's own interval where it has one)."""
    ok = summary.ok_rows(rows)
    ok = ok[~ok.get("emulator_limited", pd.Series(False, index=ok.index))
            .astype(str).str.lower().eq("true")]
    own = summary.CI_OF.get(metric)
    se = ok[own] / Z95 if own and own in ok else pd.Series(0.0, index=ok.index)
    return pd.DataFrame({"run": ok["point"], "value": ok[metric], "se": se.fillna(0.0)}) \
        .groupby("run").mean()


def interval(values: list[float], ses: list[float], spread: float) -> float:
    """The 95 % half-width of the mean of n runs: each run's own variance and the rerun
    spread's (n runs: / n); from three runs on, their own spread's t interval if wider."""
    n = len(values)
    if n == 0:
        return math.nan
    half = Z95 * math.sqrt((statistics.fmean(s * s for s in ses) + spread ** 2) / n)
    if n >= 3:
        half = max(half, t95(n) * statistics.stdev(values) / math.sqrt(n))
    return half


def decide(spec: SearchSpec, rows: pd.DataFrame) -> Verdict:
    """A probe's verdict from its rows (all runs of the probed point, marked or not)."""
    runs = _runs(rows, spec.metric)
    kinds = rows.loc[rows["point"].isin(runs.index), "limited_by"] if "limited_by" in rows \
        else pd.Series(dtype=str)
    kind = str(kinds.mode().iloc[0]) if len(kinds) else ""
    marked = ", ".join(marks.marked(rows.to_dict("records")))
    if runs.empty:
        return Verdict("undecided", math.nan, math.nan, 0, marked or "no run measured")
    mean = float(runs["value"].mean())
    half = interval(list(runs["value"]), list(runs["se"]), reruns.rerun_sd(spec.metric, kind))
    lo, hi = spec.meets(mean - half), spec.meets(mean + half)
    side = "meets" if lo and hi else "fails" if not (lo or hi) else "undecided"
    return Verdict(side, mean, half, len(runs), marked)


@dataclass
class Bracket:
    """What a search knows: values that met the target, values that did not, and values
    it could not decide (see the module docstring)."""

    meets: dict[float, Verdict] = field(default_factory=dict)
    fails: dict[float, Verdict] = field(default_factory=dict)
    undecided: dict[float, Verdict] = field(default_factory=dict)

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

    def widest_gap(self) -> tuple[float, float] | None:
        """The widest stretch between probed values inside [last_meet, first_fail] (the
        undecided ones divide it); None without both ends."""
        a, b = self.last_meet, self.first_fail
        if a is None or b is None:
            return None
        inside = sorted({a, b, *(v for v in self.undecided if a < v < b)})
        return max(zip(inside, inside[1:]), key=lambda g: g[1] - g[0])

    def file(self, value: float, verdict: Verdict) -> None:
        """File a probe's verdict under its side."""
        {"meets": self.meets, "fails": self.fails}.get(verdict.side, self.undecided)[value] \
            = verdict


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


def _rows(store: ResultStore, point: Point) -> pd.DataFrame:
    """Every measured row of a point in results.csv (all its repetitions), with the
    slowdown columns (a target may be on slowdown_pct)."""
    df = summary.with_slowdown(summary.latest_runs(store.frame()))
    return df[df["point_id"] == point.id]


class Search:
    """One setting's bisection (see the module docstring)."""

    def __init__(self, plan: Plan, runner: Any, store: ResultStore,
                 setting: dict[Key, Any]) -> None:
        """An empty bracket for one setting of the plan's search."""
        assert plan.search is not None
        self.plan, self.spec = plan, plan.search
        self.runner, self.store, self.setting = runner, store, setting
        self.bracket = Bracket()
        self.probes = 0
        self.runs = 0

    def _measure(self, point: Point, reps: range, probe: bool) -> None:
        """The repetitions of a point not in results.csv yet (a resumed search reuses
        them), measured in order."""
        done = self.store.done()
        for rep in reps:
            if point.run_id(rep) not in done:
                self.runner.measure(point, rep, probe=probe)

    def probe(self, value: float) -> Verdict:
        """Measure the knob at `value` (its baseline, then the plan's repetitions of the
        point, then more while its verdict is undecided and max_runs allows), and file
        its verdict in the bracket."""
        *baselines, point = _points(self.plan, self.setting, value)
        for b in baselines:
            self._measure(b, range(self.plan.repetitions), probe=False)
        reps = self.plan.repetitions
        self._measure(point, range(reps), probe=True)
        verdict = decide(self.spec, _rows(self.store, point))
        while verdict.side == "undecided" and reps < self.spec.max_runs:
            self._measure(point, range(reps, reps + 1), probe=True)
            reps += 1
            verdict = decide(self.spec, _rows(self.store, point))
        self.probes += 1
        self.runs += reps
        self.bracket.file(value, verdict)
        return verdict

    def run(self) -> dict[str, Any]:
        """Probe the range's ends and the grid's values, then the widest gap inside the
        bracket until every gap is within tolerance or the probe budget is spent."""
        grid = [float(v) for v in self.plan.resolver.raw.sweep.get(self.spec.key, [])
                if self.spec.lo <= v <= self.spec.hi]
        for v in sorted({self.spec.lo, self.spec.hi, *grid}):  # grid values: measured
            self.probe(v)
        while self.probes < self.spec.max_points + len(grid):
            gap = self.bracket.widest_gap()
            if gap is None or gap[1] - gap[0] <= self.spec.tolerance:
                break
            mid = _value(self.plan, (gap[0] + gap[1]) / 2)
            if mid in gap:
                break
            self.probe(mid)
        return self.result()

    def _note(self) -> str:
        """What the answer cannot say: not monotonic, or met/failed over the whole range."""
        a, b = self.bracket.last_meet, self.bracket.first_fail
        if not self.bracket.monotonic:
            return "not monotonic: a larger value met the target"
        if a is None:
            return f"fails already at {format_value(self.spec.lo)}"
        if b is None:
            return f"meets over the whole range, up to {format_value(self.spec.hi)}"
        return ""

    def result(self) -> dict[str, Any]:
        """The search.csv row for this setting."""
        a, b = self.bracket.last_meet, self.bracket.first_fail
        both = a is not None and b is not None
        return {"setting": "|".join(f"{k.column}={format_value(v)}"
                                    for k, v in self.setting.items()) or "all",
                "knob": self.spec.key.text, "target": self.spec.text,
                "meets_up_to": a, "fails_from": b,
                "metric_at_meets": self.bracket.meets[a].mean if a is not None else math.nan,
                "metric_at_fails": self.bracket.fails[b].mean if b is not None else math.nan,
                "half_at_meets": self.bracket.meets[a].half if a is not None else math.nan,
                "half_at_fails": self.bracket.fails[b].half if b is not None else math.nan,
                "crossing": (a + b) / 2 if both else math.nan,  # type: ignore[operator]
                "uncertainty": (b - a) / 2 if both else math.nan,  # type: ignore[operator]
                "points": self.probes, "runs": self.runs,
                "undecided": "; ".join(f"{format_value(v)}: {d.text()}"
                                       for v, d in sorted(self.bracket.undecided.items())),
                "note": self._note()}


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
