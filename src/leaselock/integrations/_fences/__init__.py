"""Fenced tables and fenced sessions: the database refuses a stale holder's writes."""

from ._api import fenced as fenced
from ._api import fenced_sync as fenced_sync
from ._api import fenced_table as fenced_table
from ._api import unfenced as unfenced
from ._api import unfenced_sync as unfenced_sync
from ._lock import HeldLock as HeldLock

__all__ = ["HeldLock", "fenced", "fenced_sync", "fenced_table", "unfenced", "unfenced_sync"]
