"""A results folder's per-point table as GitHub markdown, for the README and docs/.

Why: the figures the documentation quotes must come from a results folder, not be typed
by hand, so that a page can be regenerated (and checked) against the folder it names.
Reads only the folder's small files: summary.csv (the per-point means and 95 % intervals
that `testbed run` wrote), search.csv and meta.json, plus an optional record.json for
what meta.json does not record (the date, the command that measured, the machine, the
wall time). Formats cells as the terminal report does (`report`'s helpers), so the two
never disagree. Returns text; never prints.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pandas as pd

from testbed.errors import ResultsError, SpecError
from testbed.experiment.advise import advice_grid
from testbed.experiment.report import report
from testbed.experiment.plan.plan import Plan, format_value

METRICS = ("RTT ms", "MB/s", "AU % (95 % CI)", "slowdown %", "model MB/s", "limited by")
RECORD = "record.json"  # what a run's meta.json does not hold; written by whoever keeps it


@dataclass
class Folder:
    """What the markdown is made of: the summary rows, the knobs the points differ by,
    the search's lines and the run's provenance."""

    path: Path
    summary: pd.DataFrame
    knobs: list[str]
    search: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    record: dict[str, Any] = field(default_factory=dict)


def _json(path: Path) -> dict[str, Any]:
    """A JSON object from a file ({} when absent); one-line error when unreadable."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ResultsError(f"{path}: not readable as JSON ({exc})") from exc
    return data if isinstance(data, dict) else {}


def knobs_of(point_ids: pd.Series) -> list[str]:
    """The knobs the points are named by ("distance_km=0|mount=default" -> distance_km,
    mount), in the order the point ids give them: the swept and searched knobs."""
    names: list[str] = []
    for pid in point_ids.astype(str):
        for part in pid.split("|"):
            name = part.split("=", 1)[0]
            if "=" in part and name not in names:
                names.append(name)
    return names


def load(path: Path) -> Folder:
    """Read a results folder; SpecError (one line) if it is not one."""
    if not path.is_dir():
        raise SpecError(f"report: {path}: no such results folder")
    csv = path / "summary.csv"
    if not csv.is_file():
        raise SpecError(f"report: {path}: no summary.csv (run or resume the experiment "
                        "there first: its report writes it)")
    try:
        summary = pd.read_csv(csv)
    except (OSError, ValueError) as exc:  # pandas' parser errors are ValueErrors
        raise ResultsError(f"{csv}: not readable as CSV ({exc})") from exc
    if summary.empty or "point_id" not in summary:
        raise ResultsError(f"{csv}: no points")
    summary["site"] = summary.get("site", pd.Series("", index=summary.index)) \
        .fillna("").astype(str)
    summary["n"] = summary.get("n", pd.Series(1, index=summary.index))
    summary["failed"] = summary.get("failed", pd.Series(0, index=summary.index))
    # _search_lines reads only the folder's search.csv; it takes no part of the plan.
    search = report._search_lines(cast(Plan, None), path)
    return Folder(path, summary, knobs_of(summary["point_id"]), search,
                  _json(path / "meta.json"), _json(path / RECORD))


def _head(knob: str) -> str:
    """A knob's column heading, as the terminal report shortens it."""
    return knob.replace("distance_km", "km").replace("fibre.", "")


def _knob_cell(value: Any) -> str:
    """A knob's value as in point ids: 3000, not 3000.0."""
    if isinstance(value, float) and value.is_integer():
        return format_value(float(value))
    return format_value(value) if not (isinstance(value, float) and math.isnan(value)) else ""


def _row(r: pd.Series, knobs: list[str], sites: bool, counts: bool,
         events: report.Cells | None = None) -> list[str]:
    """One table row: the knobs, then the metrics, then n when points differ in it."""
    cells = [_knob_cell(r.get(k, math.nan)) for k in knobs]
    cells += [str(r["site"])] if sites else []
    if "write_s" in r:  # a checkpoint run: the terminal report's columns
        cells += [cell(r) for _, cell in report.CHECKPOINT_CELLS]
    else:
        cells += [report._cell(r.get("rtt_ms", math.nan), 2),
                  report._pm(r, "throughput_MB_s"), report._pm(r, "au_pct"),
                  report._pm(r, "slowdown_pct"), report._rate(r.get("model_MB_s", math.nan)),
                  report._limit(r)]
        cells += [cell(r) for _, cell in events or []]
    if counts:
        failed = int(r.get("failed", 0) or 0)
        cells.append(f"{int(r['n'])}" + (f" ({failed} failed)" if failed else ""))
    return cells


def table(folder: Folder) -> list[str]:
    """The per-point table: swept knobs, then RTT, MB/s, AU, slowdown, model, limit."""
    s = folder.summary
    sites = s["site"].nunique() > 1
    counts = bool((s["n"] != 1).any() or s["failed"].astype(bool).any())
    events = report.event_cells(s)
    metrics = [h for h, _ in report.CHECKPOINT_CELLS] if "write_s" in s else \
        list(METRICS) + [h for h, _ in events]
    heads = [_head(k) for k in folder.knobs] + (["site"] if sites else []) + metrics
    heads += ["n"] if counts else []
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for _, r in s.iterrows():
        lines.append("| " + " | ".join(_row(r, folder.knobs, sites, counts, events)) + " |")
    return lines


