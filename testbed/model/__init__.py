"""What should limit a point: bounds (compute, fibre, window, loss, latency) and the
prediction (bounds), Linux's read-ahead (readahead), the readers' event simulation
(sim) and TCP's response to loss (tcp). Pure functions, no I/O."""

from testbed.model.bounds import (LABELS, Bounds, Path, fibre_Bps, loss_Bps, predict,
                                  window_Bps, window_share)
from testbed.model.sim import Reading

__all__ = ["LABELS", "Bounds", "Path", "Reading", "fibre_Bps", "loss_Bps", "predict",
           "window_Bps", "window_share"]
