"""Marks on a run's rows that the emulator, not the scenario, set a figure: the host's
evidence, kept apart from any process so that it can be tested without a kernel.

host_mark       a run during which the machine took CPU from its lab kernel is marked
                emulator-limited, whatever the guest saw (its clock runs on while it is
                not running, so its own marks, cpu and timers, miss a starved kernel),
                one reason per way of taking it (LOSSES): "host" when the kernel waited,
                runnable, for a CPU of the machine >= HOST_WAIT_PCT of its wall time (its
                neighbours, a cgroup's quota), "steal" when the hypervisor took >=
                STEAL_PCT of the machine's CPU time (the whole virtual machine was not
                running). The figures come from lab/run's meter: over the run's events as
                the host saw them (host_mark), or over the loaders' window as each row
                records them, host_wait_pct and host_steal_pct (host_mark_rows). Whoever
                receives a run applies them: the host that started its lab kernel, or the
                runner that is itself the one writer of results.csv.
marked, ok      what the rows say: the load-caused emulator reasons, or a measurement.
remeasure       the reasons for which a run is measured again: the machine took its CPU
                (MACHINE), and for a search probe any load-caused mark (a probe decides a
                bracket: a figure the machine may have set decides nothing).
"""

from __future__ import annotations

import math
from typing import Any

# Calibrated on parallel_sweep (2026-12-03, UML 7.2, 2 CPUs): alone on a quiet machine a
# lab kernel waits 1-3 % of a run's wall time; beside another kernel and others' load 5-19 %,
# and latency-bound points then lost up to 2.4 AU points.
HOST_WAIT_PCT = 10.0
# Steal is a share of the whole machine's CPU time, taken while every process in it, the
# lab kernel's timers included, stood still: on 2026-12-07 points read 7-12 AU low under
# 8-25 % of it, unmarked. A loss no meter sees (the lab kernel stopped 2-10 % of every
# 100 ms, benchmarks/steal_sensitivity.py, 2026-12-07) cost the demo's 1,500 km default
# point 1.8 AU at 2 % and 6.9 at 10 % (0.67 AU per %), its 3,000 km points 0.4 AU per %,
# compute-bound points nothing; on a quiet machine steal stayed <= 0.4 % over a point.
STEAL_PCT = 1.0
# The machine's ways of taking CPU from a lab kernel: (row column, reason, threshold %).
LOSSES = (("host_wait_pct", "host", HOST_WAIT_PCT), ("host_steal_pct", "steal", STEAL_PCT))
# Reasons that say the machine, not the point, set a figure: measuring again can cure them.
MACHINE = ("host", "steal")


def _truthy(value: Any) -> bool:
    """A CSV-ish boolean (True, "True", "true", 1) as a bool."""
    return str(value).strip().lower() in ("true", "1", "yes")


# Marks that say what a point asked of the kernel, not how loaded the machine was: fewer
# lab kernels at once cannot cure them, so they neither back off nor re-measure a run.
NOT_LOAD = ("clock", "tcg")


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


def remeasure(rows: list[dict[str, Any]], probe: bool = False) -> list[str]:
    """The reasons to measure a run again (empty: keep it): the machine took its lab
    kernel's CPU (MACHINE), or, for a search probe, any load-caused mark."""
    reasons = marked(rows)
    return reasons if probe else [r for r in reasons if r in MACHINE]


def _mean(rows: list[dict[str, Any]], column: str) -> float:
    """A column's mean over the rows that have it (NaN: none)."""
    values = [v for v in (_figure(r, column) for r in rows) if not math.isnan(v)]
    return sum(values) / len(values) if values else math.nan


# What a set-aside measurement is remembered by: (row column, words), where measured.
ASIDE = (("host_steal_pct", "steal {:.1f} %"), ("host_wait_pct", "host wait {:.1f} %"),
         ("au_pct", "AU {:.1f} %"), ("throughput_MB_s", "{:.1f} MB/s"))


def aside(rows: list[dict[str, Any]], why: list[str]) -> str:
    """One measurement set aside, in words: its marks and the figures it read, e.g.
    "emulator (steal): steal 14.2 %, host wait 1.0 %, AU 85.1 %, 71.3 MB/s"."""
    figures = [words.format(v) for column, words in ASIDE
               if not math.isnan(v := _mean(rows, column))]
    return f"emulator ({'+'.join(why)}): " + ", ".join(figures)


def _mark(rows: list[dict[str, Any]], reason: str) -> bool:
    """Mark the measured rows among `rows` emulator-limited, `reason` added once; True if
    there were any."""
    rows = [r for r in rows if r.get("status", "ok") == "ok"]
    for row in rows:
        reasons = [r for r in str(row.get("emulator_reason") or "").split("+") if r]
        row["emulator_reason"] = "+".join(reasons + ([reason] if reason not in reasons
                                                     else []))
        row["emulator_limited"] = True
        row["limited_by"] = "emulator"
    return bool(rows)


def _figure(source: dict[str, Any], column: str) -> float:
    """A meter's figure (NaN when blank, absent or not a number: no meter)."""
    try:
        value = float(source.get(column, math.nan))
    except (TypeError, ValueError):
        return math.nan
    return value if math.isfinite(value) else math.nan


def taken(figures: dict[str, Any]) -> list[str]:
    """The ways the machine took CPU from a lab kernel (LOSSES reasons) that a meter's
    figures (host_wait_pct, host_steal_pct) reach; empty: it did not."""
    return [reason for column, reason, limit in LOSSES if _figure(figures, column) >= limit]


def host_mark(event: dict[str, Any]) -> bool:
    """Mark a run's measured rows emulator-limited, one reason per way the machine took
    CPU from its lab kernel over the run (taken, from the host's figures in `event`);
    True if any was."""
    return any([_mark(event["rows"], reason) for reason in taken(event)])


def host_mark_rows(rows: list[dict[str, Any]]) -> bool:
    """Mark the measured rows whose own figures (lab/run's meter over the loaders' window,
    recorded by the measuring kernel) reached a LOSSES threshold, as host_mark marks a
    whole run; True if any was."""
    hit = False
    for column, reason, limit in LOSSES:
        hit |= _mark([r for r in rows if _figure(r, column) >= limit], reason)
    return hit
