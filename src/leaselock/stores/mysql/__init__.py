"""MySQLLockStore: locks in an InnoDB table of MySQL 8 or MariaDB 10.6+, tokens from its counter."""

from ._store import RENEW_CHUNK as RENEW_CHUNK
from ._store import MySQLLockStore as MySQLLockStore

__all__ = ["RENEW_CHUNK", "MySQLLockStore"]
