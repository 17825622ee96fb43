"""The report of a results folder: per-point summaries with 95 % intervals
(summary.csv), the table a person reads, what the search found, failures, DLIO-style
summary.json per point, results.parquet and the plot. Reads only results.csv (and
search.csv), so a report can be rebuilt from any results folder, resumed or merged.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pandas as pd
from rich.table import Table

from testbed import atomic, kernel, plots, results
from testbed.errors import ResultsError
from testbed.experiment.run import search as search_mod
from testbed.experiment.plan import kinds
from testbed.experiment.report import event_plot
from testbed.experiment.record import summary
from testbed.experiment.measure.capture import slug
from testbed.experiment.plan.dimensions import Key
from testbed.experiment.plan.plan import Plan, format_value
from testbed.workload.dlio_checkpoint import REALISTIC_INTERVAL_S


@dataclass
class Report:
    """What `testbed run` prints and writes at the end."""

    table: Table
    lines: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    failed: int = 0


def _x_key(plan: Plan) -> Key | None:
    """The plot's x axis: the searched knob, else a swept knob with a baseline (distance,
    loss, jitter), else the first swept knob."""
    if plan.search is not None:
        return plan.search.key
    with_base = [k for k in plan.swept if k.dim.baseline is not None]
    candidates = with_base or list(plan.swept)
    return candidates[0] if candidates else None


def _plan_order(plan: Plan, df: pd.DataFrame) -> pd.DataFrame:
    """The rows with the plan's grid points in the plan's order, then any others (search
    probes) in the order they were written: runs measured in parallel arrive in any order."""
    rank = {p.id: i for i, p in enumerate(plan.points)}
    key = df["point_id"].map(lambda p: rank.get(p, len(rank)))
    return df.iloc[key.reset_index(drop=True).sort_values(kind="stable").index]


def _per_point(plan: Plan, df: pd.DataFrame) -> pd.DataFrame:
    """summary.csv: one row per (point, site) with the point's knob values."""
    by = ["point_id", "site"]
    s = summary.summarise(_plan_order(plan, df), by)
    first = df.groupby(by, sort=False).first()
    for key in plan.id_keys:
        s[key.column] = [first.loc[(p, site), key.column] for p, site in zip(s.point_id, s.site)]
    s["baseline"] = [bool(first.loc[(p, site), "baseline"]) for p, site in zip(s.point_id, s.site)]
    return s


def _cell(value: Any, digits: int = 1) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.{digits}f}"
    return str(value)


def _rate(value: float) -> str:
    """A rate in MB/s: one decimal, or three significant figures below 1 (an LLM's token
    stream reads 0.0376 MB/s, not 0.0)."""
    if value != value:
        return ""
    return f"{value:.3g}" if 0 < abs(value) < 1 else f"{value:.1f}"


def _pm(row: pd.Series, metric: str, digits: int = 1) -> str:
    mean, ci = row.get(metric, math.nan), row.get(f"{metric}_ci", math.nan)
    if mean != mean:
        return "failed" if row.get("failed", 0) else ""
    if metric.endswith("MB_s") and 0 < abs(mean) < 1:
        return _rate(mean) + (f" ± {_rate(ci)}" if ci == ci else "")
    return f"{mean:.{digits}f}" + (f" ± {ci:.{digits}f}" if ci == ci else "")


# The table's measured columns after the point's knobs: (heading, cell of a summary row),
# per kind of workload (experiment.kinds).
Cells = list[tuple[str, Callable[[pd.Series], str]]]
LOADER_CELLS: Cells = [
    ("RTT ms", lambda r: _cell(r.get("rtt_ms", math.nan), 2)),
    ("MB/s", lambda r: _pm(r, "throughput_MB_s")), ("AU %", lambda r: _pm(r, "au_pct")),
    ("slowdown %", lambda r: _pm(r, "slowdown_pct")),
    ("model MB/s", lambda r: _rate(r.get("model_MB_s", math.nan))),
    ("limited by", lambda r: _limit(r))]
