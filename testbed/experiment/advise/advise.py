"""`testbed advise`: which settings buy the distance back. The model (testbed.model)
proposes, cheapest first; the emulator confirms (the caller runs the experiment files
written here and judges their summaries with `judge`).

The search starts from the kernel's defaults (128 KiB read-ahead, one connection,
Linux's 6 MiB TCP buffers, the preset's readers) at the far end of the fibre. At each
step it asks the model what binds, tries the next rung of every allowed knob's ladder
(MOVES) and takes, from the cheapest cost tier that raises the prediction, the rung that
raises it most. Cost tiers, in order: 0 a mount or host setting, 1 more reader threads
or batches held in memory, 2 a read-through cache at the GPU site, 3 a staged copy. It
stops when the goal is met, or when no allowed rung raises the prediction: then the
binding limit stops every candidate and LIFTS says what would lift it.

The goal is a slowdown against the co-located point (`slowdown_pct`: step time at most
1 + goal/100 times the co-located step, the model's co-located step being the compute's)
or an AU (`au_pct`). A plan that writes checkpoints (a DLIO checkpoint config) is rated
by the write model instead (model.write_bound for rank 0, the largest, at the job's full
size) and its goal is the share of training time lost to checkpoints (`lost_pct`, at the
plan's interval between checkpoints) or the seconds a checkpoint takes (`write_s`); the
knobs it may move are the write path's (job.KNOBS_OF). Pure functions of a Plan (no
kernel, no I/O): `--model-only` answers in well under a second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import tomli_w

from testbed import kernel, model
from testbed.errors import SpecError
from testbed.experiment.advise import job as job_mod
from testbed.experiment.advise.job import far_point
from testbed.experiment.plan import kinds
from testbed.experiment.resolve import explain
from testbed.experiment.plan.dimensions import BY_NAME, Key
from testbed.experiment.plan.plan import (Plan, Point, cache_need_mib, format_value,
                                     reads_per_batch)
from testbed.schema import default
from testbed.topology import worker_hosts
from testbed.workload import checkpoint as ck
from testbed.workload.dlio_checkpoint import REALISTIC_INTERVAL_S, CheckpointJob


@dataclass(frozen=True)
class Move:
    """A knob the advice may change: the rungs to try, in order, its cost tier, and the
    limits (model bound names) it can lift."""

    knob: str
    rungs: tuple[Any, ...]
    tier: int
    lifts: tuple[str, ...]


TIERS = ("a mount or host setting", "more reader threads or memory",
         "a read-through cache at the GPU site", "a staged copy at the GPU site")
TIER_SHORT = ("mount/host", "loader", "cache", "staged copy")
MOVES: tuple[Move, ...] = (
    Move("read_ahead_kb", (1024, 4096, 16384, 65536, 262144), 0, ("latency",)),
    Move("tcp_buffer_mib", (16, 64, 256, 1024, 4096), 0, ("window",)),
    Move("nconnect", (2, 4, 8, 16), 0, ("window", "slots", "loss", "latency",
                                          "host (connection)", "host (server)")),
    Move("rpc_slots", (256, 4096, 65_536), 0, ("slots",)),
    Move("rsize", (262144, 524288, 1048576), 0, ("latency",)),
    Move("slow_start_after_idle", (False,), 0, ("slow start",)),
    Move("readers", (8, 16, 32, 64, 128, 256), 1, ("latency",)),
    Move("prefetch", (4, 8, 16, 32), 1, ("latency",)),
    Move("data_path", ("cache",), 2, ("latency", "window", "loss", "fibre")),
    Move("data_path", ("staged",), 3, ("latency", "window", "loss", "fibre")),
)
DEFAULT_ALLOWED = ("read_ahead_kb", "tcp_buffer_mib", "nconnect", "rsize",
                   "slow_start_after_idle", "readers", "prefetch", "data_path")
# The kernel's defaults a search starts from where the schema has no fixed default.
START = {"read_ahead_kb": kernel.READ_AHEAD_KB, "tcp_buffer_mib": kernel.TCP_BUFFER_BYTES >> 20}
# What the kernel keeps where a knob is left unset and a search need not write it out.
KERNEL = {"rpc_slots": kernel.RPC_SLOTS}
LIFTS = {"fibre": "a faster line, more lines (fewer workers per line), or a copy at the "
                  "GPU site (cache or staging)",
         "window": "larger TCP buffers or more connections (nconnect)",
         "slots": "more RPC slots (rpc_slots, sunrpc's tcp_max_slot_table_entries), more "
                  "connections (nconnect) or NFSv4.1+ (its transports keep unlimited slots)",
         "loss": "more connections (nconnect), a cleaner line, or a copy at the GPU site",
         "latency": "more read-ahead, readers or prefetch, or a copy at the GPU site",
         "host (connection)": "more NFS connections: nconnect (at most 16 a server "
                              "address), mounts of more server addresses, or NFS over RDMA",
         "host (nic)": "a faster storage NIC, or fewer GPUs sharing one (docs/hosts.md)",
         "host (server)": "a faster storage server, more connections where its limit is "
                          "per connection, or a copy at the GPU site",
         "compute": "nothing: the accelerator is the limit",
         "round trips": "nothing on the write path: a checkpoint's folder, OPEN and COMMIT "
                        "per file cross the fibre once each (fewer, larger files would)",
         "slow start": "keeping the window between checkpoints "
                       "(slow_start_after_idle = false) or fewer round trips to ramp up",
         "client": "a faster copy into the client's page cache",
         "server": "a faster storage server",
         "emulator": "a lab kernel that keeps up (time dilation)"}
MIN_GAIN = 1.01  # a rung must raise the predicted rate by 1 % to count


# A goal per metric: its largest value and its words. au_pct is met from above, the
# others from below; lost_pct and write_s are a checkpoint job's (WRITE_GOALS).
GOALS = {"slowdown_pct": (1000.0, "slowdown <= {} % against co-located"),
         "au_pct": (100.0, "AU >= {} %"),
         "lost_pct": (100.0, "training time lost to checkpoints <= {} %"),
         "write_s": (365 * 86_400.0, "a checkpoint written in <= {} s")}
WRITE_GOALS = ("lost_pct", "write_s", "au_pct")


@dataclass(frozen=True)
class Goal:
    """What the advice must reach: slowdown_pct (<= against co-located), au_pct (>=),
    or for a checkpoint job lost_pct (<=: the share of training time lost to
    checkpoints, 100 - its AU) or write_s (<=: seconds per checkpoint)."""

    metric: str
    value: float

    def __post_init__(self) -> None:
        if self.metric not in GOALS:
            raise SpecError(f"goal: {', '.join(GOALS)}, not {self.metric!r}")
        top = GOALS[self.metric][0]
        if not (math.isfinite(self.value) and 0 < self.value <= top):
            raise SpecError(f"--{self.metric.replace('_', '-')}: must be in (0, {top:g}], "
                            f"got {self.value:g}")

    @property
    def text(self) -> str:
        """The goal in words."""
        return GOALS[self.metric][1].format(f"{self.value:g}")

    def _figure(self, au_pct: float, slowdown_pct: float, write_s: float) -> float:
        return {"slowdown_pct": slowdown_pct, "au_pct": au_pct, "lost_pct": 100.0 - au_pct,
                "write_s": write_s}[self.metric]

    def met_by(self, au_pct: float, slowdown_pct: float, write_s: float = math.nan) -> bool:
        """Whether a prediction or a measurement meets the goal (write_s: a checkpoint's
        seconds, for that goal)."""
        return self.margin_pct(au_pct, slowdown_pct, write_s) >= 0

    def margin_pct(self, au_pct: float, slowdown_pct: float,
                   write_s: float = math.nan) -> float:
        """How far inside the goal a figure is (negative: outside; NaN figures are
        outside), in its own unit."""
        figure = self._figure(au_pct, slowdown_pct, write_s)
        if math.isnan(figure):
            return -math.inf
        return figure - self.value if self.metric == "au_pct" else self.value - figure


@dataclass(frozen=True)
class Candidate:
    """A setting the model rated: the knobs changed from the start, the cost tier of its
    dearest change, the prediction and what binds."""

    changes: tuple[tuple[str, Any], ...]
    tier: int
    model_MB_s: float
    demand_MB_s: float
    au_pct: float
    limited_by: str
    meets: bool
    write_s: float = math.nan  # a checkpoint job: seconds per checkpoint (rank 0, full size)
    interval_s: float = math.nan  # a checkpoint job: training seconds between two

    @property
    def lost_pct(self) -> float:
        """A checkpoint job's training time lost to its checkpoints (NaN for reads)."""
        return 100.0 - self.au_pct if math.isfinite(self.write_s) else math.nan

    @property
    def slowdown_pct(self) -> float:
        """The slowdown the model expects against co-located (compute-bound there)."""
        if self.model_MB_s <= 0:
            return math.inf
        return max(0.0, 100.0 * (self.demand_MB_s / self.model_MB_s - 1.0))

    @property
    def text(self) -> str:
        """The changes as knob=value, or "the defaults"."""
        return ", ".join(f"{k}={format_value(v)}" for k, v in self.changes) or "the defaults"


