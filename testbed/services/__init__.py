"""Services bound to namespaces of a running Network (kernel NFS server and mounts).

Importing this package registers the services' step in `testbed clean`: stopping nfsd in
the namespaces of a crashed run."""

from pathlib import Path

from testbed.network import cleanup as _cleanup
from testbed.network.state import RunState


def _stop_dead_nfsd(st: RunState, seconds: float) -> None:
    """Stop nfsd (threads to 0, exports flushed) in each namespace the dead run ran it."""
    from testbed.network.state import STATE_DIR
    from testbed.services.nfs import stop_nfsd
    for ns in st.nfsd_namespaces:
        node = ns.split("-", 1)[1]
        stop_nfsd(f"/run/netns/{ns}", Path(STATE_DIR) / st.prefix / f"nfsd-{node}", seconds)


_cleanup.HOOKS.append(_stop_dead_nfsd)
