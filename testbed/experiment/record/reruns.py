"""What varies between runs of a point that one run's batch means cannot see: the file
order a repetition draws, where the lab kernel's timers fall, the warm-up's end. A point
measured once reports its steps' batch-means interval widened by the rerun spread the
testbed measured for its kind of point (limited_by), so that its ± covers a rerun, and a
search decides a probe's side with the same spread.

RERUN_SD holds, per metric and kind of point, the standard deviation between reruns
beyond what the runs' own intervals explain: sqrt(max(0, var_between - mean(se_within^2)))
over the points every run measured and no run marked, pooled by kind. Measured by
`.venv/bin/python -m benchmarks.rerun_agreement --plain 3 --quota 0 --spread`: README's
demo three times, twice (2026-12-07, user-mode Linux 7.2.7, 1 CPU, on the 2-core Debian 12
VM, quiet: steal <= 0.5 %, host wait <= 5.1 % of any point; 8 compute-bound and 8
latency-bound points in all three runs). At fabbb95 AU spread 0.08 / 0.37 (compute /
latency), slowdown 0.1 / 0.48; at 569b6f2 AU 0.29 / 0.14, slowdown 0.25 / 0.08. Three
runs estimate a spread loosely, so each kind takes the larger of the two. Kinds not
measured take the largest figure.
"""

from __future__ import annotations

import math

from testbed.stats import Z95

# metric -> limited_by -> standard deviation between reruns, in the metric's unit.
RERUN_SD: dict[str, dict[str, float]] = {
    "au_pct": {"compute": 0.29, "latency": 0.37},
    "slowdown_pct": {"compute": 0.25, "latency": 0.48},
}


def rerun_sd(metric: str, kind: str) -> float:
    """The spread between reruns of a point of this kind (0.0 for a metric not measured
    for it: its interval then covers one run's steps only)."""
    table = RERUN_SD.get(metric, {})
    if not table:
        return 0.0
    return table.get(kind, max(table.values()))


def widened(own_half: float, metric: str, kind: str) -> float:
    """A single run's 95 % half-width with the rerun spread added in quadrature."""
    if not math.isfinite(own_half):
        return own_half
    return math.hypot(own_half, Z95 * rerun_sd(metric, kind))