@dataclass
class Advice:
    """The model's answer: every candidate on the way (cheapest first), the
    recommendation and runner-up (None when nothing meets the goal), and the limit that
    stops every candidate when nothing does."""

    goal: Goal
    path: list[Candidate] = field(default_factory=list)
    recommended: Candidate | None = None
    runner_up: Candidate | None = None
    stopped_by: str = ""
    notes: list[str] = field(default_factory=list)


class Rater:
    """Rates settings of one point with the model: assignment changes -> Candidate."""

    def __init__(self, plan: Plan, goal: Goal) -> None:
        self.plan, self.goal = plan, goal
        self.checkpoint: CheckpointJob | None = plan.resolver.raw.checkpoint
        if goal.metric not in (WRITE_GOALS if self.checkpoint is not None
                               else ("slowdown_pct", "au_pct")):
            raise SpecError(f"--{goal.metric.replace('_', '-')}: " + (
                "a checkpoint job's goal is --lost-pct, --write-s or --au-pct"
                if self.checkpoint is not None else
                "a goal for a checkpoint job; a reading job's is --slowdown-pct or --au-pct"))
        self.point = far_point(plan)
        self.base = dict(self.point.assignment)
        self.topo = plan.resolver.topo(self.point)
        self.worker = worker_hosts(self.topo)[0]

    def point_of(self, changes: dict[str, Any]) -> Point:
        """The far point with `changes` (knob name -> value) applied, its dataset as
        large as its loader needs (files_for)."""
        assignment = dict(self.base)
        assignment.update({Key(BY_NAME[k]): v for k, v in changes.items()})
        loader = {k: changes.get(k, self.point.value(k)) for k in ("readers", "batch",
                                                                  "prefetch", "access")}
        if files_for(loader) > self.point.dataset.files:
            assignment[Key(BY_NAME["files"])] = files_for(loader)
        return self.plan.resolver.point(assignment, self.plan.id_keys)

    def ceiling_MB_s(self, point: Point) -> float:
        """The most the model could predict for a point, without the readers' event
        simulation (the demand, the fibre's share, the window, loss): a rung whose
        ceiling is no higher than the rate in hand need not be simulated."""
        if self.checkpoint is not None:
            return math.inf  # the write model is cheap: every rung is rated
        ra_kb, rmem = explain.planned_inputs(point)
        path, _, demand = explain.inputs(self.topo, point, self.worker, ra_kb, rmem,
                                         point.congestion)
        if point.data_path != "direct":
            return demand / 1e6
        return min(demand, model.fibre_Bps(path), model.window_Bps(path),
                   model.loss_Bps(path)) / 1e6

    def rate(self, changes: dict[str, Any], tier: int, point: Point | None = None) -> Candidate:
        """The model's figures for the far point with `changes`."""
        point = point or self.point_of(changes)
        if self.checkpoint is not None:
            return self.rate_write(changes, tier, point)
        b = explain.planned_bounds(self.topo, point, self.worker)
        model_MB_s, demand = b.predicted / 1e6, b.compute / 1e6
        slowdown = max(0.0, 100.0 * (demand / model_MB_s - 1.0)) if model_MB_s > 0 \
            else math.inf
        return Candidate(tuple(changes.items()), tier, model_MB_s, demand, b.au_pct(),
                         b.limited_by, self.goal.met_by(b.au_pct(), slowdown))


    def write_bound(self, point: Point) -> model.WriteBound:
        """The write model's bound for rank 0 (the largest shard) of the checkpoint job
        at its full size, with the point's write path, its connections idle for the
        point's interval between checkpoints."""
        job = self.checkpoint
        assert job is not None
        _, rmem = explain.planned_inputs(point)
        wp = explain.write_path(self.topo, point, self.worker, rmem)
        files = [f.nbytes for f in job.rank_files(0, job.ranks(point.workers), 1.0)]
        return model.write_bound(wp, files, idle_s=kinds.interval_s(point, job))

    def rate_write(self, changes: dict[str, Any], tier: int, point: Point) -> Candidate:
        """The write model's figures for a checkpoint job's far point with `changes`:
        model_MB_s a rank's write rate, demand_MB_s the rate the goal needs (the bytes
        over the write time it allows), au_pct the training time not lost."""
        job = self.checkpoint
        assert job is not None
        interval = kinds.interval_s(point, job)
        b = self.write_bound(point)
        lost = ck.training_time_lost_pct(b.seconds, interval) if b.seconds + interval > 0 \
            else 0.0
        allowed_s = {"write_s": self.goal.value,
                     "lost_pct": interval * self.goal.value / max(1e-9, 100 - self.goal.value),
                     "au_pct": interval * (100 - self.goal.value) / self.goal.value
                     }[self.goal.metric]
        mb = b.nbytes / 1e6
        return Candidate(tuple(changes.items()), tier,
                         mb / b.seconds if b.seconds > 0 else math.inf,
                         mb / allowed_s if allowed_s > 0 else math.inf, 100.0 - lost,
                         b.limited_by, self.goal.met_by(100.0 - lost, math.nan, b.seconds),
                         write_s=b.seconds, interval_s=interval)


