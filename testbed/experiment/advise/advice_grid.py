"""advice.json, what `testbed advise` answered (record writes it into the answer's
folder), and a folder of answers (one sub-folder per workload x distance x GPUs) as one
markdown table: what benchmarks/poc_advise.py prints and what
`testbed report DIR --markdown` (so `testbed docs`) regenerates from the folder.

A row is a cell: the cheapest setting that keeps the goal, the model's rate and limit,
and, where it was confirmed in emulation, the measured rate, AU and slowdown with their
95 % intervals over the repetitions and the verdict; the line under the table says where
the figures were measured and how long the grid took.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

from testbed import atomic
from testbed.experiment.advise import advise as adv

RECORD = "advice.json"  # what advise answered, in its output folder


def _candidate(c: adv.Candidate | None) -> dict[str, Any] | None:
    """A candidate as advice.json holds it (None stays None)."""
    if c is None:
        return None
    return {"setting": c.text, "changes": dict(c.changes), "tier": adv.TIERS[c.tier],
            "model_MB_s": c.model_MB_s, "demand_MB_s": c.demand_MB_s,
            "au_pct": c.au_pct, "limited_by": c.limited_by, "meets": c.meets,
            **({"write_s": c.write_s, "interval_s": c.interval_s, "lost_pct": c.lost_pct}
               if math.isfinite(c.write_s) else {})}


def record(folder: Path, s: adv.Scenario, a: adv.Advice,
           measured: list[tuple[adv.Candidate, adv.Verdict]], seconds: float) -> Path:
    """Write advise's answer (the scenario, the goal, the model's path, recommendation
    and runner-up, every confirmation's verdict, the wall time) as JSON into `folder`:
    what a table over many advise runs (benchmarks/poc_advise.py) is built from."""
    doc = {"scenario": dataclasses.asdict(s), "goal": a.goal.text,
           "path": [_candidate(c) for c in a.path], "recommended": _candidate(a.recommended),
           "runner_up": _candidate(a.runner_up), "stopped_by": a.stopped_by,
           "notes": a.notes,
           "confirmations": [{"candidate": _candidate(c), **dataclasses.asdict(v)}
                             for c, v in measured],
           "seconds": seconds}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / RECORD
    return atomic.write_text(path, json.dumps(doc, indent=1, allow_nan=True) + "\n")


def is_grid(path: Path) -> bool:
    """Whether `path` is a folder of advise answers (not a results folder)."""
    return path.is_dir() and not (path / "summary.csv").exists() and \
        any(path.glob(f"*/{RECORD}"))


def cells(path: Path) -> list[dict[str, Any]]:
    """The answers under `path`, by workload, GPUs, distance."""
    docs = [json.loads(p.read_text()) for p in sorted(path.glob(f"*/{RECORD}"))]
    return sorted(docs, key=lambda d: (d["scenario"]["workload"], d["scenario"]["workers"],
                                       d["scenario"]["distance_km"]))


def _pm(v: float, ci: float) -> str:
    """v +- ci, or v alone when the interval is unknown."""
    if v is None or not math.isfinite(v):
        return "-"
    return f"{v:.2f} ± {ci:.2f}" if ci is not None and math.isfinite(ci) else f"{v:.2f}"


def rate(mb_s: float) -> str:
    """A rate in MB/s, readable from KB/s streams to GB/s reads ("-" when unknown)."""
    if mb_s is None or not math.isfinite(mb_s):
        return "-"
    return f"{mb_s:,.0f}" if mb_s >= 10 else f"{mb_s:.3g}"


def verdict(doc: dict[str, Any]) -> str:
    """confirmed, not confirmed, or model only."""
    if not doc["confirmations"]:
        return "model only"
    return "confirmed" if doc["confirmations"][-1]["confirmed"] else "not confirmed"


def shown_confirmation(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The confirmation a row shows: the confirmed one, else the recommendation's own
    measurement (the first), which says why the model's answer did not hold."""
    conf = doc["confirmations"]
    if not conf:
        return None
    return conf[-1] if conf[-1]["confirmed"] else conf[0]


def is_checkpoint(doc: dict[str, Any]) -> bool:
    """Whether a cell is a checkpoint job's (its candidates carry write seconds)."""
    return any("write_s" in c for c in doc["path"] if c)


def checkpoint_row(doc: dict[str, Any]) -> dict[str, str]:
    """A checkpoint cell's line: the cheapest write-path setting keeping the time lost
    within the goal (or what stops every one), a checkpoint's seconds and the training
    time it loses at the cell's interval, as the model has them."""
    s, rec = doc["scenario"], doc["recommended"]
    shown = rec or doc["path"][-1]
    setting = shown["setting"].replace("_", "\\_") if rec else \
        f"none: stopped by {doc['stopped_by']} (best: {shown['setting']})".replace("_", "\\_")
    return {"checkpoint": s["workload"], "ranks on the host": str(s["workers"]),
            "km": f"{s['distance_km']:,.0f}", "cheapest setting within the goal": setting,
            "write s (limit)": f"{shown['write_s']:.1f} ({shown['limited_by']})",
            "MB/s a rank": rate(shown["model_MB_s"]),
            "lost %": f"{shown['lost_pct']:.2f}",
            "interval": f"{shown['interval_s'] / 60:g} min",
            "verdict": verdict(doc), "wall s": f"{doc['seconds']:.2f}"}


