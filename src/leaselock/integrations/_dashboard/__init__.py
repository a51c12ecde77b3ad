"""The operator's dashboard: its parts, behind :mod:`leaselock.integrations.dashboard`."""

from ._app import Dashboard
from ._auth import Authenticate

__all__ = ["Authenticate", "Dashboard"]
