"""MLPerf Storage workload presets (mlcommons/storage storage-conf/workload/*.yaml): sample
size, batch, emulated compute time per step, reader threads and the AU pass bar."""

from __future__ import annotations

from typing import Any

from testbed.errors import SpecError

# MLPerf Storage figures (mlcommons/storage storage-conf/workload/*.yaml; anchors.md):
# sample size, batch, compute time per step, reader threads, AU pass bar.
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
}


def preset(name: str, scale: float = 1.0) -> dict[str, Any]:
    """A preset's fields; scale < 1 shrinks sample size AND compute time together, so the
    bandwidth an accelerator demands stays the preset's while the lab's memory suffices."""
    if name not in PRESETS:
        raise SpecError(f"preset: unknown {name!r}; known: {', '.join(PRESETS)}")
    if not 0 < scale <= 1:
        raise SpecError(f"scale: must be in (0, 1], got {scale}")
    p = dict(PRESETS[name])
    p["sample_bytes"] = max(4096, int(p["sample_bytes"] * scale))
    p["compute_ms"] = p["compute_ms"] * scale
    return p
