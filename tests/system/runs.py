"""What a run leaves where a test can see it, read one way for every system test: the
run registry a live run keeps (its phase, namespaces, mounts) and processes by name."""

import json
import os
from pathlib import Path

STATE = Path(os.environ.get("APN_STATE_DIR", "/run/apn-testbed"))


def registry_of(pid: int) -> dict | None:
    """The run registry of the run whose runner is `pid` (None until it has one)."""
    for f in STATE.glob("tb*.json") if STATE.is_dir() else []:
        try:
            data = json.loads(f.read_text())
        except (OSError, ValueError):
            continue  # being rewritten or removed
        if data.get("owner_pid") == pid:
            return data
    return None


def comm_pids(names: tuple[str, ...]) -> dict[int, str]:
    """PID -> name of every process (kernel threads too) whose name is one of `names`."""
    out = {}
    for p in os.listdir("/proc"):
        try:
            comm = Path(f"/proc/{p}/comm").read_text().strip()
        except OSError:
            continue
        if p.isdigit() and comm in names:
            out[int(p)] = comm
    return out
