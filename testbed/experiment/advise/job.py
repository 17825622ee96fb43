"""The job `testbed advise` is asked about, as a user brings it, turned into the tables
of the experiment the advice walks (advise.experiment): one code path for all of them.

    preset      a workload preset (`--workload unet3d-h100`)
    dlio        a DLIO training config (`--dlio job.yaml`): [workload] dlio
    checkpoint  a DLIO checkpoint config (`--checkpoint llama3_8b.yaml`): [workload] dlio
                at the lab's size (LAB_SCALE), one rank per GPU worker, the interval
                between checkpoints the config's or the user's (checkpoint_interval_s)
    trace       a recorded trace (`--trace my.trace`): [workload] trace replays it in a
                confirmation; the model reads it as the loader of trace_loader
    experiment  an experiment file (`--experiment my.toml`): its workload, dataset,
                mounts, topology and host as the start, at its farthest point

A job's file is read here once (a malformed one is one SpecError line before anything is
written); what the advice may move follows from the kind (knobs_of): a checkpoint's write
path, a trace's mount and host (its loader is the user's code), the rest every knob.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from testbed import kernel, topology
from testbed.errors import SpecError
from testbed.experiment.plan import parse
from testbed.experiment.plan import plan as plan_mod
from testbed.experiment.plan.plan import Plan, Point, format_value
from testbed.workload import dlio, trace as trace_mod
from testbed.workload.dlio_checkpoint import CheckpointJob
from testbed.workload.presets import knob_values

KINDS = ("preset", "dlio", "checkpoint", "trace", "experiment")
READ_KINDS, WRITE_KINDS = ("preset", "dlio", "trace"), ("checkpoint",)
LAB_SCALE = 0.001  # a confirmation writes 1/1000 of each rank's checkpoint (the lab's RAM)
NODE_GPUS = 8  # ranks a checkpoint job puts on one GPU host (MLPerf: 8-accelerator nodes)
# The knobs a kind lets the advice move (None: every allowed knob). A checkpoint writes:
# its moves are the write path's; a trace's loader is the user's code, not a knob.
KNOBS_OF: dict[str, tuple[str, ...] | None] = {
    "checkpoint": ("tcp_buffer_mib", "nconnect", "slow_start_after_idle"),
    "trace": ("read_ahead_kb", "tcp_buffer_mib", "nconnect", "rsize",
              "slow_start_after_idle"),
}


def kind_of_file(kind: str, path: Path) -> str:
    """The kind a job file really is: a DLIO config given as --dlio or --checkpoint is
    read and must be the one it was given as; an experiment file is read as a plan and
    takes its plan's kind (checkpoint, or a read kind). SpecError (one line) otherwise."""
    if kind in ("dlio", "checkpoint"):
        job = dlio.load(path)
        is_ck = isinstance(job, CheckpointJob)
        if is_ck != (kind == "checkpoint"):
            other = "--checkpoint" if is_ck else "--dlio"
            raise SpecError(f"{path}: a DLIO {'checkpoint' if is_ck else 'training'} "
                            f"config: give it as {other}")
        return kind
    if kind == "trace":
        trace_mod.load(path)
        return kind
    plan = plan_mod.load(path)
    return "checkpoint" if plan.resolver.raw.checkpoint is not None else kind