def current(rater: Rater, changes: dict[str, Any], knob: str) -> Any:
    """A knob's value in the setting: changed, else the point's own."""
    if knob in changes:
        return changes[knob]
    value = rater.point.value(knob)
    return KERNEL.get(knob, value) if value is None else value


def next_rung(move: Move, value: Any) -> Any | None:
    """The move's first rung above `value` (None: no rung left); data_path rungs
    apply once, to the direct path."""
    if move.knob == "data_path":
        return move.rungs[0] if value == "direct" else None
    if isinstance(move.rungs[0], bool):  # a switch: its one other position
        return move.rungs[0] if value != move.rungs[0] else None
    if value == "auto":
        return None
    above = [r for r in move.rungs if value is None or float(r) > float(value)]
    return above[0] if above else None


def _with(rater: Rater, knob: str, value: Any) -> dict[str, Any]:
    """What a rung brings along: a cache at the GPU site that holds every worker's copy
    of the training set (plan.cache_need_mib), in whole GiB."""
    if knob == "data_path" and value == "cache":
        return {"cache_mib": max(1024, 1024 * math.ceil(cache_need_mib(rater.point) / 1024))}
    return {}


def options(rater: Rater, here: Candidate, allowed: tuple[str, ...]) -> list[Candidate]:
    """For every allowed knob, the lowest rung above its value that raises the
    prediction (a rung that buys nothing, e.g. read-ahead no larger than the loader's
    reads, is passed over for the next), rated."""
    changes, out = dict(here.changes), []
    for move in MOVES:
        if move.knob not in allowed:
            continue
        value = current(rater, changes, move.knob)
        while (rung := next_rung(move, value)) is not None:
            value = rung
            trial = {**changes, move.knob: rung, **_with(rater, move.knob, rung)}
            try:
                point = rater.point_of(trial)
            except SpecError:
                continue  # a rung this point cannot take (e.g. a cache larger than allowed)
            if rater.ceiling_MB_s(point) <= MIN_GAIN * here.model_MB_s:
                continue
            cand = rater.rate(trial, max(here.tier, move.tier), point)
            if cand.model_MB_s > MIN_GAIN * here.model_MB_s:
                out.append(cand)
                break
    if not any(c.tier < COPY_TIER for c in out):
        out += pairs(rater, here, allowed)
    return out


