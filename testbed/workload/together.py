"""Loaders that share a line, measured over one stretch of time.

Each worker's loader decides on its own when its measured window is complete
(window.Window). Workers on one line must not stop one by one: a worker that stops frees
its share of the line, and the others then measure alone on it (2026-12-04, metro.toml,
2 workers on one 1 Gbit/s span: one worker measured 5 s at 59.6 MB/s, the other 20 s at
77, and their sum, 135 MB/s, exceeded the ~119 MB/s the line carries). So:

  Together      the loaders of one point share a clock (t0) and keep loading, window
                complete or not, until every one of them is complete (or has failed)
  common_window every run's measured window cut to the stretch all of them measured:
                from the last warm-up's end to the first loader's last step

Together also says when the common window starts: `warm()` from each loader at the end of
its warm-up; once every loader has called it (or failed), `measuring` is set, its time
kept in `measuring_at` and `on_measuring` called with it (scheduled fibre events start
their clock there).

With one loader nothing changes.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Protocol, Sequence

from testbed.workload.window import Step


class Together:
    """The shared clock and the "every window complete" signal of a point's loaders."""

    def __init__(self, loaders: int,
                 on_measuring: Callable[[float], None] | None = None) -> None:
        self.t0 = time.perf_counter()
        self._left = self._cold = loaders
        self._lock = threading.Lock()
        self.complete = threading.Event()
        self.measuring = threading.Event()
        self.measuring_at: float | None = None
        self.on_measuring = on_measuring
        if loaders <= 0:
            self.complete.set()

    def warm(self) -> None:
        """One loader's warm-up has ended (or it failed); the last one starts the common
        window: measuring is set and on_measuring called with the time.perf_counter()."""
        with self._lock:
            self._cold -= 1
            if self._cold != 0:
                return
            self.measuring_at = time.perf_counter()
            self.measuring.set()
        if self.on_measuring is not None:
            self.on_measuring(self.measuring_at)

    def done(self) -> None:
        """One loader's window is complete (or the loader failed): it keeps loading until
        `complete` is set, so that the others keep sharing the line with it."""
        with self._lock:
            self._left -= 1
            if self._left <= 0:
                self.complete.set()


class Run(Protocol):
    """What common_window needs of a loader's run (workload.LoaderRun)."""

    steps: list[Step]
    warmup_steps: int | None
    error: str | None
    first: int | None
    stop: int | None


def _span(runs: Sequence[Run]) -> tuple[float, float] | None:
    """The stretch every measuring run was loading in: (start, end) in the shared clock's
    seconds, or None with fewer than two such runs."""
    live = [r for r in runs if r.error is None and r.warmup_steps is not None
            and r.warmup_steps < len(r.steps)]
    if len(live) < 2:
        return None
    assert all(r.warmup_steps is not None for r in live)
    start = max(r.steps[r.warmup_steps].start_s for r in live)  # type: ignore[index]
    return start, min(r.steps[-1].end_s for r in live)


def common_window(runs: Sequence[Run]) -> tuple[float, float] | None:
    """Cut every run's measured window (first, stop) to the steps that lie wholly in the
    stretch all of them measured; returns that stretch (None: one loader, left as is).
    A run with no step inside it measures nothing (first == stop)."""
    span = _span(runs)
    if span is None:
        return None
    start, end = span
    for r in runs:
        if r.error is not None or r.warmup_steps is None:
            continue
        inside = [i for i, s in enumerate(r.steps) if s.start_s >= start and s.end_s <= end]
        r.first, r.stop = (inside[0], inside[-1] + 1) if inside else (len(r.steps),) * 2
    return span
