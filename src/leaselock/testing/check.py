"""``check_store``: a bounded torture test of a real store, and the history checker's verdict.

What ``leaselock check`` runs: worker processes on one key doing fenced writes, while a nemesis
pauses holders past the ttl and kills workers; then :mod:`leaselock.testing.history` judges the
record of every store call.

.. versionadded:: 0.2
"""

from ._check_resource import FencedResource, SqliteResource
from ._torture import CheckResult, check_store

__all__ = ["CheckResult", "FencedResource", "SqliteResource", "check_store"]