# A run with fibre events: what each point's event cost next to the outage model.
EVENT_CELLS: Cells = [
    ("event", lambda r: str(r.get("event_what", "") or "")),
    ("lost s", lambda r: _cell(r.get("event_extra_s", math.nan), 2)),
    ("model s", lambda r: _cell(r.get("event_model_extra_s", math.nan), 2)),
    ("model s (k=1)", lambda r: _cell(r.get("event_model_extra_k1_s", math.nan), 2)),
    ("recover s", lambda r: _cell(r.get("event_recover_s", math.nan), 2)),
    ("AU min %", lambda r: _cell(r.get("event_au_min_pct", math.nan), 0)),
    ("RTOs", lambda r: _cell(r.get("tcp_rto_timeouts", math.nan), 0)),
    ("cost set by", lambda r: str(r.get("event_limited_by", "") or ""))]


def event_cells(s: pd.DataFrame) -> Cells:
    """EVENT_CELLS when the summary has fibre events, else none."""
    return EVENT_CELLS if "event_extra_s" in s and s["event_extra_s"].notna().any() else []


CHECKPOINT_CELLS: Cells = [
    ("RTT ms", lambda r: _cell(r.get("rtt_ms", math.nan), 2)),
    ("k", lambda r: f"{r.get('time_scale_k', math.nan):g}"),
    ("write s", lambda r: _pm(r, "write_s", 3)), ("read s", lambda r: _pm(r, "read_s", 3)),
    ("MB/s/rank", lambda r: _rate(r.get("write_MB_s", math.nan))),
    ("model s", lambda r: _cell(r.get("write_model_s", math.nan), 3)),
    ("x model", lambda r: _cell(r.get("write_s", math.nan)
                                / r.get("write_model_s", math.nan), 2)),
    ("limited by", lambda r: _limit(r)),
    ("full: write s", lambda r: _cell(r.get("write_full_model_s", math.nan), 2)),
    ("full: lost %", lambda r: _cell(r.get("full_lost_pct", math.nan), 1)),
    (f"full: lost % at {REALISTIC_INTERVAL_S / 60:g} min",
     lambda r: _cell(_lost_pct(r.get("write_full_model_s", math.nan), REALISTIC_INTERVAL_S),
                     2)),
    ("full: limited by", lambda r: str(r.get("full_limited_by", "") or ""))]


def _lost_pct(write_s: float, interval_s: float) -> float:
    """The training time a checkpoint of write_s seconds every interval_s loses (%)."""
    return 100.0 * write_s / (interval_s + write_s) if write_s == write_s else math.nan


def _table(plan: Plan, s: pd.DataFrame) -> Table:
    sites = s["site"].nunique() > 1
    measured = CHECKPOINT_CELLS if kinds.name_of(plan) == kinds.CHECKPOINT else \
        LOADER_CELLS + event_cells(s)
    table = Table(title=f"{plan.name}: mean ± 95 % interval over workers x repetitions; "
                        "slowdown against the same settings co-located", title_justify="left")
    heads = [k.column.replace("distance_km", "km").replace("fibre.", "") for k in plan.id_keys]
    for h in heads + (["site"] if sites else []) + [h for h, _ in measured] + ["n"]:
        table.add_column(h, justify="right", no_wrap=True)
    for _, r in s.iterrows():
        cells = [format_value(r[k.column]) if not isinstance(r[k.column], float)
                 else format_value(float(r[k.column])) for k in plan.id_keys]
        cells += [str(r["site"])] if sites else []
        cells += [cell(r) for _, cell in measured]
        cells += [f"{int(r['n'])}" + (f" ({int(r['failed'])} failed)" if r["failed"] else "")]
        table.add_row(*cells)
    return table


