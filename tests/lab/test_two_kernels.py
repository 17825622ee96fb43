"""One point over two lab kernels, each started by its own Dask worker: a loopback
scheduler and two workers (separate processes on this machine), the server's kernel
(kernel nfsd, a random 256 MiB file on tmpfs) on one, the client's (a real NFSv4.2 mount)
on the other, joined through two host taps on a host bridge (UML's tap transport). The read must
cross the join (the client's vec0 received at least what it read), come back verified
(SHA-256 against the server's), name what limited it, and leave no host device or kernel
behind. The way a point larger than one host would run: docs/multi-cpu.md."""

import subprocess

from lab_processes import processes_mentioning
from test_dask import cluster  # noqa: F401  (the fixture: a scheduler and two workers)

from benchmarks import two_kernels
from testbed.labkernel import UML


def test_a_two_kernel_point_runs_through_two_dask_workers(cluster):  # noqa: F811
    address, procs, _ = cluster
    res = two_kernels.two_kernels(seconds=3, nconnect=4, scheduler=address)
    print(res)
    assert res["verified"], "the file read across the join differs from the server's"
    assert res["bytes"] >= 256 * 2**20
    assert res["crossed_bytes"] >= res["bytes"], "the read did not cross the join"
    assert res["limit"] in {"join", "server-cpu", "client-cpu"}
    # each kernel ran on its own worker
    pids = {int(where.rsplit(":", 1)[1]) for where in res["where"]}
    assert pids == {procs["wa"].pid, procs["wb"].pid}
    links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
    assert two_kernels.PREFIX not in links, "a host device of the point outlived it"
    assert not processes_mentioning(str(UML)), "a lab kernel outlived the point"
