"""The one error hierarchy of the testbed. The CLI turns any TestbedError into one line on
stderr and a non-zero exit; every message names the object that failed."""


class TestbedError(Exception):
    """Base class of every error the testbed raises on purpose."""

    __test__ = False  # not a pytest test class, despite the name


class SpecError(TestbedError, ValueError):
    """A description (spec, topology parameter, experiment file) is invalid."""


class KernelError(TestbedError):
    """The kernel refused or lacks something (a netlink call, a module, a sysctl)."""


class ServiceError(TestbedError):
    """A service (NFS server, mount, capture) failed to start, answer or stop."""