def _limit(r: pd.Series) -> str:
    """limited_by as the table shows it: emulator points say why."""
    label = str(r.get("limited_by", "") or "")
    reason = r.get("emulator_reason", "")
    return f"{label} ({reason})" if label == "emulator" and isinstance(reason, str) \
        and reason else label


WORDS = {"compute": "the accelerator (demand met)", "fibre": "the fibre's line rate",
         "window": "the window per RTT (TCP buffers; over RDMA soft-RoCE's 128 packets)",
         "loss": "TCP's response to loss",
         "latency": "round trips per file and request x the loader's depth",
         "emulator": "the emulating machine (not the fibre)",
         "slots": "requests in flight per RTT (NFSv3's RPC slots per connection, NFSv4.1's "
                  "session slots for writes)",
         "server": "the server's write rate",
         "round trips": "a checkpoint's round trips (its folder, OPEN and COMMIT per file)"}


def _limit_lines(plan: Plan, s: pd.DataFrame) -> list[str]:
    """One sentence per setting: what limited its points, in words, along the x axis."""
    x = _x_key(plan)
    others = [k.column for k in plan.id_keys if x is None or k != x]
    keys = [k for k in others if k in s] + ["site"]
    lines = []
    for vals, g in s.groupby(keys, sort=False, dropna=False):
        vals = vals if isinstance(vals, tuple) else (vals,)
        name = ", ".join(f"{k}={format_value(v)}" for k, v in zip(keys, vals)
                         if k != "site" or s["site"].nunique() > 1) or "every point"
        g = g.sort_values(x.column) if x is not None else g
        parts = [f"{WORDS.get(lab, lab)} at {', '.join(format_value(v) for v in grp[x.column])}"
                 if x is not None else WORDS.get(lab, lab)
                 for lab, grp in g.groupby("limited_by", sort=False)]
        lines.append(f"limited by, {name}: " + "; ".join(parts))
    return lines


def _far_end_lines(plan: Plan, s: pd.DataFrame) -> list[str]:
    """At the far end of a distance-like axis, which settings meet the AU bar (and what
    limited those that do not): the question the experiment asks, answered."""
    x = _x_key(plan)
    if x is None or x.dim.baseline is None or s.empty:
        return []
    far = s[s[x.column] == s[x.column].max()]
    others = [k.column for k in plan.id_keys if k != x and k.column in s and k in plan.swept]
    meets, misses = [], []
    for _, r in far.iterrows():
        name = ", ".join(f"{k}={format_value(r[k])}" for k in others) or "the setting"
        name += f" @{r['site']}" if s["site"].nunique() > 1 else ""
        text = f"{name} (AU {_pm(r, 'au_pct')}, slowdown {_pm(r, 'slowdown_pct')} %)"
        ok = r.get("au_pct", 0) >= plan.au_bar and not r.get("emulator_limited", False)
        (meets if ok else misses).append(text if ok else f"{text[:-1]}, {_limit(r)})")
    head = f"at {x.column} = {format_value(far[x.column].iloc[0])}, AU >= {plan.au_bar:g} %"
    return [f"{head} with: " + ("; ".join(meets) or "none"),
            f"{head} not with: " + ("; ".join(misses) or "none")]


LINE_SLACK_PCT = 103.0  # the workers' sum may exceed the line's payload rate by this


def _line_lines(s: pd.DataFrame) -> list[str]:
    """A warning per point whose workers read more together than the line they share
    carries: either their windows did not cover one stretch of time (results from
    before the common window) or some reads did not cross the line (a file read twice
    at once, the second time from the page cache: one worker read 154 % of a 1 Gbit/s
    line with 16 reads in flight over 8 files, 2026-12-05; plans now refuse sets with
    fewer than twice the files read at once)."""
    if "line_use_pct" not in s:
        return []
    over = s[s["line_use_pct"] > LINE_SLACK_PCT]
    return [f"check: {r['point_id']}: its workers read {r['line_use_pct']:.0f} % of the "
            f"line's payload rate together, more than it carries"
            for _, r in over.drop_duplicates("point_id").iterrows()]


