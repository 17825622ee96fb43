"""System tests: root and a full kernel (netem, nfsd, NFS client). They FAIL, never skip,
where those are missing: run them in the lab kernel (`lab/run .venv/bin/pytest -m system`)."""

import os
from pathlib import Path

import pytest

from testbed import topology
from testbed.network.engine import Network

pytestmark = pytest.mark.system


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/system" in str(item.fspath):
            item.add_marker(pytest.mark.system)


@pytest.fixture(scope="session", autouse=True)
def real_kernel():
    if os.geteuid() != 0:
        pytest.fail("system tests need root and a full kernel: run them with lab/run", pytrace=False)
    yield
    leftovers = [n for n in os.listdir("/run/netns") if n.startswith("tb")] \
        if Path("/run/netns").is_dir() else []
    assert not leftovers, f"namespaces left behind: {leftovers}"


@pytest.fixture
def make_net():
    """make_net(name, **params) -> a running Network, torn down after the test."""
    nets = []

    def factory(name, **params):
        net = Network(topology.build(name, params))
        net.start()
        nets.append(net)
        return net

    yield factory
    for net in reversed(nets):
        net.stop()
