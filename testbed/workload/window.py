"""The measured window of a loader run: when warm-up ends, when the window is long enough,
and the statistics over it. Pure functions of per-step timings (no I/O).

Warm-up ends, measured rather than counted, at the first step where (1) the loader has
read at least `warmup_bytes` (the caller sets it from the path: a few bandwidth-delay
products and the loader's depth, so that TCP has left slow start and read-ahead has
ramped up), (2) at least warmup_min_s has passed, and (3) the step time has settled: the
mean of the last `block` steps is within stable_pct of the mean of the `block` before. A
warm-up that has not settled by warmup_max_s ends there and says so (settled = False).

The measured window then runs for at least measure_s and min_steps, and on until the 95 %
interval of AU is within au_ci_target points or measure_max_s has passed (but never ends
before min_steps: a window of one slow step measures nothing). A window whose
accelerator waits (AU so far below STALL_AU) runs for at least measure_stall_s: its
stalls come in stretches seconds long (the readers' phase against the steps), so a short
window measures one stretch, and reruns of a point near its bound disagreed by more than
their intervals (2.5 AU points with 5-8 s windows, the demo at 1,750 km). The interval is
over batch means (BATCHES contiguous batches of steps, or each step when there are fewer),
so correlated neighbouring steps do not make it look narrower than it is.

AU = compute time / all wall time of the window, the gaps between steps included.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace

from testbed import schema
from testbed.errors import SpecError
from testbed.stats import mean_ci

BATCHES = 10
STALL_AU = 99.0  # below this AU the accelerator waits: measure_stall_s applies
# The knobs of the window (the schema's rows for it); the loader's spec carries them under
# the same names.
WINDOW_ROWS = schema.knobs_of("window")


@dataclass(frozen=True)
class WindowSpec:
    """When warm-up ends and how long to measure (see the module docstring); seconds are
    real seconds of this run (a dilated run scales them with scaled())."""

    warmup_bytes: int = 0
    warmup_min_s: float = 0.5
    warmup_max_s: float = schema.default("warmup_max_s")
    measure_s: float = schema.default("measure_s")
    measure_max_s: float = schema.default("measure_max_s")
    min_steps: int = schema.default("min_steps")
    au_ci_target: float = schema.default("au_ci_target")
    stable_pct: float = 10.0
    block: int = 3
    measure_stall_s: float = schema.default("measure_stall_s")

    def __post_init__(self) -> None:
        if self.measure_max_s < max(self.measure_s, self.measure_stall_s):
            raise SpecError(f"measure_max_s ({self.measure_max_s:g}) is below measure_s "
                            f"({self.measure_s:g}) or measure_stall_s "
                            f"({self.measure_stall_s:g})")

    def scaled(self, k: float) -> WindowSpec:
        """The same window with every duration k times longer (time dilation)."""
        return replace(self, warmup_min_s=self.warmup_min_s * k,
                       warmup_max_s=self.warmup_max_s * k, measure_s=self.measure_s * k,
                       measure_max_s=self.measure_max_s * k,
                       measure_stall_s=self.measure_stall_s * k)


@dataclass(frozen=True)
class Step:
    """One training step: it began (waiting for its batch) at start_s after the loader
    started, waited wait_s, computed compute_s, and its batch held `bytes` in `samples`."""

    index: int
    start_s: float
    wait_s: float
    compute_s: float
    bytes: int
    samples: int

    @property
    def end_s(self) -> float:
        """When the step's compute ended."""
        return self.start_s + self.wait_s + self.compute_s


def au(steps: list[Step]) -> float:
    """AU (%) of consecutive steps: their compute over all wall time from the first
    step's start to the last step's end."""
    wall = steps[-1].end_s - steps[0].start_s if steps else 0.0
    return 100.0 * sum(s.compute_s for s in steps) / wall if wall > 0 else math.nan


def batches(steps: list[Step], n: int = BATCHES) -> list[list[Step]]:
    """`steps` cut into n contiguous batches of (nearly) equal length; fewer steps than n
    (a dilated point's few long steps) are each their own batch, so that the interval is
    still estimated (wider: fewer degrees of freedom)."""
    n = min(n, len(steps))
    if n == 0:
        return []
    size = len(steps) / n
    return [steps[round(i * size):round((i + 1) * size)] for i in range(n)]


def au_ci(steps: list[Step]) -> tuple[float, float]:
    """AU over the steps and the half-width of its 95 % interval from batch means."""
    return au(steps), mean_ci([au(b) for b in batches(steps)])[1]


class Window:
    """Fed one step at a time, decides when warm-up ends and when to stop."""

    def __init__(self, spec: WindowSpec) -> None:
        self.spec = spec
        self.steps: list[Step] = []
        self.warmup_steps: int | None = None  # index of the first measured step
        self.settled = False
        self.bytes = 0

    def measured(self) -> list[Step]:
        """The steps of the measured window (after warm-up)."""
        return [] if self.warmup_steps is None else self.steps[self.warmup_steps:]

    def _step_times(self, last: int) -> list[float]:
        s = self.steps[-last:]
        return [b.start_s - a.start_s for a, b in zip(s, s[1:])]

    def _stable(self) -> bool:
        k = self.spec.block
        if len(self.steps) < 2 * k + 1:
            return False
        times = self._step_times(2 * k + 1)
        before, after = statistics.fmean(times[:k]), statistics.fmean(times[k:])
        return abs(after - before) <= self.spec.stable_pct / 100.0 * max(before, 1e-9)

    def _warm(self, step: Step) -> bool:
        if step.end_s >= self.spec.warmup_max_s:
            return True
        return (self.bytes >= self.spec.warmup_bytes and step.end_s >= self.spec.warmup_min_s
                and self._stable())

    def add(self, step: Step) -> bool:
        """Record a step; False when the window is complete (stop the loader)."""
        self.steps.append(step)
        self.bytes += step.bytes
        if self.warmup_steps is None:
            if self._warm(step):
                self.warmup_steps = len(self.steps)
                self.settled = self._stable()
            return True
        measured = self.measured()
        span = measured[-1].end_s - measured[0].start_s
        if len(measured) < self.spec.min_steps:
            return True  # never a window of fewer steps than min_steps
        if span >= self.spec.measure_max_s:
            return False
        if span < self.spec.measure_s:
            return True
        now, ci = au_ci(measured)
        if span < self.spec.measure_stall_s and now < STALL_AU:
            return True
        return not ci <= self.spec.au_ci_target
