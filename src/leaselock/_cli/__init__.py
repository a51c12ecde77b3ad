"""The ``leaselock`` command: operate and check lock stores from a shell.

``leaselock check --url URL`` tortures a store and checks its history. Every error a user can
cause (a bad URL, an unreachable server, a missing table) is one line naming the fix, exit code
2, no traceback; a broken promise is exit code 1. The operator commands create no file and no
table on any store, and those that only read open it read-only where it can be.
"""

from ._main import main

__all__ = ["main"]