COPY_TIER = 2  # tiers from here on copy the data to the GPU site


def pairs(rater: Rater, here: Candidate, allowed: tuple[str, ...]) -> list[Candidate]:
    """Two knobs' next rungs together, for knobs that bind each other so that neither
    raises the prediction alone (readers and prefetch: files in flight are at most
    readers, and at most batch x prefetch samples): without these the walk would jump
    to a copy at the GPU site while a loader setting still buys the distance back."""
    changes, out = dict(here.changes), []
    moves = [m for m in MOVES if m.knob in allowed and m.tier < COPY_TIER]
    for i, a in enumerate(moves):
        for b in moves[i + 1:]:
            ra = next_rung(a, current(rater, changes, a.knob))
            rb = next_rung(b, current(rater, changes, b.knob))
            if ra is None or rb is None:
                continue
            trial = {**changes, a.knob: ra, b.knob: rb}
            try:
                point = rater.point_of(trial)
            except SpecError:
                continue
            if rater.ceiling_MB_s(point) <= MIN_GAIN * here.model_MB_s:
                continue
            cand = rater.rate(trial, max(here.tier, a.tier, b.tier), point)
            if cand.model_MB_s > MIN_GAIN * here.model_MB_s:
                out.append(cand)
    return out


# Samples requested per reader: a sample stays requested from its read until the
# accelerator takes it, in order, so when the accelerator falls behind, samples read and
# waiting hold requests the readers could be working on. cosmoflow-h100 at 3,000 km, 32
# readers of 2.8 MB files, 64 MiB TCP buffers, k = 5 (user-mode Linux 7.2.7, 2026-12-07):
# reading alone 911 MB/s (latency term 918); training with prefetch 32 (one sample per
# reader) AU 94.9 % at 756 MB/s where the model said compute (808), with prefetch 64
# AU 99.1 % at 793 and slowdown -0.1 %. At 1,000 km 8 readers (latency term 1.29 x the
# demand) fell short alike (AU 92.3 %); at 60 km 4 readers with prefetch 2 (latency term
# 3.3 x) kept up. So the slack is added where the readers' round trips leave less than
# THIN x the demand.
SLACK = 2
THIN = 2.0


