"""Forks: a Locks started in one process is refused at once in a forked child, never hung.

A forked child (gunicorn ``--preload``, Django ``AppConfig.ready()``, ``multiprocessing``'s fork)
inherits a started ``SyncLocks`` without its loop thread, and a ``Locks`` with connections and
leases that belong to the parent. Using either there would hang, or share the parent's locks.
"""

from __future__ import annotations

import os

from ._errors import LocksConfigurationError

__all__ = ["process_generation", "refuse_if_forked"]

_generation = 0


def _forked() -> None:
    global _generation  # noqa: PLW0603 -- one counter per process, bumped in each child
    _generation += 1


os.register_at_fork(after_in_child=_forked)


def process_generation() -> int:
    """Return a number that changes in a forked child: record it when something starts."""
    return _generation


def refuse_if_forked(started_in: int, what: str) -> None:
    """Refuse to use ``what``, started under ``started_in``, in a forked child.

    Raises:
        LocksConfigurationError: this process is a fork of the one that started it.
    """
    if started_in != _generation:
        raise LocksConfigurationError(
            f"This {what} was started in the parent of this process, before a fork (gunicorn "
            "--preload, multiprocessing, a pre-forking server): its event loop thread, store "
            f"connections and leases stayed in the parent. Make and start a {what} in each "
            "worker instead: in gunicorn's post_fork hook, in your app factory, or on first use"
        )
