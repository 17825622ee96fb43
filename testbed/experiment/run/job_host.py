"""A job's host side: one job in a fresh lab kernel on this host, the function a `testbed
run` host calls in a thread per lab kernel, and a Dask worker calls for each job it is
given (the lab-kernel side is testbed.experiment.run.job_kernel).

run_job writes the job's spec into its own folder REPO/.lab/jobs/<id>-<random> (the lab
kernel sees the repository read-write), starts `lab/run python -m
testbed.experiment.run.job_kernel FOLDER`, and while the kernel runs reads the runs it finishes
from events.jsonl, tagging each with this host's name, how many other lab kernels of
this checkout ran beside it (`neighbours`) and, from the host's scheduler, the share of
the run's wall time the kernel spent on a CPU and waiting for one (`host_cpu_pct`,
`host_wait_pct`: a guest cannot see the time it was not scheduled). It
returns plain data (events, the guest's status, a search row, artefact files such as
captures), so the result can travel back from a Dask worker. The folder is removed at
the end; folders whose owner process died are removed by the next job.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from testbed.labkernel import REPO, LabKernel, host_share

JOBS = REPO / ".lab" / "jobs"
POLL_S = 0.5
OWN_FILES = {"job.json", "owner.json", "events.jsonl", "status.json", "status.json.tmp",
             "search.json", "search.json.tmp", "results.csv", "steps.csv", "console.log"}

Event = dict[str, Any]


def _start_time(pid: int) -> str | None:
    """A process's start time in clock ticks (from /proc), None if it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _alive(folder: Path) -> bool:
    """Whether the process that owns a job folder still runs (PID and start time)."""
    try:
        owner = json.loads((folder / "owner.json").read_text())
    except (OSError, ValueError):
        return False
    return _start_time(int(owner["pid"])) == owner["start"]


class JobDir:
    """A job's folder under REPO/.lab/jobs, owned by this process; removed on exit."""

    def __init__(self, spec: dict[str, Any]) -> None:
        """The folder a job spec will get (made on entry)."""
        self.spec = spec
        self.path = JOBS / f"{spec['id']}-{uuid.uuid4().hex[:8]}"

    def __enter__(self) -> JobDir:
        """Make the folder with its owner and spec, atomically, after sweeping stale
        ones."""
        JOBS.mkdir(parents=True, exist_ok=True)
        sweep_stale()
        # Made under a hidden name and renamed: another job's sweep never sees it
        # without its owner.
        tmp = JOBS / f".{self.path.name}"
        tmp.mkdir()
        pid = os.getpid()
        (tmp / "owner.json").write_text(json.dumps({"pid": pid, "start": _start_time(pid)}))
        (tmp / "job.json").write_text(json.dumps(self.spec))
        tmp.rename(self.path)
        return self

    def __exit__(self, *exc: object) -> None:
        """Remove the folder and everything the guest wrote in it."""
        shutil.rmtree(self.path, ignore_errors=True)

    def others(self) -> int:
        """Other live job folders of this checkout: lab kernels running beside ours."""
        return sum(1 for d in _folders() if d != self.path and _alive(d))

    def files(self) -> dict[str, bytes]:
        """Artefacts the guest wrote besides its own files (e.g. capture/<point>/...)."""
        return {str(f.relative_to(self.path)): f.read_bytes()
                for f in sorted(self.path.rglob("*")) if f.is_file()
                and f.relative_to(self.path).as_posix() not in OWN_FILES
                and f.name != self.spec["experiment"]["name"]}


def _folders() -> list[Path]:
    """The job folders (hidden ones are being made)."""
    if not JOBS.is_dir():
        return []
    return [d for d in JOBS.iterdir() if d.is_dir() and not d.name.startswith(".")]


def sweep_stale() -> list[Path]:
    """Remove job folders whose owner process is gone (a killed worker's); their paths."""
    gone = [d for d in _folders() if not _alive(d)]
    for d in gone:
        shutil.rmtree(d, ignore_errors=True)
    return gone


class EventTail:
    """Complete lines appended to events.jsonl since the last read."""

    def __init__(self, path: Path) -> None:
        """Read `path` from its start."""
        self.path = path
        self.offset = 0

    def read(self) -> list[Event]:
        """The events whose line is complete, in order."""
        if not self.path.exists():
            return []
        with open(self.path, "rb") as fh:
            fh.seek(self.offset)
            data = fh.read()
        end = data.rfind(b"\n") + 1
        self.offset += end
        return [json.loads(line) for line in data[:end].splitlines() if line.strip()]


def _read_json(path: Path) -> Any:
    """A JSON file's content, None when it is missing or incomplete."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _follow(jd: JobDir, kernel: LabKernel, on_event: Callable[[Event], None] | None,
            stop: threading.Event | None) -> tuple[list[Event], int | None, str | None]:
    """Read events while the kernel runs; (events, lab/run's exit code or None if
    stopped, the run it had started and not finished when it ended, if any)."""
    tail, events, running = EventTail(jd.path / "events.jsonl"), [], None
    host, peak = socket.gethostname(), jd.others()
    meter = kernel.meter()
    last = (time.monotonic(), *meter.sample())
    while True:
        rc = kernel.poll()
        peak = max(peak, jd.others())
        now = (time.monotonic(), *meter.sample())
        for ev in tail.read():
            if ev.get("started"):
                peak, last, running = max(peak, jd.others()), now, ev["run"]
                continue
            if ev["run"] == running:
                running = None
            ev.update(host=host, neighbours=peak, **host_share(last, now))
            peak, last = jd.others(), now
            events.append(ev)
            if on_event is not None:
                on_event(ev)
        if rc is not None:
            return events, rc, running
        if stop is not None and stop.is_set():
            return events, None, running
        time.sleep(POLL_S)


def run_job(spec: dict[str, Any], on_event: Callable[[Event], None] | None = None,
            stop: threading.Event | None = None) -> dict[str, Any]:
    """Run a job spec (testbed.experiment.run.jobs.spec) in a fresh lab kernel on this host.

    on_event gets each finished run as it arrives (local runs stream them); stop, when
    set, stops the kernel early. Returns {"id", "host", "rc", "events", "status",
    "search", "files", "console", "verdict", "running", "seconds"}: rc is lab/run's exit
    code (None if stopped), status the guest's status.json (None if it never wrote
    one), verdict lab/run's own words on how the kernel ended ("" when it said nothing),
    running the run the kernel had started and not finished (None: none)."""
    t0 = time.monotonic()
    cmd = [sys.executable, "-m", "testbed.experiment.run.job_kernel"]
    with JobDir(spec) as jd:
        with LabKernel([*cmd, str(jd.path)], console=jd.path / "console.log",
                       timeout_s=int(spec["timeout_s"])) as kernel:
            events, rc, running = _follow(jd, kernel, on_event, stop)
        return {"id": spec["id"], "host": socket.gethostname(), "rc": rc, "events": events,
                "status": _read_json(jd.path / "status.json"),
                "search": _read_json(jd.path / "search.json"), "files": jd.files(),
                "console": kernel.tail(), "verdict": kernel.verdict(), "running": running,
                "seconds": time.monotonic() - t0}