def _below(value: float) -> str:
    """A failing probe's metric with enough decimals not to print as the target
    (89.96 is 89.96, not 90.0)."""
    return f"{value:.1f}" if abs(value - round(value)) >= 0.05 else f"{value:.2f}"


def _probe(r: pd.Series, end: str) -> str:
    """A bracket's end as the search line shows it: "1750: 92.2 ± 1.1"."""
    value, metric = float(r[f"{end}_up_to" if end == "meets" else f"{end}_from"]), \
        float(r[f"metric_at_{end}"])
    half = float(r.get(f"half_at_{end}", math.nan))
    text = f"{metric:.1f}" if end == "meets" else _below(metric)
    return f"{format_value(value)}: {text}" + (f" ± {half:.1f}" if half == half else "")


def _search_line(r: pd.Series) -> str:
    """One searched setting: the crossing, its bracket, what was measured, and the
    probes it could not decide (each with its evidence)."""
    runs = r.get("runs", math.nan)
    count = f"{int(r['points'])} points" + (f", {int(runs)} runs" if runs == runs else "")
    undecided = r.get("undecided", "")
    left = f"; undecided at {undecided}" if isinstance(undecided, str) and undecided else ""
    return (f"{r['target']} for {r['setting']}: up to {r['knob']} = "
            f"{format_value(float(r['crossing']))} ± {format_value(float(r['uncertainty']))} "
            f"(met at {_probe(r, 'meets')}; not at {_probe(r, 'fails')}; {count}{left})")


def _search_lines(plan: Plan, out: Path) -> list[str]:
    """One line per searched setting: the crossing, its bracket and the probes."""
    found = search_mod.read(out)
    return [f"{r['target']} for {r['setting']}: {r['note']}"
            if isinstance(r["note"], str) and r["note"] else _search_line(r)
            for _, r in found.iterrows()]


def _machine_lines(df: pd.DataFrame) -> list[str]:
    """What the emulating machine took from the run's lab kernels (lab/run's meter over
    each point's window: the hypervisor's steal, the wait for a host CPU), and every run
    measured again because of it, with what the set-aside measurements read."""
    ok = summary.ok_rows(df)
    lines = []
    if "host_steal_pct" in ok and ok["host_steal_pct"].notna().any():
        lines.append(f"the machine: steal up to {ok['host_steal_pct'].max():.1f} % of its "
                     f"CPU during a point (median {ok['host_steal_pct'].median():.1f} %), "
                     f"host wait up to {ok['host_wait_pct'].max():.1f} %")
    again = ok[ok.get("remeasured", pd.Series(0, index=ok.index)).fillna(0) > 0] \
        .drop_duplicates("point")
    lines += [f"measured again ({int(r['remeasured'])}x): {r['point']}: set aside "
              f"{r['remeasured_why']}" for _, r in again.iterrows()]
    return lines


def _dlio(plan: Plan, df: pd.DataFrame, out: Path) -> Path:
    d = out / "dlio"
    for point_id, rows in summary.ok_rows(df).groupby("point_id", sort=False):
        folder = d / slug(str(point_id))
        folder.mkdir(parents=True, exist_ok=True)
        atomic.write_text(folder / "summary.json",
                          json.dumps(results.dlio_summary(rows, plan.au_bar), indent=2))
    return d


def _series_point(plan: Plan, g: pd.DataFrame) -> Any:
    """A point of the plan with a series' settings (its first row's point)."""
    from testbed.experiment.plan.plan import fixed_assignment
    first = str(g["point_id"].iloc[0])
    return next((p for p in plan.points if p.id == first), None), fixed_assignment(plan)


