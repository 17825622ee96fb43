"""Where jobs run: lab kernels on this host, or Dask workers on lab hosts.

Both take a job spec and return a concurrent.futures.Future of job_host.run_job's result.

LocalPool  one thread per lab kernel on this host; each run is streamed back as its lab
           kernel finishes it; closing stops every kernel still running.
DaskPool   a Dask distributed client: each job is one task that a worker runs in a lab
           kernel on its own host (job_host.run_job there) and returns whole. A worker lost
           mid-job has its task re-run by the scheduler on another worker; the client
           sees one result per task.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import re
import threading
import uuid
from typing import Any, Callable

from testbed.errors import SpecError, TestbedError
from testbed.experiment.run import job_host

log = logging.getLogger(__name__)

ADDRESS = re.compile(r"^(tcp|tls)://[A-Za-z0-9.\-\[\]:]+:\d{1,5}$")
CONNECT_S = 20
WORKERS_WAIT_S = 120

OnEvent = Callable[[dict[str, Any]], None]


class LocalPool:
    """Lab kernels on this host, `slots` at once (see the module docstring)."""

    streams = True

    def __init__(self, slots: int) -> None:
        """Up to `slots` lab kernels at once, each in a thread."""
        self.slots = slots
        self.stop = threading.Event()
        self.executor = cf.ThreadPoolExecutor(slots, thread_name_prefix="labkernel")

    def __enter__(self) -> LocalPool:
        """The pool, ready for jobs."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop every lab kernel still running."""
        self.close()

    def capacity(self) -> int:
        """Lab kernels this pool can run at once."""
        return self.slots

    def submit(self, spec: dict[str, Any], on_event: OnEvent) -> cf.Future[Any]:
        """Run the job in a lab kernel of this host; its runs go to on_event as they end."""
        return self.executor.submit(job_host.run_job, spec, on_event, self.stop)

    def close(self) -> None:
        """Stop every lab kernel still running and wait for their threads."""
        self.stop.set()
        self.executor.shutdown(wait=True, cancel_futures=True)


def check_address(address: str) -> str:
    """The scheduler address if it looks like tcp://HOST:PORT; SpecError otherwise."""
    if not ADDRESS.match(address):
        raise SpecError(f"--scheduler {address!r}: expected tcp://HOST:PORT, e.g. "
                        "tcp://10.0.0.5:8786")
    return address


class DaskPool:
    """Jobs as tasks of a Dask distributed scheduler (see the module docstring)."""

    streams = False

    def __init__(self, address: str) -> None:
        """Connect to the Dask scheduler at `address`: SpecError without Dask,
        TestbedError when it cannot be reached."""
        try:
            from distributed import Client
        except ImportError:
            raise SpecError("--scheduler needs Dask distributed, a dependency of the "
                            "project: sudo lab/provision --host installs it into .venv") \
                from None
        try:
            self.client = Client(check_address(address), timeout=f"{CONNECT_S}s",
                                 set_as_default=False)
        except (OSError, TimeoutError) as exc:
            raise TestbedError(f"cannot reach the Dask scheduler at {address}: "
                               f"{' '.join(str(exc).split())}") from None
        self.address = address
        self._futures: dict[str, Any] = {}

    def __enter__(self) -> DaskPool:
        """The pool, connected."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Cancel what is not finished and disconnect (close)."""
        self.close()

    def capacity(self) -> int:
        """Threads of all workers (one lab kernel each), waiting for a first worker."""
        try:
            self.client.wait_for_workers(1, timeout=WORKERS_WAIT_S)
        except TimeoutError:
            raise TestbedError(f"no Dask worker joined {self.address} within "
                               f"{WORKERS_WAIT_S} s") from None
        return max(1, sum(self.client.nthreads().values()))

    def workers(self) -> dict[str, int]:
        """Worker address -> threads, as the scheduler knows them now."""
        return dict(self.client.nthreads())

    def submit(self, spec: dict[str, Any], on_event: OnEvent) -> cf.Future[Any]:
        """Submit the job as a task; the future settles when its (last) worker returns."""
        key = f"apn-{spec['id']}-{uuid.uuid4().hex[:8]}"
        fut = self.client.submit(job_host.run_job, spec, key=key, pure=False)
        self._futures[key] = fut
        done: cf.Future[Any] = cf.Future()

        def settle(f: Any) -> None:
            """Pass the Dask future's outcome on to the concurrent one."""
            self._futures.pop(key, None)
            try:
                done.set_result(f.result())
            except BaseException as exc:  # the task's error, KilledWorker, cancellation
                done.set_exception(exc)

        fut.add_done_callback(settle)
        return done

    def close(self) -> None:
        """Cancel tasks not finished (a running lab kernel finishes on its worker) and
        disconnect."""
        if self._futures:
            self.client.cancel(list(self._futures.values()))
        self.client.close()
