"""What real end hosts let one worker move: the `host` bound (docs/hosts.md). Pure
functions, no I/O.

A Linux NFS client moves a bounded rate over each transport (one TCP connection or one
RDMA queue pair: one path that sends its RPCs and takes their replies, the reason
nconnect exists), a GPU host's storage NIC is shared by the GPUs on it, and the storage
server has a most per connection and in all. Time dilation and a virtual clock make the
emulator's CPU free, so these limits are stated (a host profile, spec.HostSpec) and
modelled here, and the emulator enforces the same (network/access.py).

Per worker, three terms (bytes/s of file data), each named as limited_by names it:

  host (connection)  connections x the client's most per connection / the workers
                     sharing them: a host's GPUs mounting one server address share its
                     NFS client and its nconnect connections (all mounts of one server
                     share a client's transports), so nconnect x mounts (server
                     addresses) connections carry the host's share of every worker
  host (nic)         the host's NIC line rate / the workers on the host, as payload
  host (server)      the server's most per connection (when below the client's, in the
                     connection term's place) and its total / every worker it serves
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from testbed.spec import HostSpec

CONNECTION, NIC, SERVER = "host (connection)", "host (nic)", "host (server)"
HOST_LABELS = (CONNECTION, NIC, SERVER)


@dataclass(frozen=True)
class HostShare:
    """Where one worker sits among the hosts: its transport and direction, its
    connections (nconnect x mounts), the workers on its host and on the server, and the
    payload share of a frame on its line (NIC rates are line rates)."""

    transport: str = "tcp"
    write: bool = False
    connections: int = 1
    on_host: int = 1
    on_server: int = 1
    payload: float = 1.0


def Bps(mbit: float) -> float:  # noqa: N802 (units in the name, as elsewhere)
    """Mbit/s -> bytes/s (inf stays inf)."""
    return mbit * 1e6 / 8


def host_terms(spec: HostSpec, share: HostShare) -> dict[str, float]:
    """The worker's host terms (bytes/s of file data, inf where nothing limits), keyed
    by HOST_LABELS (module docstring)."""
    client = spec.client_conn_mbit(share.transport, share.write)
    conn = Bps(min(client, spec.server_conn_mbit)) * share.connections / share.on_host
    server_total = Bps(spec.server_total_mbit) / share.on_server
    nic = Bps(spec.nic_mbit(share.write)) * share.payload / share.on_host
    if spec.server_conn_mbit < client:
        return {CONNECTION: math.inf, NIC: nic, SERVER: min(conn, server_total)}
    return {CONNECTION: conn, NIC: nic, SERVER: server_total}


def binding(terms: dict[str, float]) -> tuple[str, float]:
    """The host term that binds (the first of HOST_LABELS on a tie) and its rate; (the
    connection's label, inf) when there are none."""
    if not terms:
        return CONNECTION, math.inf
    label = min(HOST_LABELS, key=lambda k: (terms.get(k, math.inf), HOST_LABELS.index(k)))
    return label, terms.get(label, math.inf)
