"""`testbed clean`: the ordered steps that undo a crashed run, from the network layer and
the services layer, put together here so that imports point one way (services never
register anything with the network layer)."""

from testbed.network import cleanup as net_cleanup
from testbed.network.cleanup import DEADLINE_S, CleanReport, Step
from testbed.services.nfs import stop_dead_nfsd

__all__ = ["CleanReport", "STEPS", "clean"]

# In this order, for each dead run (testbed.network.cleanup says what each step does):
STEPS: tuple[Step, ...] = (
    net_cleanup.unmount_nfs,             # while the run's nfsd still answers
    net_cleanup.kill_procs,              # mountd, cachefilesd, loaders ...
    net_cleanup.unmount_other,           # FS-Cache's filesystem, now no daemon holds it
    net_cleanup.external(stop_dead_nfsd),  # nfsd threads to 0, exports flushed
    net_cleanup.remove_namespaces,       # every link, bridge and qdisc with them
    net_cleanup.remove_dirs,             # scratch folders, then the run folder
    net_cleanup.restore_tcp_mem,         # the kernel's tcp_mem as the run found it
    net_cleanup.restore_sysctls,         # settings held for a moment (sunrpc's slots)
)


def clean(deadline_s: float = DEADLINE_S) -> CleanReport:
    """Remove leftovers of every dead run (never a live run's); return what was removed
    and what was not."""
    return net_cleanup.clean(STEPS, deadline_s)