def row(doc: dict[str, Any]) -> dict[str, str]:
    """One cell's line: the setting, the model's figure, and the confirmation's."""
    if is_checkpoint(doc):
        return checkpoint_row(doc)
    s, rec = doc["scenario"], doc["recommended"]
    last = shown_confirmation(doc)
    shown = last["candidate"] if last else rec
    if shown is None:
        setting, model = f"none: stopped by {doc['stopped_by']}", "-"
    else:
        setting = shown["setting"].replace("_", "\\_")
        model = f"{rate(shown['model_MB_s'])} ({shown['limited_by']})"
    au = sd = mbs = "-"
    if last is not None:
        au = _pm(last["au_pct"], last["au_ci"])
        sd = _pm(last["slowdown_pct"], last["slowdown_ci"])
        mbs = f"{rate(last['throughput_MB_s'])} ({last['limited_by']})"
    return {"workload": s["workload"], "GPUs": str(s["workers"]),
            "km": f"{s['distance_km']:,.0f}", "cheapest setting within the goal": setting,
            "model MB/s (limit)": model, "measured MB/s (limit)": mbs, "AU %": au,
            "slowdown %": sd, "verdict": verdict(doc), "min": f"{doc['seconds'] / 60:.1f}"}


def table(path: Path) -> list[str]:
    """The markdown table's lines."""
    rows = [row(d) for d in cells(path)]
    if not rows:
        return [f"(no {RECORD} under {path})"]
    head = list(rows[0])
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
            *("| " + " | ".join(r[h] for h in head) + " |" for r in rows)]


def counts(path: Path) -> dict[str, float]:
    """Cells by verdict, and the grid's wall time in minutes (its cells' sum)."""
    docs = cells(path)
    out: dict[str, float] = {"cells": len(docs)}
    for v in ("confirmed", "not confirmed", "model only"):
        out[v.replace(" ", "_")] = sum(verdict(d) == v for d in docs)
    out["wall_min"] = sum(d["seconds"] for d in docs) / 60
    return out


def _environments(path: Path) -> list[dict[str, Any]]:
    """Where the confirmations were measured: the environments in finished cells'
    candidate meta.json that a lab kernel wrote (a cell under way holds the host's)."""
    out = []
    for answer in sorted(path.glob(f"*/{RECORD}")):
        for meta in sorted(answer.parent.glob("candidate-*/meta.json")):
            env = json.loads(meta.read_text()).get("environment") or {}
            if env.get("kernel_kind"):
                out.append(dict(env))
    return out


def _dates(envs: list[dict[str, Any]]) -> str:
    """The days the confirmations were measured on: one day, or the first to the last."""
    days = sorted({str(e.get("started_utc", ""))[:10] for e in envs} - {""})
    if not days:
        return "date not recorded"
    return days[0] if len(days) == 1 else f"{days[0]} to {days[-1]}"


def _hosts(path: Path) -> str:
    """The host profiles the cells were asked under, most cells first; a cell asked before
    host profiles existed had end hosts that never bind, the `ideal` profile."""
    asked = Counter(str(d["scenario"].get("host", "ideal")) for d in cells(path))
    return ", ".join(f"{name} ({n} cell{'s' * (n != 1)})" for name, n in asked.most_common())


def render(path: Path, command: str, kernel_text: Any) -> str:
    """The table and its provenance line (kernel_text: markdown's kernel naming)."""
    envs, c = _environments(path), counts(path)
    env = envs[0] if envs else {}
    commit = ", ".join(dict.fromkeys(str(e.get("git_commit", "unknown"))[:7]
                                     for e in envs)) or "unknown"
    where = f"{_dates(envs)}; {kernel_text(env)}" if env else "date not recorded"
    wall = f"{c['wall_min']:.0f} min" if c["wall_min"] >= 1 else f"{60 * c['wall_min']:.1f} s"
    source = f"at commit(s) {commit} ({where})" if envs else \
        "(the model's alone: no lab kernel, nothing measured)"
    line = (f"Generated by `{command}` from `testbed advise` answers {source}: "
            f"{c['cells']:.0f} cells, {c['confirmed']:.0f} confirmed in "
            f"emulation, {c['not_confirmed']:.0f} not confirmed, {c['model_only']:.0f} "
            f"from the model only; host profile: {_hosts(path)}; "
            f"{wall} of wall time in all.")
    return "\n".join([*table(path), "", line]) + "\n"
