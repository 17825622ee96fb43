"""sunrpc's RPC slot table: how many requests one TCP transport keeps in flight.

Every NFSv3 request (a READ, a WRITE, a LOOKUP) takes a slot of its transport's table
until its reply comes back. Linux sizes a TCP transport's table when the transport is
made, from sunrpc's tcp_max_slot_table_entries (65,536 by default, so it binds only
where someone lowered it, as administrators of shared NFS servers do to keep one client
from flooding them). NFSv4.1+ clients make their transports with unlimited slots
(XPRT_CREATE_INFINITE_SLOTS): their sessions' slots govern instead, and the server grows
those on demand (docs/advise.md). Measured in user-mode Linux 7.2.7 at 3,000 km with the
setting at 4: an NFSv3 mount kept at most 4 READs in flight (mountstats' max slots), an
NFSv4.2 mount 93. The setting is the kernel's, not a namespace's, and not a mount
option: a mount that asks for `rpc_slots` writes it for the moment its transports are
made (nconnect's too, all made by mount) and puts the value it found back at once; the
run's registry holds both meanwhile, so `testbed clean` puts it back after a kill
(network.cleanup.restore_sysctls).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from testbed import launch
from testbed.errors import ServiceError
from testbed.network import state as state_mod
from testbed.network.cleanup import put_back_setting

log = logging.getLogger(__name__)
SLOT_TABLE = Path("/proc/sys/sunrpc/tcp_max_slot_table_entries")


@contextmanager
def held(st: state_mod.RunState, slots: int | None,
         path: Path = SLOT_TABLE) -> Iterator[None]:
    """Hold the slot table's maximum at `slots` for the body (a mount being made); None
    leaves the kernel's setting alone. ServiceError when the kernel has no such setting."""
    if slots is None:
        yield
        return
    if not path.exists():  # sunrpc is a module on most kernels: loaded by its first mount
        launch.run(["modprobe", "-q", "sunrpc"], timeout=30, what="load sunrpc", check=False)
    try:
        found = path.read_text().strip()
    except OSError as exc:
        raise ServiceError(f"rpc_slots = {slots}: this kernel has no {path} "
                           f"({exc.strerror or exc})") from None
    st.hold_sysctl(str(path), found, str(slots))  # recorded first: a kill loses nothing
    try:
        path.write_text(str(slots))
        yield
    finally:
        try:
            put_back_setting(path, found, str(slots))  # someone else's value stays theirs
            st.drop_sysctl(str(path))
        except OSError as exc:  # left in the registry: `testbed clean` tries again
            log.warning("%s not put back to %s: %s", path, found, exc.strerror or exc)
