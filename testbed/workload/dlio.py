"""DLIO workload files (the MLPerf Storage configs) read as they are, with DLIO's own
field names, into the loader's knobs.

A training job in DLIO is a dataset (files of `num_samples_per_file` records of
`record_length_bytes`), a reader (`batch_size`, `read_threads`, `prefetch_size`,
shuffling, `transfer_size`) and `computation_time` per step; `metric.au` is its pass bar.
FIELDS says, field by field, which knob each sets, which the testbed reads but need not
emulate (they do not change what crosses the fibre: where the data lies, the model's
name), and which it does not emulate (named in one warning line: a user must know what
the figure leaves out, e.g. record sizes that vary around their mean, framework
threads that decode after the read, epochs when the testbed measures a steady state).
DLIO's defaults (dlio_benchmark/utils/config.py) apply to fields left out.

The dataset is scaled, not copied: MLPerf asks for a dataset of at least five times the
client's memory so that no epoch is served from its page cache; the testbed reads every
file with a cold client (fresh mounts, caches dropped per point) and drops each read from
the page cache after it (POSIX_FADV_DONTNEED), so a few files of the job's size read as
the job's whole set would. `[dataset] files` says how many; `num_files_train` is recorded,
not written.

Checkpointing (workflow.checkpoint without training: MLPerf's llama3_*.yaml) is a
CheckpointJob (dlio_checkpoint); data generation alone is refused in one line.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from testbed import userfiles
from testbed.errors import SpecError
from testbed.schema import show
from testbed.workload import dlio_checkpoint
from testbed.workload.dlio_checkpoint import CheckpointJob

# How a field is taken: "knob" sets a loader/dataset knob (through a Job attribute),
# "read" is read and has no effect on what crosses the fibre, "not emulated" is warned.
KNOB, READ, NOT_EMULATED = "knob", "read", "not emulated"
NUMBER = (int, float)
MAX_FILE_BYTES = 64 << 10  # MLPerf's configs are under 1 KiB; 64 KiB of YAML parses in < 0.4 s


@dataclass(frozen=True)
class Field:
    """A DLIO field: its dotted name, the YAML types it may hold, how it is taken, and
    for knobs the Job attribute it sets."""

    name: str
    types: tuple[type, ...]
    how: str
    attr: str = ""


FIELDS: dict[str, Field] = {f.name: f for f in (
    Field("model.name", (str,), READ, "name"),
    Field("model.type", (str,), READ),
    Field("framework", (str,), NOT_EMULATED),
    Field("workflow.generate_data", (bool,), READ),
    Field("workflow.train", (bool,), READ),
    Field("workflow.checkpoint", (bool,), READ),
    Field("workflow.evaluation", (bool,), NOT_EMULATED),
    Field("dataset.data_folder", (str,), READ),
    Field("dataset.format", (str,), READ, "format"),
    Field("dataset.num_files_train", (int,), READ, "num_files"),
    Field("dataset.num_files_eval", (int,), NOT_EMULATED),
    Field("dataset.num_samples_per_file", (int,), KNOB, "samples_per_file"),
    Field("dataset.record_length_bytes", NUMBER, KNOB, "record_bytes"),
    Field("dataset.record_length_bytes_stdev", NUMBER, NOT_EMULATED),
    Field("dataset.record_length_bytes_resize", NUMBER, READ),
    Field("dataset.num_subfolders_train", (int,), NOT_EMULATED),
    Field("dataset.compression", (str,), NOT_EMULATED),
    Field("reader.data_loader", (str,), NOT_EMULATED),
    Field("reader.batch_size", (int,), KNOB, "batch"),
    Field("reader.read_threads", (int,), KNOB, "readers"),
    Field("reader.computation_threads", (int,), NOT_EMULATED),
    Field("reader.prefetch_size", (int,), KNOB, "prefetch"),
    Field("reader.file_shuffle", (str, bool), KNOB, "file_shuffle"),
    Field("reader.sample_shuffle", (str, bool), KNOB, "sample_shuffle"),
    Field("reader.shuffle_size", (int,), NOT_EMULATED),
    Field("reader.transfer_size", (int,), KNOB, "transfer_bytes"),
    Field("reader.dont_use_mmap", (bool,), READ),
    Field("reader.odirect", (bool,), NOT_EMULATED),
    Field("reader.preprocess_time", NUMBER + (dict,), NOT_EMULATED),
    Field("train.epochs", (int,), READ),
    Field("train.computation_time", NUMBER + (dict,), KNOB, "computation_s"),
    Field("train.computation_time_stdev", NUMBER, NOT_EMULATED),
    Field("train.total_training_steps", (int,), NOT_EMULATED),
    Field("train.seed", (int,), READ),
    Field("metric.au", NUMBER, KNOB, "au"),
)}
# Whole sections of a training config that are the checkpoint's (not emulated while
# training) or the model's shape (read: it sizes checkpoints, not reads).
SECTIONS = {"checkpoint": NOT_EMULATED, "model": READ, "evaluation": NOT_EMULATED,
            "output": READ, "profiling": READ, "storage": NOT_EMULATED,
            "hydra": READ}
# A file of one sample is read whole whatever its container (npz, tfrecord, hdf5...): the
# bytes that cross the fibre are the sample's, so the testbed writes it as raw bytes.
# Files of many samples are record files, read record by record.
SHUFFLE = {"off": False, "seed": True, "random": True, False: False, True: True}


# The DLIO field behind each knob a Job sets (for messages about a value out of range).
FIELD_OF_KNOB = {"batch": "reader.batch_size", "readers": "reader.read_threads",
                 "prefetch": "reader.prefetch_size", "read_kib": "reader.transfer_size",
                 "compute_ms": "train.computation_time",
                 "file_kib": "dataset.record_length_bytes",
                 "records_per_file": "dataset.num_samples_per_file",
                 "shuffle": "reader.sample_shuffle", "format": "dataset.format",
                 "access": "dataset.num_samples_per_file"}


@dataclass
class Job:
    """A DLIO training job's figures, DLIO's defaults where the file is silent."""

    name: str = "dlio"
    format: str = "npz"
    num_files: int = 0
    samples_per_file: int = 1
    record_bytes: float = 64 * 1024
    batch: int = 1
    readers: int = 1
    prefetch: int = 2
    file_shuffle: Any = "off"
    sample_shuffle: Any = "off"
    transfer_bytes: int | None = None
    computation_s: Any = 0.0
    au: float = 0.90
    source: str = ""
    not_emulated: list[str] = field(default_factory=list)

    @property
    def compute_ms(self) -> float:
        """Compute per step in ms (a {mean, stdev} computation_time by its mean)."""
        c = self.computation_s
        return 1000.0 * float(c.get("mean", 0.0) if isinstance(c, dict) else c)

    @property
    def au_bar(self) -> float:
        """The pass bar in percent of AU."""
        return 100.0 * self.au

    @property
    def sample_bytes(self) -> int:
        """One sample's bytes."""
        return int(round(self.record_bytes))

    def knobs(self, scale: float = 1.0) -> dict[str, Any]:
        """The loader's and dataset's knob values; `scale` < 1 shrinks every record and
        the compute together, so the bandwidth demanded stays the job's."""
        record = max(1, int(self.record_bytes * scale))
        out: dict[str, Any] = {"batch": self.batch, "compute_ms": self.compute_ms * scale,
                               "readers": max(1, self.readers), "prefetch": max(1, self.prefetch),
                               "shuffle": bool(SHUFFLE[self.sample_shuffle]
                                               or SHUFFLE[self.file_shuffle])}
        if self.samples_per_file > 1:  # records packed in files, read record by record
            out.update(format="record", access="record",
                       records_per_file=self.samples_per_file,
                       file_kib=max(4, math.ceil(self.samples_per_file * record / 1024)))
        else:
            out.update(format="raw", access="file", file_kib=max(4, record // 1024))
        if self.transfer_bytes:
            out["read_kib"] = max(4, self.transfer_bytes // 1024)
        return out


def _flatten(doc: dict[str, Any], where: str) -> dict[str, Any]:
    """{"reader.batch_size": 7, ...}: the file's fields one level into each section."""
    flat: dict[str, Any] = {}
    for key, value in doc.items():
        if not isinstance(key, str):
            raise SpecError(f"{where}: key {show(key)}: DLIO keys are names")
        if isinstance(value, dict):
            for sub, v in value.items():
                flat[f"{key}.{sub}"] = v
        else:
            flat[key] = value
    return flat


def _check(f: Field, value: Any, where: str) -> Any:
    """A field's value of the right type and, for numbers, finite and not negative."""
    if isinstance(value, bool) and bool not in f.types:
        raise SpecError(f"{where}: {f.name} = {show(value)}: must be "
                        f"{' or '.join(t.__name__ for t in f.types)}")
    if not isinstance(value, f.types):
        raise SpecError(f"{where}: {f.name} = {show(value)}: must be "
                        f"{' or '.join(t.__name__ for t in f.types)}")
    if isinstance(value, NUMBER) and not isinstance(value, bool) and \
            not _finite_non_negative(value):
        raise SpecError(f"{where}: {f.name} = {show(value)}: must be a finite number >= 0")
    return value


def _finite_non_negative(value: Any) -> bool:
    """A number (not a bool) that a float holds, finite and >= 0 (YAML integers have
    any size: one past a float's range is as unusable as .inf)."""
    if isinstance(value, bool) or not isinstance(value, NUMBER):
        return False
    try:
        return math.isfinite(float(value)) and value >= 0
    except OverflowError:
        return False


CHECKS: tuple[tuple[Callable[[Job], bool], str], ...] = (
    (lambda j: j.samples_per_file >= 1, "dataset.num_samples_per_file must be >= 1"),
    (lambda j: j.record_bytes >= 1, "dataset.record_length_bytes must be >= 1"),
    (lambda j: j.batch >= 1, "reader.batch_size must be >= 1"),
    (lambda j: j.prefetch >= 0, "reader.prefetch_size must be >= 0"),
    (lambda j: j.sample_shuffle in SHUFFLE and j.file_shuffle in SHUFFLE,
     "reader.file_shuffle and sample_shuffle: off, seed or random"),
    (lambda j: not isinstance(j.computation_s, dict) or
     _finite_non_negative(j.computation_s.get("mean", 0.0)),
     "train.computation_time: a number of seconds >= 0 or {mean: seconds}"),
    (lambda j: 0 < j.au <= 1, "metric.au must be in (0, 1]"),
)


def parse(doc: Any, where: str) -> Job | CheckpointJob:
    """A Job from a DLIO workload document (a CheckpointJob for a checkpoint-only
    workflow, dlio_checkpoint); SpecError (one line) for a malformed one or a workflow
    that neither trains nor checkpoints."""
    if not isinstance(doc, dict):
        raise SpecError(f"{where}: not a DLIO workload (a YAML mapping of sections)")
    flat = _flatten(doc, where)
    if dlio_checkpoint.is_checkpoint(flat):
        return dlio_checkpoint.parse(doc, flat, where)
    if flat.get("workflow.train") is False:
        what = "a dataset" if flat.get("workflow.generate_data") else "nothing"
        raise SpecError(f"{where}: workflow: this file writes {what} without training or "
                        "checkpoints; the testbed emulates training reads (workflow.train: "
                        "True) and checkpoints (workflow.checkpoint: True)")
    job, skipped = Job(source=where), []
    for name, value in flat.items():
        f = FIELDS.get(name)
        section = name.split(".", 1)[0]
        if f is None:
            if SECTIONS.get(section) == NOT_EMULATED:
                skipped.append(section)
            elif section not in SECTIONS:
                skipped.append(name)
            continue
        _check(f, value, where)
        if f.how == NOT_EMULATED:
            skipped.append(name)
        if f.attr:
            setattr(job, f.attr, value)
    for ok, problem in CHECKS:
        if not ok(job):
            raise SpecError(f"{where}: {problem}")
    job.not_emulated = sorted(set(skipped))
    return job


def load(path: str | Path) -> Job | CheckpointJob:
    """A Job (or CheckpointJob) from a DLIO workload YAML file; SpecError (one line) for a file that is
    missing, unreadable, not YAML or malformed."""
    import yaml
    p = Path(path)
    text = userfiles.read_text(p, "DLIO config", "DLIO configs are YAML", MAX_FILE_BYTES)
    try:
        doc = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark is not None else ""
        raise SpecError(f"{p}: not valid YAML{at}: {getattr(exc, 'problem', exc)}") from None
    except RecursionError:
        raise SpecError(f"{p}: nested too deeply to be a DLIO workload") from None
    except ValueError:  # int() refuses the text of a huge integer (the loader passes it on)
        raise SpecError(f"{p}: an integer longer than {sys.get_int_max_str_digits()} digits:"
                        " no DLIO field takes one") from None
    return parse(doc, str(p))


def warning(job: Job | CheckpointJob) -> str:
    """The one line naming what the testbed does not emulate ('' when nothing)."""
    if isinstance(job, CheckpointJob):
        return dlio_checkpoint.warning(job)
    if not job.not_emulated:
        return ""
    return (f"{job.source}: not emulated (the figures leave them out): "
            f"{', '.join(job.not_emulated)}")
