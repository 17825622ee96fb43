"""Processes on the host, found by what their command line mentions (a job's folder, a
lab kernel's run folder): how the lab tests find what a run started and check it ended."""

from pathlib import Path


def processes_mentioning(text: str) -> list[int]:
    """PIDs whose command line contains `text`."""
    found = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if text in (p / "cmdline").read_bytes().replace(b"\0", b" ").decode():
                    found.append(int(p.name))
            except OSError:
                pass
    return found
