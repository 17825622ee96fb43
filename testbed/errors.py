"""The one error hierarchy of the testbed. Every message names the object that failed.

SpecError is bad input (an experiment file, a -p KEY=VALUE, a flag): the CLI prints it as
one line and exits 2, before anything is created in the kernel. The others are runtime
failures of something that was valid on paper: the CLI prints one line and exits 1, and
the experiment runner records them as a failed point instead of stopping the sweep.
"""


class TestbedError(Exception):
    """Base class of every error the testbed raises on purpose."""

    __test__ = False  # not a pytest test class, despite the name


class SpecError(TestbedError, ValueError):
    """A description (spec, topology parameter, experiment file, flag) is invalid."""


class KernelError(TestbedError):
    """The kernel refused or lacks something (a netlink call, a module, a sysctl)."""


class ServiceError(TestbedError):
    """A service (NFS server, mount, cache, capture, a tool we launch) failed."""


class WorkloadError(TestbedError):
    """The training-input loader could not read its data (I/O error, missing files)."""


class ResultsError(TestbedError):
    """A results folder cannot be written or read as asked (foreign columns, no rows)."""


class PointFailed(TestbedError):
    """One experiment point could not be measured; the sweep records it and goes on."""
