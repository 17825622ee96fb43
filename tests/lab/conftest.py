"""Lab tests: run on the HOST (no netem or nfsd needed here) and start lab kernels
themselves through lab/run, as `testbed run` does from a build host. They FAIL, never
skip, where the lab kernel is missing: `lab/provision --host` unpacks it."""

import pytest

from testbed import labkernel


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/lab" in str(item.fspath):
            item.add_marker(pytest.mark.lab)


@pytest.fixture(scope="session", autouse=True)
def lab_kernel():
    try:
        labkernel.lab_ready()
    except Exception as exc:
        pytest.fail(f"lab tests need a lab kernel: {exc}", pytrace=False)
