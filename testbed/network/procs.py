"""Processes in the namespaces of a running network: commands run to completion, and
long-lived ones recorded in the run registry and stopped at teardown.

Commands run in a node's network namespace and the host's mount namespace (nsenter
--net, testbed.launch). Network holds one Processes as `net.procs`.
"""

from __future__ import annotations

import subprocess
from typing import Any, Callable, Sequence

from testbed import launch
from testbed.network.nodes import Nodes
from testbed.network.state import RunState


class Processes:
    """Start and stop processes in a network's namespaces. Every process started with
    popen/popen_raw is recorded in the run's registry (so `testbed clean` can kill it
    after a crash) and stopped by `at_teardown`'s callback when the network goes down."""

    def __init__(self, nodes: Nodes, state: RunState,
                 at_teardown: Callable[..., Any]) -> None:
        self.nodes = nodes
        self.state = state
        self._at_teardown = at_teardown

    def cmd(self, node: str, argv: Sequence[str]) -> list[str]:
        """argv that runs `argv` in node's network namespace (host mount namespace)."""
        return launch.in_netns(self.nodes.netns_path(node), argv)

    def run(self, node: str, argv: Sequence[str], timeout: float = 60.0,
            check: bool = True, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        """Run a command to completion in node's namespace; output captured as text.

        Raises ServiceError on a timeout or (check=True) a non-zero exit."""
        return launch.run(self.cmd(node, argv), timeout=timeout, check=check,
                          what=f"{' '.join(argv[:3])} in {node}", **kwargs)

    def popen(self, node: str, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start a long-lived process in node's namespace; it is recorded in the run registry
        and killed (by its PID) at teardown."""
        return self.popen_raw(self.cmd(node, argv), namespace=self.nodes.namespace(node),
                              **kwargs)

    def popen_raw(self, argv: Sequence[str], namespace: str | None = None,
                  **kwargs: Any) -> subprocess.Popen[Any]:
        """Start `argv` as is (it enters namespaces itself), recorded and killed at teardown.

        The process leads its own process group, so its children go with it."""
        proc = launch.start(argv, **kwargs)
        self.state.add_proc(proc.pid, list(argv), namespace)
        self._at_teardown(self.stop, proc)
        return proc

    def stop(self, proc: subprocess.Popen[Any], grace_s: float = 3.0) -> None:
        """Stop a process started with popen (its whole group) and forget it."""
        launch.stop(proc, grace_s)
        self.state.drop_proc(proc.pid)
