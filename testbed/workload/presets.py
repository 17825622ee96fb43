"""Workload presets: the loader and dataset knobs of a known training job, one name each.

MLPerf Storage v2.0's training workloads are read from its DLIO configs as they are
(testbed/workload/mlperf/*.yaml, by testbed.workload.dlio): sample size and samples per
file, batch, reader threads, prefetch, shuffling, compute per step and the AU bar, each
number from that one source. Under MLPerf's CLOSED division a submitter may change only
the dataset's size and the reader's threads and memory (read_threads, prefetch): the
compute time, batch and record sizes are the benchmark's.

llm7b-h100: the input stream of a 7B-parameter LLM pre-training on H100s, as in the IOWN
PoC with tsuzumi-7B. Assumed (not measured): 9,400 tokens/s per GPU (6 x 7e9 FLOPs per
token at 40 % of an H100's 989 dense BF16 TFLOPS), 4 bytes per token (int32 ids),
sequences of 2,048 tokens (8 KiB records), 4 sequences per step per GPU (0.87 s of
compute), read in order from 64 MiB token shards: about 38 KB/s per GPU.

`scale` < 1 shrinks every record and the compute time together, so the bandwidth a GPU
demands stays the preset's.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from testbed.errors import SpecError
from testbed.schema import NO_PRESET
from testbed.workload import dlio

MLPERF_DIR = Path(__file__).resolve().parent / "mlperf"
MLPERF: dict[str, str] = {
    "unet3d-h100": "unet3d_h100.yaml", "unet3d-a100": "unet3d_a100.yaml",
    "resnet50-h100": "resnet50_h100.yaml", "resnet50-a100": "resnet50_a100.yaml",
    "cosmoflow-h100": "cosmoflow_h100.yaml", "cosmoflow-a100": "cosmoflow_a100.yaml",
}
LLM7B = dlio.Job(name="llm7b", samples_per_file=65536 * 1024 // 8192, record_bytes=8192,
                 batch=4, readers=2, prefetch=2, computation_s=0.8715, au=0.99,
                 source="testbed/workload/presets.py")


@functools.cache
def job(name: str) -> dlio.Job:
    """A preset's DLIO job (read from its MLPerf config once)."""
    if name == "llm7b-h100":
        return LLM7B
    if name not in MLPERF:
        raise SpecError(f"preset: unknown {name!r}; known: {', '.join(PRESETS)}")
    return dlio.load(MLPERF_DIR / MLPERF[name])


PRESETS: dict[str, dict[str, Any]] = {
    name: {"au_bar": job(name).au_bar, "sample_bytes": job(name).sample_bytes}
    for name in (*MLPERF, "llm7b-h100")}
NONE = NO_PRESET  # no preset: the knobs as given


def preset(name: str, scale: float = 1.0) -> dict[str, Any]:
    """A preset's headline fields (sample bytes, compute per step, AU bar) at `scale`."""
    if not 0 < scale <= 1:
        raise SpecError(f"scale: must be in (0, 1], got {scale}")
    j = job(name)
    return {"sample_bytes": max(1, int(j.record_bytes * scale)),
            "compute_ms": j.compute_ms * scale, "au_bar": j.au_bar}


def knob_values(name: str, scale: float = 1.0) -> dict[str, Any]:
    """The knob values a preset sets (dimension names -> values); {} for "custom"."""
    if name == NONE:
        return {}
    if not 0 < scale <= 1:
        raise SpecError(f"scale: must be in (0, 1], got {scale}")
    return job(name).knobs(scale)
