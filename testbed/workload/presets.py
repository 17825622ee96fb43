"""Workload presets: the loader and dataset knobs of a known training job, one name each.

MLPerf Storage (mlcommons/storage storage-conf/workload/*.yaml; anchors.md): sample size,
batch, emulated compute per step, reader threads and the AU pass bar; one sample per file.

llm7b-h100: the input stream of a 7B-parameter LLM pre-training on H100s, as in the IOWN
PoC with tsuzumi-7B. Assumed (not measured): 9,400 tokens/s per GPU (6 x 7e9 FLOPs per
token at 40 % of an H100's 989 dense BF16 TFLOPS), 4 bytes per token (int32 ids),
sequences of 2,048 tokens (8 KiB records), 4 sequences per step per GPU (0.87 s of
compute), read in order from 64 MiB token shards: about 38 KB/s per GPU.

A preset is a set of knob values (file_kib, batch, compute_ms, readers, and for record
streams format/access/records_per_file/shuffle); `scale` < 1 shrinks the sample size and
the compute time together, so the bandwidth a GPU demands stays the preset's.
"""

from __future__ import annotations

from typing import Any

from testbed.errors import SpecError
from testbed.schema import NO_PRESET

PRESETS: dict[str, dict[str, Any]] = {
    "unet3d-h100": {"sample_bytes": 146_600_628, "batch": 7, "compute_ms": 323.0,
                    "readers": 4, "au_bar": 90.0},
    "unet3d-a100": {"sample_bytes": 146_600_628, "batch": 7, "compute_ms": 636.0,
                    "readers": 4, "au_bar": 90.0},
    "resnet50-h100": {"sample_bytes": 114_660, "batch": 400, "compute_ms": 224.0,
                      "readers": 8, "au_bar": 90.0},
    "resnet50-a100": {"sample_bytes": 114_660, "batch": 64, "compute_ms": 151.0,
                      "readers": 8, "au_bar": 90.0},
    "cosmoflow-h100": {"sample_bytes": 2_828_486, "batch": 1, "compute_ms": 3.5,
                       "readers": 4, "au_bar": 70.0},
    "cosmoflow-a100": {"sample_bytes": 2_828_486, "batch": 1, "compute_ms": 5.51,
                       "readers": 4, "au_bar": 70.0},
    "llm7b-h100": {"sample_bytes": 8192, "batch": 4, "compute_ms": 871.5, "readers": 2,
                   "au_bar": 99.0, "shard_kib": 65536},
}
NONE = NO_PRESET  # no preset: the knobs as given


def preset(name: str, scale: float = 1.0) -> dict[str, Any]:
    """A preset's fields; scale < 1 shrinks sample size AND compute time together."""
    if name not in PRESETS:
        raise SpecError(f"preset: unknown {name!r}; known: {', '.join(PRESETS)}")
    if not 0 < scale <= 1:
        raise SpecError(f"scale: must be in (0, 1], got {scale}")
    p = dict(PRESETS[name])
    p["sample_bytes"] = max(4096, int(p["sample_bytes"] * scale))
    p["compute_ms"] = p["compute_ms"] * scale
    return p


def knob_values(name: str, scale: float = 1.0) -> dict[str, Any]:
    """The knob values a preset sets (dimension names -> values); {} for "custom"."""
    if name == NONE:
        return {}
    p = preset(name, scale)
    out = {k: p[k] for k in ("batch", "compute_ms", "readers")}
    if "shard_kib" in p:  # a token stream: records read in order from big shards
        per_shard = max(1, p["shard_kib"] * 1024 // p["sample_bytes"])
        out.update(file_kib=p["shard_kib"], records_per_file=per_shard, format="record",
                   access="record", shuffle=False)
    else:
        out["file_kib"] = max(4, p["sample_bytes"] // 1024)
    return out