EVENT_KNOBS = ("event", "event_duration_s")  # what a by-event table's columns are made of


def _event_label(r: pd.Series) -> str:
    """A by-event column's heading: "down 1 s", "reroute 0.05 s"."""
    return f"{r['event']} {_knob_cell(r['event_duration_s'])} s"


def _lost(r: pd.Series) -> str:
    """A by-event cell: training seconds the event cost (the model's as run, and what set
    it), or the mark of a point that failed or was not modelled."""
    if int(r.get("failed", 0) or 0):
        return "failed"
    got = report._cell(r.get("event_extra_s", math.nan), 2)
    model = report._cell(r.get("event_model_extra_s", math.nan), 2)
    why = str(r.get("event_limited_by", "") or "")
    marked = str(r.get("emulator_limited", "")).lower() == "true"
    emulator = f" [emulator: {r.get('emulator_reason', '')}]" if marked else ""
    return got + (f" ({model}, {why})" if model else "") + emulator


def event_table(folder: Folder) -> list[str]:
    """The events as a grid, for a page with no room for one row per point: a row per
    setting the points share (the swept knobs but the event's), a column per event
    (kind and duration), each cell the training seconds it cost, then the model's as run
    and what set it. Baselines (no event) are left out. SpecError when the folder has no
    events."""
    s = folder.summary
    if not report.event_cells(s) or any(k not in s for k in EVENT_KNOBS):
        raise SpecError(f"report: {folder.path}: no fibre events to tabulate (--by-event)")
    s = s[s["event"].astype(str) != "none"]
    rows = [k for k in folder.knobs if k not in EVENT_KNOBS and k in s
            and s[k].nunique() > 1]
    columns = list(dict.fromkeys(_event_label(r) for _, r in s.iterrows()))
    lines = ["| " + " | ".join([_head(k) for k in rows] + columns) + " |",
             "|" + "---|" * (len(rows) + len(columns))]
    for key, group in s.groupby(rows, sort=False) if rows else [((), s)]:
        key = key if isinstance(key, tuple) else (key,)
        cells = {_event_label(r): _lost(r) for _, r in group.iterrows()}
        lines.append("| " + " | ".join([_knob_cell(v) for v in key]
                                       + [cells.get(c, "") for c in columns]) + " |")
    return lines


def _kernel(env: dict[str, Any]) -> str:
    """The kernel a run measured on, e.g. "user-mode Linux 7.2.7, 1 CPU" (", virtual
    clock" when lab/run --clock gave it one)."""
    kind = {"uml": "user-mode Linux", "qemu-tcg": "the lab VM (QEMU TCG), Linux",
            "qemu-kvm": "the lab VM (KVM), Linux"}.get(str(env.get("kernel_kind", "")), "Linux")
    cpus = f", {env['cpus']} CPU" if env.get("cpus") else ""
    clock = {"virtual": ", virtual clock", "infcpu": ", virtual clock with free CPU"}.get(
        str(env.get("clock", "real")), "")
    return f"{kind} {env.get('kernel', '?')}{cpus}{clock}"


def provenance(folder: Folder, command: str) -> str:
    """The line under the table: the command that printed it and where its figures were
    measured (commit, date, kernel, machine, and the command that measured them)."""
    env = folder.meta.get("environment", {})
    rec = folder.record
    commit = str(env.get("git_commit") or rec.get("commit") or "unknown")[:7]
    date = rec.get("date") or str(env.get("started_utc", ""))[:10] or "date not recorded"
    machine = rec.get("machine") or (f"host CPUs {env['host_cpu']}" if env.get("host_cpu")
                                     else "")
    where = "; ".join(str(p) for p in (date, _kernel(env), machine) if p)
    text = f"Generated by `{command}` from a run at commit {commit} ({where})"
    measured_by = rec.get("command") or env.get("argv")
    if measured_by:
        text += f": `{measured_by}`"
    if rec.get("wall_time"):
        text += f", wall time {rec['wall_time']}"
    return text + "."


def machine(folder: Folder) -> str:
    """What the machine took from the run, from summary.csv (older folders did not
    meter steal: ""): the most steal over a point, and the runs measured again."""
    s = folder.summary
    if "host_steal_pct" not in s or not s["host_steal_pct"].notna().any():
        return ""
    again = int(s["remeasured"].fillna(0).sum()) if "remeasured" in s else 0
    return (f"The machine during the run: steal up to {s['host_steal_pct'].max():.1f} % of "
            f"its CPU over a point, host wait up to {s['host_wait_pct'].max():.1f} %; "
            f"{again} measurement(s) set aside and measured again.")


def render(path: Path, command: str | None = None, by_event: bool = False) -> str:
    """The whole markdown of a results folder: table (by_event: event_table), search
    lines, provenance (or of a folder of advise answers: advice_grid)."""
    command = command or f"testbed report {path} --markdown" + (" --by-event" if by_event
                                                                 else "")
    if advice_grid.is_grid(path):
        return advice_grid.render(path, command, _kernel)
    folder = load(path)
    lines = event_table(folder) if by_event else table(folder)
    if folder.search:
        lines += ["", "```"] + folder.search + ["```"]
    lines += ["", provenance(folder, command)] + ([machine(folder)] if machine(folder)
                                                  else [])
    return "\n".join(lines) + "\n"
