"""Statistics every layer shares: the 95 % Student t quantile and a mean with the
half-width of its 95 % interval. Pure functions of numbers (no pandas, no I/O); the
workload's window and the experiment's summaries both use these."""

from __future__ import annotations

import math
import statistics
from typing import Iterable

Z95 = 1.96
# Two-sided 95 % Student t quantiles by degrees of freedom (1..30); beyond, the normal's.
T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
       2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
       2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t95(n: int) -> float:
    """The two-sided 95 % Student t quantile for n samples (n - 1 degrees of freedom)."""
    if n < 2:
        return math.nan
    return T95[n - 2] if n - 1 <= len(T95) else Z95


def mean_ci(values: Iterable[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95 % interval; NaNs are dropped, and the
    half-width is NaN below 2 values (the mean NaN with none)."""
    v = [float(x) for x in values if x == x]
    if not v:
        return math.nan, math.nan
    if len(v) < 2:
        return v[0], math.nan
    return statistics.fmean(v), t95(len(v)) * statistics.stdev(v) / math.sqrt(len(v))
