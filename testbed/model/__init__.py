"""What should limit a point: bounds (compute, fibre, window, slots, loss, latency, host)
and the prediction (bounds), the end hosts' terms (host), Linux's read-ahead
(readahead), the readers' event simulation (sim), TCP's response to loss (tcp), a
checkpoint's write (write) and its read back over nconnect connections (read_back). Pure
functions, no I/O."""

from testbed.model.bounds import (LABELS, SKB_WINDOW_SHARE, Bounds, Path,
                                  fibre_Bps, loss_Bps, payload_share, predict, slots_Bps,
                                  window_Bps, window_share)
from testbed.model.host import HOST_LABELS, HostShare, host_terms
from testbed.model.read_back import READ_LABELS, ReadBound, read_back_bound
from testbed.model.sim import Reading
from testbed.model.write import WRITE_LABELS, WriteBound, WritePath, write_bound

__all__ = ["LABELS", "SKB_WINDOW_SHARE", "Bounds", "Path", "Reading",
           "fibre_Bps", "loss_Bps", "payload_share", "predict", "slots_Bps", "window_Bps",
           "window_share"]
__all__ += ["HOST_LABELS", "HostShare", "host_terms"]
__all__ += ["WRITE_LABELS", "WriteBound", "WritePath", "write_bound"]
__all__ += ["READ_LABELS", "ReadBound", "read_back_bound"]