def with_slack(rater: Rater, cand: Candidate) -> Candidate:
    """The candidate with prefetch raised (to a power of two) until the loader requests
    SLACK samples per reader, where it requests fewer and reads directly over the fibre
    with a thin margin (the readers' round trips allow less than THIN x the demand): the
    model's rate is unchanged (it counts files in flight as the readers'); the loader
    holds the extra batches in memory."""
    if rater.checkpoint is not None:
        return cand
    point = rater.point_of(dict(cand.changes))
    reads, _ = reads_per_batch(point)
    readers, prefetch = point.workload.readers, point.workload.prefetch
    if point.data_path != "direct" or readers <= 1 or prefetch * reads >= SLACK * readers:
        return cand
    b = explain.planned_bounds(rater.topo, point, rater.worker)
    if b.latency >= THIN * b.compute:
        return cand
    need = 1 << max(0, math.ceil(SLACK * readers / reads) - 1).bit_length()
    changes = {**dict(cand.changes), "prefetch": need}
    try:
        return rater.rate(changes, cand.tier)
    except SpecError:  # a prefetch this point cannot take: the candidate as it was
        return cand


def prune(rater: Rater, cand: Candidate) -> Candidate:
    """The candidate without the changes it does not need: a rung climbed early can be
    made redundant by a later one (read-ahead raised before a cache was added); each
    change whose removal (back to the start's value) still meets the goal is dropped."""
    changes = dict(cand.changes)
    for knob in [k for k, _ in cand.changes if k not in ("data_path", "cache_mib")]:
        trial = {k: v for k, v in changes.items() if k != knob}
        if rater.rate(trial, cand.tier).meets:
            changes = trial
    if changes == dict(cand.changes):
        return cand
    return rater.rate(changes, max((tier_of(k, v) for k, v in changes.items()), default=0))


def tier_of(knob: str, value: Any) -> int:
    """The cost tier of setting `knob` to `value` (cache_mib goes with the cache)."""
    if knob == "cache_mib":
        return COPY_TIER
    return next(m.tier for m in MOVES if m.knob == knob and
                (knob != "data_path" or value in m.rungs))


def step(rater: Rater, here: Candidate, allowed: tuple[str, ...]) -> list[Candidate]:
    """The rungs that raise the prediction, best first: cheapest tier, then the
    largest rate (ties: fewer changes)."""
    return sorted(options(rater, here, allowed),
                  key=lambda c: (c.tier, not c.meets, -c.model_MB_s, len(c.changes)))


def advise(plan: Plan, goal: Goal, allowed: tuple[str, ...] = DEFAULT_ALLOWED,
           max_steps: int = 40) -> Advice:
    """Walk from the defaults towards the goal, cheapest rung first (module docstring)."""
    unknown = sorted(set(allowed) - {m.knob for m in MOVES})
    if unknown:
        raise SpecError(f"--allow: no advice ladder for {', '.join(unknown)}; known: "
                        f"{', '.join(dict.fromkeys(m.knob for m in MOVES))}")
    rater = Rater(plan, goal)
    allowed = job_mod.knobs_of(kinds.name_of(plan), allowed)
    start = {k: v for k, v in START.items() if k in allowed and rater.point.value(k) is None}
    here = rater.rate(start, 0)
    advice = Advice(goal, [here])
    while not here.meets and len(advice.path) < max_steps:
        ahead = step(rater, here, allowed)
        if not ahead:
            break
        here = ahead[0]
        advice.path.append(here)
        if here.meets:
            advice.runner_up = next((c for c in ahead[1:] if c.meets), None)
    if here.meets:
        here = with_slack(rater, prune(rater, here))
        if here.changes != advice.path[-1].changes:
            advice.path.append(here)
    advice.recommended = here if here.meets else None
    if advice.recommended is not None and advice.runner_up is None:
        advice.runner_up = _runner_up(rater, here, allowed)
    if advice.runner_up is not None:
        advice.runner_up = with_slack(rater, prune(rater, advice.runner_up))
        if advice.runner_up.changes == here.changes:
            advice.runner_up = None
    advice.stopped_by = "" if here.meets else here.limited_by
    if plan.resolver.raw.trace:
        advice.notes += job_mod.trace_loader(kinds.load_trace(plan.resolver.raw.trace))[1]
    advice.notes += _checkpoint_notes(rater, advice) if rater.checkpoint is not None \
        else _line_note(rater)
    return advice


