"""`testbed clean`: the network layer's cleanup plus the hooks of the services layer
(stopping nfsd in a dead run's namespaces), composed here so imports point one way."""

from testbed.network.cleanup import CleanReport, clean

try:  # the services layer registers its hooks on import
    import testbed.services  # noqa: F401
except ImportError:  # pragma: no cover - services not present
    pass

__all__ = ["CleanReport", "clean"]
