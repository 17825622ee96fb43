"""How many GPU servers a line feeds: `testbed advise --servers 1-12 --model-only`.

For each count N of servers of G GPUs behind M fibre spans (topologies/cluster.py: each
server one GPU host with its own NIC, servers dealt round-robin over the spans), advise's
walk at the far end (advise.advise: the settings it would pick, cheapest first, reading
over the line: a copy at the GPU site feeds any count, so the walk may not move the data
path) rates a GPU of server 1, whose span carries the most servers. A row per N: every
GPU's demand together against what the spans carry (payload), the recommended setting
(or the best the walk found) with its rate a GPU, AU and slowdown, what binds, whether
it meets the goal. The answer is the largest N up to which every count meets it, and what stops the
next one. The model's answer only: a count is measured by running an experiment file
on the cluster topology (experiments/cluster.toml).
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Callable

from rich.table import Table

from testbed import model, schema
from testbed.errors import SpecError
from testbed.experiment.advise import advise as adv
from testbed.experiment.advise.advice_grid import rate
from testbed.experiment.plan.plan import Plan

COUNTS_RE = re.compile(r"^\s*(\d{1,5})\s*(?:-\s*(\d{1,5})\s*)?$")
MAX_COUNTS = 64  # counts asked at once (each is one advise walk, ~0.05-1.5 s)


@dataclass(frozen=True)
class Count:
    """The model's answer for one count of servers: the GPUs' demand together, what the
    spans carry together (payload, GB/s), and advise's walk."""

    servers: int
    gpus: int
    demand_GB_s: float
    lines_GB_s: float
    advice: adv.Advice

    @property
    def best(self) -> adv.Candidate:
        """The recommendation, or where the walk stopped."""
        return self.advice.recommended or self.advice.path[-1]

    @property
    def meets(self) -> bool:
        """Whether some allowed setting meets the goal at this count."""
        return self.advice.recommended is not None


def parse_counts(text: str) -> tuple[int, ...]:
    """"1-12", "1,2,4" or "8" -> the counts of servers, ascending; SpecError (naming
    --servers) for anything else, or counts outside the servers knob's bounds."""
    counts: set[int] = set()
    for part in str(text).split(","):
        m = COUNTS_RE.match(part)
        if not m:
            raise SpecError(f"--servers: {text!r}: a count, a range A-B or a list "
                            "A,B,C of them")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if lo > hi:
            raise SpecError(f"--servers: {part.strip()!r}: the range's low end is above "
                            "its high end")
        counts.update(range(lo, min(hi, lo + MAX_COUNTS) + 1))
    row = schema.row("servers")
    if min(counts) < (row.lo or 1) or max(counts) > (row.hi or math.inf):
        raise SpecError(f"--servers: {text!r}: counts from {row.lo:g} to {row.hi:g}")
    if len(counts) > MAX_COUNTS:
        raise SpecError(f"--servers: {text!r}: at most {MAX_COUNTS} counts at once")
    return tuple(sorted(counts))


def _lines_GB_s(plan: Plan) -> float:
    """What every fibre span of the plan's far point carries together (payload, GB/s)."""
    far = adv.far_point(plan)
    share = model.payload_share(int(far.value("mtu")), far.mount.transport)
    return sum(f.rate_mbit for _, f in far.fibres) * 1e6 / 8 * share / 1e9


def ask(s: adv.Scenario, goal: adv.Goal, counts: tuple[int, ...],
        allowed: tuple[str, ...], load: Callable[[adv.Scenario], Plan]) -> list[Count]:
    """advise's walk for the scenario at each count of servers, reading over the line
    (`allowed` without data_path; `load`: a scenario -> its plan, as advise loads one)."""
    allowed = tuple(k for k in allowed if k != "data_path")
    out = []
    for n in counts:
        plan = load(dataclasses.replace(s, servers=n))
        advice = adv.advise(plan, goal, allowed)
        best = advice.recommended or advice.path[-1]
        gpus = n * s.gpus
        out.append(Count(n, gpus, best.demand_MB_s * gpus / 1e3, _lines_GB_s(plan), advice))
    return out


def feeds(rows: list[Count]) -> int:
    """The largest count up to which every count asked meets the goal (0: the first
    does not)."""
    last = 0
    for r in rows:
        if not r.meets:
            break
        last = r.servers
    return last


def table(rows: list[Count], s: adv.Scenario) -> Table:
    """A row per count: demand vs the lines, the setting, the model's figures."""
    t = Table(title=f"{s.workload} on servers of {s.gpus} GPUs, {s.fibres} x {s.rate} at "
                    f"{s.distance_km:g} km (host profile {s.host}; the model's answer)",
              title_justify="left")
    for c in ("servers", "GPUs", "demand GB/s", "lines GB/s", "setting (advise's)",
              "MB/s a GPU", "AU %", "slowdown %", "limited by", "meets"):
        t.add_column(c, justify="left" if c.startswith("setting") else "right")
    for r in rows:
        b = r.best
        t.add_row(str(r.servers), str(r.gpus), f"{r.demand_GB_s:.1f}", f"{r.lines_GB_s:.1f}",
                  b.text, rate(b.model_MB_s), f"{b.au_pct:.1f}", f"{b.slowdown_pct:.1f}",
                  b.limited_by, "yes" if r.meets else "")
    return t


def answer(rows: list[Count], s: adv.Scenario, goal: adv.Goal) -> str:
    """The answer in words: how many servers the line feeds within the goal, with which
    setting, and what stops the next count."""
    n = feeds(rows)
    lines = f"{s.fibres} x {s.rate} at {s.distance_km:g} km"
    head = (f"{lines} feeds up to {n} server(s) of {s.gpus} GPUs within the goal "
            f"({goal.text})" if n else
            f"{lines} feeds no count asked within the goal ({goal.text})")
    if n:
        head += f"; at {n}: {rows[[r.servers for r in rows].index(n)].best.text}"
    stop = next((r for r in rows if not r.meets), None)
    if stop is not None:
        head += (f"; at {stop.servers} the best is {stop.best.text}, limited by "
                 f"{stop.best.limited_by} ({adv.LIFTS.get(stop.best.limited_by, '?')})")
    elif n:
        head += f"; the largest count asked, {n}, still meets it: ask for more"
    return head