def _checkpoint_notes(rater: Rater, advice: Advice) -> list[str]:
    """A checkpoint job's figures: a rank's bytes, what the line alone takes for every
    rank sharing it, and the training time lost at the config's interval and at a
    realistic one (REALISTIC_INTERVAL_S) with the answer's setting."""
    job, p = rater.checkpoint, rater.point
    assert job is not None
    ranks = job.ranks(p.workers)
    last = advice.recommended or advice.path[-1]
    b = rater.write_bound(rater.point_of(dict(last.changes)))
    line = model.fibre_Bps(explain.inputs(rater.topo, p, rater.worker, kernel.READ_AHEAD_KB,
                                          kernel.TCP_BUFFER_BYTES, p.congestion)[0]) * p.workers
    floor = b.nbytes * p.workers / line if line > 0 else 0.0
    lost = {s: ck.training_time_lost_pct(b.seconds, s) for s in
            dict.fromkeys((last.interval_s, job.interval_s, REALISTIC_INTERVAL_S))}
    return [f"{job.name}: {ranks} ranks, {p.workers} on this GPU host sharing its line; "
            f"rank 0 writes {b.nbytes / 2**30:.1f} GiB a checkpoint; the line alone takes "
            f"{floor:.1f} s for the host's {p.workers} ranks",
            f"{last.text}: {b.seconds:.1f} s a checkpoint (limited by {b.limited_by}); "
            "training time lost " + ", ".join(
                f"{v:.2f} % at {_interval_text(s)}" + _whose(s, last.interval_s, job.interval_s)
                for s, v in lost.items())]


def _whose(seconds: float, goal_s: float, config_s: float) -> str:
    """Which interval this is: the goal's, the config's, both, or the realistic one."""
    names = [n for n, v in (("the goal's", goal_s), ("the config's", config_s))
             if v == seconds]
    return f" ({' and '.join(names)})" if names else " (a realistic one)"