def _curve(plan: Plan, x: Key, g: pd.DataFrame, df: pd.DataFrame) -> Any:
    """The model's bound (MB/s) as a function of x for a series (None when x is not a
    number the model takes, or the series is not on the plan's grid)."""
    from testbed.experiment.resolve import explain
    from testbed.topology import site_of, worker_hosts
    point, fixed = _series_point(plan, g)
    if point is None or x.dim.kind not in ("float", "int", "rate") or not x.dim.live:
        return None
    topo = plan.resolver.topo(point)
    site = str(g["site"].iloc[0])
    worker = next((w for w in worker_hosts(topo) if site_of(topo, w) == site),
                  worker_hosts(topo)[0])
    rows = df[df["point_id"].isin(g["point_id"])]
    ra = int(rows["read_ahead_kb_kernel"].median()) if rows["read_ahead_kb_kernel"].notna().any() \
        else kernel.READ_AHEAD_KB
    assignment = {**fixed, **{k: v for k, v in point.ident if v is not None}}

    def bound(v: float) -> float:
        try:
            p = plan.resolver.point({**assignment, x: v}, plan.id_keys)
        except Exception:  # outside what the plan allows: no curve there
            return math.nan
        return explain.planned_bounds(topo, p, worker, ra).predicted / 1e6

    return bound


def _demand(plan: Plan, g: pd.DataFrame) -> float:
    point, _ = _series_point(plan, g)
    if point is None or point.workload.compute_ms <= 0:
        return math.nan
    wl = point.workload
    return wl.batch * point.dataset.sample_bytes(wl.access) / (wl.compute_ms / 1000.0) / 1e6


def _plot(plan: Plan, s: pd.DataFrame, df: pd.DataFrame, out: Path) -> Path | None:
    x = _x_key(plan)
    if x is None or s.empty:
        return None
    others = [k for k in plan.id_keys if k != x and k in plan.swept]
    series = []
    keys = [k.column for k in others] + ["site"]
    for vals, g in s.groupby(keys, sort=False, dropna=False):
        vals = vals if isinstance(vals, tuple) else (vals,)
        label = ", ".join(f"{k}={format_value(v)}" for k, v in zip(keys, vals)
                          if k != "site" or s["site"].nunique() > 1) or plan.name
        series.append(plots.Series(label, g.sort_values(x.column), _demand(plan, g),
                                   _curve(plan, x, g, df)))
    return plots.plot(series, out / f"throughput_au_vs_{slug(x.column)}.png", x=x.column,
                      x_label=x.label, title=plan.description or plan.name,
                      au_bar=plan.au_bar)


def build(out: Path, plan: Plan) -> Report:
    """Everything the report writes and shows, from out/results.csv."""
    store = results.ResultStore(out)
    df = store.frame()
    if df.empty:
        raise ResultsError(f"{store.csv}: no results")
    df = summary.with_slowdown(summary.latest_runs(df))
    df["site"] = df["site"].fillna("").astype(str)
    s = _per_point(plan, df)
    with atomic.replacing(out / "summary.csv") as tmp:
        s.to_csv(tmp, index=False)
    store.write_parquet(df)
    report = Report(_table(plan, s), failed=int(s["failed"].sum()))
    report.lines += _limit_lines(plan, s)
    report.lines += _far_end_lines(plan, s)
    report.lines += _line_lines(s)
    report.lines += _search_lines(plan, out)
    report.lines += _machine_lines(df)
    if report.failed:
        reasons = df[df["status"] != "ok"].groupby("point")["reason"].first()
        report.lines += [f"{len(reasons)} point run(s) failed:"] + \
            [f"  {p}: {r}" for p, r in reasons.items()]
    report.files += [store.csv, out / "summary.csv"]
    report.files += [_dlio(plan, df, out)] if kinds.name_of(plan) == kinds.LOADER else []
    png = _plot(plan, s, df, out)
    report.files += [png] if png else []
    events_png = event_plot.plot(plan, df, out)
    report.files += [events_png] if events_png else []
    return report