def knobs_of(plan_kind: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    """The allowed knobs a plan of `plan_kind` (kinds.name_of: loader, trace or
    checkpoint) lets the advice move."""
    only = KNOBS_OF.get(plan_kind)
    return allowed if only is None else tuple(k for k in allowed if k in only)


def loader_knobs(kind: str, source: str) -> dict[str, Any]:
    """The loader's knob values of a read job (files_for sizes its dataset from them)."""
    if kind == "preset":
        return knob_values(source)
    if kind == "dlio":
        job = dlio.load(source)
        assert not isinstance(job, CheckpointJob)
        return job.knobs(1.0)
    if kind == "trace":
        return trace_loader(trace_mod.load(source))[0]
    return {}


def trace_loader(trace: trace_mod.Trace) -> tuple[dict[str, Any], list[str]]:
    """The loader the model reads a trace as, and what that cannot know. Its concurrency
    is the streams that read (each a reader, a batch one read of each, requested one
    batch ahead); a sample is the bytes read per open (file_kib), in reads of the median
    read size (read_kib); the demand is the bytes read over the recording's time not
    spent waiting on a read (its duration less the streams' mean I/O time), so the
    compute per batch is batch x sample / demand."""
    reads = [e for e in trace.events if e.op in trace_mod.READS]
    opens = sum(e.op == "open" for e in trace.events)
    if not reads or not opens:
        raise SpecError("the trace holds no read of a file it opened: nothing to advise on")
    streams = sorted({e.stream for e in reads})
    nbytes = sum(e.got for e in reads)
    end = max(e.t_us + e.dur_us for e in trace.events) / 1e6
    io_s = sum(e.dur_us for e in trace.events if e.stream in streams) / 1e6 / len(streams)
    busy_s = max(end - io_s, 1e-3)
    sample = max(1, nbytes // opens)
    readers = len(streams)
    demand = nbytes / busy_s
    knobs = {"readers": readers, "batch": readers, "prefetch": 1, "access": "file",
             "file_kib": max(4, math.ceil(sample / 1024)),
             "read_kib": min(65_536, max(4, statistics.median_low(e.size for e in reads)
                                         // 1024)),
             "compute_ms": round(1000.0 * readers * sample / demand, 3), "shuffle": False}
    notes = [f"the trace read as a loader: {readers} stream(s) reading, "
             f"{sample / 1024:.0f} KiB per open in {knobs['read_kib']} KiB reads, "
             f"{demand / 1e6:.1f} MB/s demanded over its {busy_s:.2f} s not spent on "
             "reads; it cannot know how far ahead the job reads (taken as one read per "
             "stream), what the recording machine's page cache served, or how the "
             "compute would run on other hardware: confirm in emulation"]
    return knobs, notes


def tables(kind: str, source: str, files: int, interval_s: float | None) -> dict[str, Any]:
    """The experiment tables (fixed, workload, dataset) a job of `kind` brings (an
    experiment file's are experiment_tables)."""
    if kind == "preset":
        return {"fixed": {"workload": source}, "workload": {}, "dataset": {"files": files}}
    if kind == "dlio":
        return {"fixed": {}, "workload": {"dlio": source}, "dataset": {"files": files}}
    if kind == "checkpoint":
        extra = {} if interval_s is None else {"checkpoint_interval_s": interval_s}
        return {"fixed": {}, "workload": {"dlio": source, "scale": LAB_SCALE, **extra},
                "dataset": {}}
    if kind == "trace":
        knobs, _ = trace_loader(trace_mod.load(source))
        ds = {k: knobs.pop(k) for k in ("file_kib",)}
        tr = trace_mod.load(source)
        return {"fixed": {}, "workload": {"trace": source, **knobs},
                "dataset": {"files": max(1, len(tr.files)), **ds}}
    raise SpecError(f"advise: no job of kind {kind!r}; known: {', '.join(KINDS)}")


def far_point(plan: Plan) -> Point:
    """The plan's point at its far end (the largest distance, not a baseline)."""
    far = [p for p in plan.points if not p.is_baseline]
    if not far:
        raise SpecError(f"{plan.path}: no point away from the storage to advise on")
    return max(far, key=lambda p: sum(f.distance_km for _, f in p.fibres))


def experiment_tables(source: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """An experiment file's tables as the advice's start, and its farthest point's
    figures: the file's [fixed], [workload], [dataset], [hosts] and the far point's mount
    profile (as `advised`), the far point's other swept values fixed; paths made
    absolute. Returns (tables, far) with far: distance_km, rate, loss_pct, workers,
    topology, host, kind."""
    path = Path(source)
    plan = plan_mod.load(path)
    far = far_point(plan)
    doc = parse.read_toml(path)
    fixed = dict(doc.get("fixed", {}))
    for key, value in far.ident:
        if key.dim.name not in ("distance_km", "mount") and key.link is None:
            fixed[key.dim.name] = value
    workload = dict(doc.get("workload", {}))
    for name in ("dlio", "trace"):
        if isinstance(workload.get(name), str):
            workload[name] = str((path.parent / workload[name]).resolve())
    raw = plan.resolver.raw
    if raw.dlio and "dlio" not in workload:  # from -p or fixed: keep the plan's
        workload["dlio"] = raw.dlio
    dataset = dict(doc.get("dataset", {}))
    if raw.trace:  # the model reads the trace as a loader: its knobs under the file's
        knobs, _ = trace_loader(trace_mod.load(raw.trace))
        dataset = {"files": max(1, len(trace_mod.load(raw.trace).files)),
                   "file_kib": knobs.pop("file_kib"), **dataset}
        workload = {**knobs, **workload}
    profile = str(far.value("mount"))
    # the kernel's read-ahead where the file leaves it (so the start shows no change)
    mount = {"read_ahead_kb": far.mount.read_ahead_kb or kernel.READ_AHEAD_KB,
             **doc.get("mounts", {}).get(profile, {})}
    out = {"fixed": fixed, "workload": workload, "dataset": dataset, "mount": mount}
    if "hosts" in doc:
        out["hosts"] = doc["hosts"]
    return out, far_figures(plan, far)


def far_figures(plan: Plan, far: Point) -> dict[str, Any]:
    """An experiment's farthest point as advise's scenario: distance (the farthest
    worker's path: parallel spans do not add up), rate, loss, workers (a cluster: its
    servers, GPUs per server and fibres), topology, host, and its kind (checkpoint or
    experiment)."""
    fibre = far.fibres[0][1]
    topo = plan.resolver.topo(far)
    paths = topology.fibre_paths(topo)
    distance = max((sum(far.fibre(n).distance_km for n, _ in paths.get(w, []))
                    for w in topology.worker_hosts(topo)), default=0.0)
    sizes = {"servers": int(far.value("servers")), "gpus": far.host.gpus,
             "fibres": int(far.value("fibres"))} if "servers" in far.topo_params \
        else {"workers": far.workers}
    return {"distance_km": distance,
            "rate": f"{format_value(fibre.rate_mbit)}mbit", "loss_pct": fibre.loss_pct,
            **sizes, "topology": plan.topology,
            "host": str(far.value("host")),
            "kind": "checkpoint" if plan.resolver.raw.checkpoint is not None
            else "experiment"}


def default_workers(kind: str, source: str) -> int:
    """GPU workers a job runs on when the user does not say: a checkpoint's ranks on one
    8-GPU host (at most NODE_GPUS of its ranks), else one."""
    if kind != "checkpoint":
        return 1
    job = dlio.load(source)
    assert isinstance(job, CheckpointJob)
    return min(NODE_GPUS, job.ranks(NODE_GPUS))