def _interval_text(seconds: float) -> str:
    """An interval between checkpoints in words: 5 s, 30 min, 2 h."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def _line_note(rater: Rater) -> list[str]:
    """When the workers sharing a line want more than it carries, say so: no setting
    of the direct path can meet a goal near their demand."""
    p = rater.point
    ra_kb, rmem = explain.planned_inputs(p)
    path, _, demand = explain.inputs(rater.topo, p, rater.worker, ra_kb, rmem, p.congestion)
    line = model.fibre_Bps(path) * p.workers
    if p.workers < 2 or demand * p.workers <= line:
        return []
    return [f"{p.workers} workers want {demand * p.workers / 1e9:.1f} GB/s together, "
            f"{demand * p.workers / line:.1f} x what their line carries "
            f"({line / 1e9:.1f} GB/s of payload): reading directly, each gets at most "
            f"{100 * line / (demand * p.workers):.0f} % of its demand; it takes a copy at "
            f"the GPU site, a faster line or more lines"]


def _runner_up(rater: Rater, best: Candidate, allowed: tuple[str, ...]) -> Candidate | None:
    """The next cheapest setting that also meets the goal: one rung further on the way
    (a margin bought), else a copy at the GPU site."""
    further = [c for c in step(rater, best, allowed) if c.meets]
    if further:
        return further[0]
    for move in MOVES:
        if move.knob == "data_path" and move.knob in allowed:
            rung = move.rungs[0]
            cand = rater.rate({"data_path": rung, **_with(rater, "data_path", rung)},
                              move.tier)
            if cand.meets:
                return cand
    return None


@dataclass(frozen=True)
class Scenario:
    """What advise is asked about: a job (a workload preset, or a file of job.KINDS) on
    a topology, the fibre, workers per site, the confirmation's repetitions, and for a
    checkpoint job the training seconds between checkpoints (None: the config's)."""

    workload: str  # the preset's name, or the job file's name (its label in tables)
    distance_km: float
    rate: str = "100gbit"
    loss_pct: float = 0.0
    workers: int = 1
    topology: str = "apn"
    files: int = 8
    repetitions: int = 3
    host: str = default("host")  # the host profile assumed (docs/hosts.md)
    kind: str = "preset"  # job.KINDS
    source: str = ""  # the job's file (absolute; "" for a preset)
    interval_s: float | None = None  # a checkpoint job's interval override
    servers: int | None = None  # the cluster topology: its servers (then not workers)
    gpus: int = 8  # ... GPUs per server (its GPU hosts' host_gpus)
    fibres: int = 1  # ... fibre spans the servers share round-robin

    def topology_knobs(self) -> dict[str, Any]:
        """The knobs that size its topology: workers per site, or a cluster's servers,
        GPUs per server and fibres."""
        if self.servers is None:
            return {"workers": self.workers}
        return {"servers": self.servers, "host_gpus": self.gpus, "fibres": self.fibres}


WINDOW = {"warmup_max_s": 3, "measure_s": 4, "measure_max_s": 20, "min_steps": 8,
          "au_ci_target": 0.5}


def _tables(changes: tuple[tuple[str, Any], ...]) -> dict[str, dict[str, Any]]:
    """A candidate's changes by the experiment-file table each belongs in: mount options
    in [mounts.advised], loader knobs in [workload], the rest in [fixed]."""
    ch = dict(changes)
    mount = {k: v for k, v in ch.items() if BY_NAME[k].section == "mounts"}
    loader = {k: v for k, v in ch.items() if BY_NAME[k].section == "workload"}
    return {"fixed": {k: v for k, v in ch.items() if k not in mount and k not in loader},
            "mounts": mount, "workload": loader}


def experiment(s: Scenario, changes: tuple[tuple[str, Any], ...] = (),
               name: str = "advise") -> dict[str, Any]:
    """An experiment measuring `changes` at the scenario's distance and co-located (the
    baseline), every repetition its own run, as the tables of its file: what a
    confirmation runs, and what a user may paste and run again."""
    t = _tables(changes)
    if s.kind == "experiment":
        base, _ = job_mod.experiment_tables(s.source)
        mount, loader = base.pop("mount"), dict(base["workload"])
        if s.interval_s is not None:
            base["workload"]["checkpoint_interval_s"] = s.interval_s
    else:
        base = job_mod.tables(s.kind, s.source or s.workload, s.files, s.interval_s)
        mount, loader = dict(START), job_mod.loader_knobs(s.kind, s.source or s.workload)
    dataset = dict(base["dataset"])
    if "files" in dataset or s.kind != "checkpoint":
        dataset["files"] = max(int(dataset.get("files", s.files)),
                               files_for({**loader, **dict(changes)}))
    what = ", ".join(f"{k}={format_value(v)}" for k, v in changes) or "defaults"
    fixed = {k: v for k, v in base["fixed"].items() if k != "distance_km"}
    doc = {"name": name, "topology": s.topology,
           "description": f"{s.workload} at {s.distance_km:g} km over {s.rate}: {what}",
           "repetitions": s.repetitions,
           "fixed": {"time_scale": "auto", **fixed, **s.topology_knobs(), "rate": s.rate,
                     "loss_pct": s.loss_pct, "mount": "advised", "host": s.host,
                     **t["fixed"]},
           "sweep": {"distance_km": [0, s.distance_km]},
           "mounts": {"advised": {**mount, **t["mounts"]}},
           "workload": {**WINDOW, **base["workload"], **t["workload"]}}
    if dataset:
        doc["dataset"] = dataset
    if "hosts" in base:
        doc["hosts"] = base["hosts"]
    return doc


def experiment_text(s: Scenario, changes: tuple[tuple[str, Any], ...] = (),
                    name: str = "advise") -> str:
    """experiment() as the TOML file a confirmation runs (written by tomli_w: every
    string quoted and escaped as TOML wants it)."""
    return tomli_w.dumps(experiment(s, changes, name))


def files_for(knobs: dict[str, Any]) -> int:
    """The files a measured point needs: twice the files its loader reads at once
    (plan's rule: a file read twice at once is read once from the page cache); records
    read in order are read one file per reader, so their set needs no more."""
    if knobs.get("access", default("access")) != "file":
        return 0
    at_once = min(int(knobs.get("readers", default("readers"))),
                  int(knobs.get("batch", default("batch"))) *
                  int(knobs.get("prefetch", default("prefetch"))))
    return 2 * at_once


def snippet(c: Candidate) -> str:
    """A candidate's changes as the experiment-file tables they belong in, to paste."""
    t = _tables(c.changes)
    doc = {"fixed": t["fixed"], "mounts": {"advised": t["mounts"]} if t["mounts"] else {},
           "workload": t["workload"]}
    return tomli_w.dumps({k: v for k, v in doc.items() if v}).strip() or \
        "(the defaults: nothing to change)"


@dataclass(frozen=True)
class Verdict:
    """A candidate measured: its far point's AU and slowdown with their 95 % intervals,
    what limited it, the model's figure, and whether the goal holds with the interval
    inside it."""

    au_pct: float
    au_ci: float
    slowdown_pct: float
    slowdown_ci: float
    throughput_MB_s: float
    model_MB_s: float
    limited_by: str
    n: int
    confirmed: bool
    why: str


def judge(goal: Goal, summary: Any) -> Verdict:
    """Read a confirmation's summary.csv frame (its far row: the largest distance) and
    judge it: confirmed when the goal holds at the interval's worse end. An emulator-
    limited point confirms nothing; a measurement more than 15 % off the model is named."""
    far = summary[~summary["baseline"].astype(bool)].iloc[-1]
    if goal.metric in ("lost_pct", "write_s"):
        return judge_checkpoint(goal, far)
    get = lambda c: float(far.get(c, math.nan))  # noqa: E731
    au, au_ci, sd, sd_ci = (get("au_pct"), get("au_pct_ci"), get("slowdown_pct"),
                            get("slowdown_pct_ci"))
    worse_au = au - (au_ci if math.isfinite(au_ci) else 0.0)
    worse_sd = sd + (sd_ci if math.isfinite(sd_ci) else 0.0)
    limited = str(far.get("limited_by", ""))
    measured, modelled = get("throughput_MB_s"), get("model_MB_s")
    off = abs(measured / modelled - 1.0) if modelled > 0 else 0.0
    if limited == "emulator":
        ok, why = False, "emulator-limited: the lab kernel did not keep up"
    elif goal.met_by(worse_au, worse_sd):
        ok, why = True, "the goal holds at the interval's worse end"
    elif goal.met_by(au, sd):
        ok, why = False, "the mean meets the goal but the interval reaches beyond it: " \
                         "measure longer (--repetitions)"
    else:
        ok, why = False, "the goal is missed"
        if limited == "compute":  # the model said the demand is met; the reads say not
            why += (f" where the model expected the compute to bind ({measured:.0f} of "
                    f"{modelled:.0f} MB/s): a limit the model does not name")
    if off > 0.15 and limited != "emulator":
        why += f"; measured {measured:.0f} MB/s, {100 * off:.0f} % off the model's " \
               f"{modelled:.0f}: a limit the model does not name"
    return Verdict(au, au_ci, sd, sd_ci, measured, modelled, limited, int(get("n")), ok, why)


def judge_checkpoint(goal: Goal, far: Any) -> Verdict:
    """A checkpoint job's confirmation (its summary's far row): the lab writes 1/1000 of
    each rank's bytes, where round trips weigh more than at full size, so the goal is
    judged on the write model at full size (full_lost_pct, write_full_model_s) once the
    measurement has confirmed the model at the lab's size: the slowest rank's write
    within 15 % of write_model_s. An emulator-limited point confirms nothing."""
    get = lambda c: float(far.get(c, math.nan))  # noqa: E731
    write, model_s = get("write_s"), get("write_model_s")
    full_lost, full_s = get("full_lost_pct"), get("write_full_model_s")
    limited = str(far.get("limited_by", ""))
    off = write / model_s - 1.0 if model_s > 0 else math.inf
    meets = goal.met_by(100.0 - full_lost, math.nan, full_s)
    if limited == "emulator":
        ok, why = False, "emulator-limited: the lab kernel did not keep up"
    elif abs(off) > 0.15:
        ok, why = False, (f"the lab-sized write took {write:.3f} s, {100 * off:+.0f} % off "
                          f"the model's {model_s:.3f}: a limit the model does not name, "
                          "so its full-size answer is not confirmed")
    else:
        ok, why = meets, (f"the lab-sized write is {100 * off:+.0f} % off the model; at "
                          f"full size it says {full_s:.2f} s a checkpoint, {full_lost:.2f} % "
                          "lost: " + ("within the goal" if meets else "the goal is missed"))
    rank_mb = get("rank_MB")
    return Verdict(get("au_pct"), get("au_pct_ci"), get("slowdown_pct"),
                   get("slowdown_pct_ci"), get("write_MB_s"),
                   rank_mb / model_s if model_s > 0 else math.nan, limited,
                   int(get("n")), ok, why)

