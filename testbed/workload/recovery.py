"""What a fibre event cost a loader, read from its steps (pure functions, no I/O).

Given a run's steps, when its measured window began and when the events began and
ended (real seconds on the loaders' shared clock), cost() says, in emulated units:

  au_pre_pct       AU of the measured steps before the first event (the pace to get back to)
  au_min_pct       the lowest AU of one step from the event's start until recovery
  au_during_pct    AU from the first step the event touched to recovery
  recover_s        from the first event's end until the first step of a run of RUN steps
                   at the pre-event pace (no step slower than SLOW x the pre-event mean);
                   0 when no step was slowed; NaN when the window ended first
  extra_s          the time the steps from the first event on took beyond the pre-event
                   pace, over all events (a rerun of the same point without an event
                   gives 0 within the step times' noise)
  extra_over_duration  extra_s / (every event's duration together): 1 = the job lost
                   exactly the outage, > 1 it lost more (TCP's backoff, slow start)

A step is one accelerator step: it waits for its batch, then computes; the next starts
when it ends (testbed.workload.window.Step).
"""

from __future__ import annotations

import math
import statistics

from testbed.workload.window import Step, au

SLOW = 1.25  # a step this much slower than the pre-event mean is slowed by the event
RUN = 3      # steps at the pre-event pace in a row: recovered
PRE_MIN = 3  # steps before the event that set the pace (warm-up's last ones if needed)
COLUMNS = ("event_au_pre_pct", "event_au_min_pct", "event_au_during_pct", "event_recover_s",
           "event_extra_s", "event_extra_over_duration", "event_recovered")


def _duration(s: Step) -> float:
    return s.wait_s + s.compute_s


def pre_steps(steps: list[Step], window_start: float, event_start: float) -> list[Step]:
    """The steps that set the pre-event pace: the measured ones that ended before the
    event, or (fewer than PRE_MIN) the last PRE_MIN that ended before it."""
    before = [s for s in steps if s.end_s <= event_start]
    measured = [s for s in before if s.start_s >= window_start]
    return measured if len(measured) >= PRE_MIN else before[-PRE_MIN:]


def recovered_at(after: list[Step], event_end: float, pace_s: float) -> float | None:
    """The start of the first run of RUN steps at the pre-event pace that begins after
    the event's end (None: the steps ended first); `after` from the event's start on."""
    for i, s in enumerate(after):
        run = after[i:i + RUN]
        if s.start_s >= event_end and len(run) == RUN and \
                all(_duration(r) <= SLOW * pace_s for r in run):
            return s.start_s
    return None


def cost(steps: list[Step], window_start: float, events: list[tuple[float, float]],
         time_scale: float = 1.0) -> dict[str, float | bool]:
    """The cost columns (see the module docstring) of one loader's run; every figure NaN
    when there is no event or too few steps to tell."""
    nan: dict[str, float | bool] = dict.fromkeys(COLUMNS, math.nan)
    if not events:
        return nan
    (start, end), k = events[0], time_scale
    pre = pre_steps(steps, window_start, start)
    after = [s for s in steps if s.end_s > start]
    if len(pre) < 2 or not after:
        return nan
    pace = statistics.fmean(_duration(s) for s in pre)
    nxt = events[1][0] if len(events) > 1 else math.inf
    first = [s for s in after if s.start_s < nxt]
    back = recovered_at(first, end, pace)
    slowed = any(_duration(s) > SLOW * pace for s in first if back is None or
                 s.start_s < back)
    hit = [s for s in first if back is None or s.start_s < back] or first[:1]
    extra = (after[-1].end_s - after[0].start_s) - len(after) * pace
    outage = sum(b - a for a, b in events)
    return {
        "event_au_pre_pct": au(pre), "event_au_min_pct": min(100 * s.compute_s / max(
            _duration(s), 1e-12) for s in hit),
        "event_au_during_pct": au(hit),
        "event_recover_s": (max(0.0, back - end) / k if slowed else 0.0)
        if back is not None else math.nan,
        "event_extra_s": extra / k, "event_extra_over_duration": extra / outage,
        "event_recovered": back is not None,
    }
