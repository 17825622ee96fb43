"""Marks on a run's rows that the emulator, not the scenario, set a figure: the host's
evidence, kept apart from any process so that it can be tested without a kernel.

host_mark       a run during which its lab kernel waited for a host CPU for >=
                HOST_WAIT_PCT of its wall time is marked emulator-limited (reason "host"),
                whatever the guest saw: the guest's clock stops with it, so its own marks
                (cpu, timers) miss a kernel starved by its neighbours. The figure comes
                from the host's scheduler accounting (lab/run's meter): over the run's
                events as the host saw them (host_mark), or over the loaders' window as
                each row records it in host_wait_pct (host_mark_rows). Whoever receives a
                run applies them: the host that started its lab kernel, or the runner
                that is itself the one writer of results.csv.
marked, ok      what the rows say: the load-caused emulator reasons, or a measurement.
"""

from __future__ import annotations

import math
from typing import Any

# Calibrated on parallel_sweep (2026-12-03, UML 7.2, 2 CPUs): alone on a quiet machine a
# lab kernel waits 1-3 % of a run's wall time; beside another kernel and others' load 5-19 %,
# and latency-bound points then lost up to 2.4 AU points.
HOST_WAIT_PCT = 10.0


def _truthy(value: Any) -> bool:
    """A CSV-ish boolean (True, "True", "true", 1) as a bool."""
    return str(value).strip().lower() in ("true", "1", "yes")


# Marks that say what a point asked of the kernel, not how loaded the machine was: fewer
# lab kernels at once cannot cure them, so they neither back off nor re-measure a run.
NOT_LOAD = ("clock",)


def marked(rows: list[dict[str, Any]]) -> list[str]:
    """The emulator reasons of a run's rows that the machine's load can cause (empty:
    the emulator kept up, or only NOT_LOAD marks)."""
    reasons: list[str] = []
    for row in rows:
        if row.get("status", "ok") == "ok" and _truthy(row.get("emulator_limited")):
            reasons += [r for r in str(row.get("emulator_reason") or "?").split("+")
                        if r not in reasons and r not in NOT_LOAD]
    return reasons


def ok(rows: list[dict[str, Any]]) -> bool:
    """Whether a run's rows are a measurement (not a failure)."""
    return bool(rows) and all(r.get("status", "ok") == "ok" for r in rows)


def _mark_host(rows: list[dict[str, Any]]) -> bool:
    """Mark the measured rows among `rows` emulator-limited, reason "host" added once;
    True if there were any."""
    rows = [r for r in rows if r.get("status", "ok") == "ok"]
    for row in rows:
        reasons = [r for r in str(row.get("emulator_reason") or "").split("+") if r]
        row["emulator_reason"] = "+".join(reasons + (["host"] if "host" not in reasons
                                                     else []))
        row["emulator_limited"] = True
        row["limited_by"] = "emulator"
    return bool(rows)


def host_mark(event: dict[str, Any]) -> bool:
    """Mark a run's measured rows emulator-limited (reason "host") when its lab kernel
    waited for a host CPU >= HOST_WAIT_PCT of the run's wall time; True if it did."""
    if float(event.get("host_wait_pct", 0.0)) < HOST_WAIT_PCT:
        return False
    return _mark_host(event["rows"])


def _waited(row: dict[str, Any]) -> bool:
    """Whether a row's own host_wait_pct (blank or NaN: no meter) reached HOST_WAIT_PCT."""
    try:
        wait = float(row.get("host_wait_pct", math.nan))
    except (TypeError, ValueError):
        return False
    return math.isfinite(wait) and wait >= HOST_WAIT_PCT


def host_mark_rows(rows: list[dict[str, Any]]) -> bool:
    """Mark the measured rows whose own host_wait_pct (lab/run's meter over the loaders'
    window, recorded by the measuring kernel) reached HOST_WAIT_PCT, as host_mark marks
    a whole run; True if any was."""
    return _mark_host([r for r in rows if _waited(r)])
