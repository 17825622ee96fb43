"""A DLIO checkpoint-only workload (MLPerf Storage v2.0's llama3_*.yaml: workflow
{train: False, checkpoint: True}) read as it is: the model section sizes each rank's
checkpoint (checkpoint_size: DLIO's own formula), the checkpoint section says how many are
written and read back and how much training compute lies between two.

The rank count is not in the file: DLIO takes it from MPI (`mpirun -np N`), and MLPerf
Storage fixes it per model (MLPERF_RANKS, its CLOSED division: 8 accelerators for 8B, 64
for 70B, 512 for 405B, 1,024 for 1T). In the testbed each GPU worker is one rank with its
own mount; `workers` says how many, and each writes rank r's files of an N-rank job
(N = MLPerf's count, or `workers` for a model MLPerf does not size), scaled by the
workload's `scale`: the lab kernel holds the export in its memory, so a rank writes
scale x its DLIO bytes, in DLIO's file names and proportions, and the time between
checkpoints shrinks by the same factor (as `scale` shrinks records and compute for
training reads). A scaled checkpoint keeps its files' round trips whole: at a distance
those weigh more in a scaled run than in the full-size one (the report's model column
gives the full size's bound).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from testbed.errors import SpecError
from testbed.schema import show
from testbed.workload import checkpoint_size as cs

# MLPerf Storage v2.0's ranks per checkpointing model (its rules; mlpstorage's defaults).
MLPERF_RANKS = {"llama_8b": 8, "llama_70b": 64, "llama_405b": 512, "llama_1t": 1024}
NUMBER = (int, float)
# checkpoint.<field>: (types, Job attribute or "" when read without effect).
FIELDS: dict[str, tuple[tuple[type, ...], str]] = {
    "checkpoint_folder": ((str,), ""),
    "time_between_checkpoints": (NUMBER, "interval_s"),
    "num_checkpoints_write": ((int,), "writes"),
    "num_checkpoints_read": ((int,), "reads"),
    "fsync": ((bool,), "fsync"),
}
# An interval between checkpoints as training runs use (the config's 5 s is MLPerf's
# benchmark, which no training run checkpoints at): users checkpoint every 10-60 minutes;
# tables state the training time lost at this one beside the config's.
REALISTIC_INTERVAL_S = 30 * 60.0
# The largest value a numeric field takes (others: any finite number): an interval
# between checkpoints beyond a year is no training job, and 1e308 s overflowed the run's
# estimate (interval x checkpoints x k) to infinity.
MAXIMUM = {"time_between_checkpoints": 365 * 86_400}
# Fields of a checkpoint file that do not change what crosses the fibre (read) or that the
# testbed does not emulate (named in the warning line).
READ_SECTIONS = ("model", "workflow", "output", "hydra", "profiling")
NOT_EMULATED = ("framework", "storage")


@dataclass
class CheckpointJob:
    """A checkpoint-only DLIO job: the model's shape, how many checkpoints are written
    and read back, the compute between two (s), fsync, where the file came from."""

    shape: cs.ModelShape
    interval_s: float = 0.0
    writes: int = 1
    reads: int = 0
    fsync: bool = False
    source: str = ""
    not_emulated: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        """The model's name (llama_8b, ...)."""
        return self.shape.name

    def ranks(self, workers: int) -> int:
        """The job's rank count: MLPerf's for its models, else one per worker."""
        return MLPERF_RANKS.get(self.shape.name, workers)

    def rank_files(self, rank: int, ranks: int, scale: float) -> tuple[cs.ShardFile, ...]:
        """Rank `rank`'s files of an N-rank checkpoint, scaled to scale x its bytes (at
        least one byte per file)."""
        share = cs.rank_checkpoint(self.shape, ranks, rank)
        files = tuple(share.files)
        try:
            size = max(len(files), int(share.file_bytes * scale))
        except OverflowError:
            raise SpecError(f"{self.source}: model {self.name}: a rank's checkpoint of "
                            f"{share.file_bytes} bytes is past any size") from None
        return cs.scaled(files, size) if scale != 1.0 else files


def is_checkpoint(flat: dict[str, Any]) -> bool:
    """Whether a flattened DLIO document is checkpoint-only (no training reads)."""
    return flat.get("workflow.checkpoint") is True and flat.get("workflow.train") is not True


def parse(doc: dict[str, Any], flat: dict[str, Any], where: str) -> CheckpointJob:
    """The CheckpointJob of a checkpoint-only DLIO document; SpecError (one line) for a
    malformed field, a count below DLIO's rules, or a model it cannot size."""
    job = CheckpointJob(shape=cs.from_dlio(doc, where), source=where)
    skipped: list[str] = []
    for name, value in flat.items():
        section, _, key = name.partition(".")
        if section == "checkpoint" and key in FIELDS:
            types, attr = FIELDS[key]
            _check(name, value, types, where)
            if attr:
                setattr(job, attr, value)
        elif section in NOT_EMULATED or section == "checkpoint" or \
                section not in READ_SECTIONS:
            skipped.append(name if section == "checkpoint" else section)
    if "checkpoint.num_checkpoints_write" not in flat:
        raise SpecError(f"{where}: checkpoint.num_checkpoints_write: a checkpoint-only "
                        "workflow says how many checkpoints it writes")
    if job.writes < 1 or job.reads > job.writes:
        raise SpecError(f"{where}: checkpoint.num_checkpoints_write = {job.writes}, "
                        f"num_checkpoints_read = {job.reads}: writes >= 1 and reads <= "
                        "writes (DLIO's rule)")
    job.not_emulated = sorted(set(skipped))
    return job


def _check(name: str, value: Any, types: tuple[type, ...], where: str) -> None:
    """A checkpoint field of the right type; numbers finite, >= 0 and <= its MAXIMUM."""
    if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
        raise SpecError(f"{where}: {name} = {show(value)}: must be "
                        f"{' or '.join(t.__name__ for t in types)}")
    if isinstance(value, NUMBER) and not isinstance(value, bool):
        top = MAXIMUM.get(name.rpartition(".")[2])
        try:
            ok = 0 <= float(value) < float("inf") and (top is None or float(value) <= top)
        except OverflowError:
            ok = False
        if not ok:
            raise SpecError(f"{where}: {name} = {show(value)}: must be a finite number >= 0"
                            + (f" and <= {top:,}" if top is not None else ""))


def warning(job: CheckpointJob) -> str:
    """The one line naming what the testbed does not emulate ('' when nothing)."""
    if not job.not_emulated:
        return ""
    return (f"{job.source}: not emulated (the figures leave them out): "
            f"{', '.join(job.not_emulated)}")
