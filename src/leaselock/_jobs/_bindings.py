"""Bindings: which runtime runs an object's or a function's jobs; the runtimes started here."""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar, final

__all__ = ["Bindings", "Started"]

R = TypeVar("R")


@final
class Bindings(Generic[R]):
    """What each registered object or function is bound to; weak where it can be."""

    def __init__(self) -> None:
        """Start with nothing bound."""
        self._guard = threading.Lock()
        self._by_id: dict[int, tuple[Callable[[], object], R]] = {}

    def bind(self, target: object, runtime: R) -> None:
        """Bind ``target`` to ``runtime`` (again: the latest wins)."""
        key = id(target)
        try:
            ref: Callable[[], object] = weakref.ref(target, lambda _: self._forget(key))
        except TypeError:
            # objects without weak references are kept: a registration is for the program's life
            ref = functools.partial(_same, target)
        with self._guard:
            self._by_id[key] = (ref, runtime)

    def _forget(self, key: int) -> None:
        with self._guard:
            self._by_id.pop(key, None)

    def unbind(self, runtime: R) -> None:
        """Forget everything bound to ``runtime``."""
        with self._guard:
            for key, (_, bound) in list(self._by_id.items()):
                if bound is runtime:
                    del self._by_id[key]

    def get(self, target: object) -> R | None:
        """Return what ``target`` is bound to, or ``None``."""
        entry = self._by_id.get(id(target))
        if entry is None or entry[0]() is not target:
            return None
        return entry[1]


def _same(target: object) -> object:
    return target


@final
class Started(Generic[R]):
    """The runtimes started in this process, oldest first, for code that runs outside them."""

    def __init__(self) -> None:
        """Start with none."""
        self._guard = threading.Lock()
        self._started: list[R] = []

    def add(self, runtime: R) -> None:
        """Record a runtime that started."""
        with self._guard:
            self._started.append(runtime)

    def discard(self, runtime: R) -> None:
        """Forget a runtime that is closing."""
        with self._guard:
            if runtime in self._started:
                self._started.remove(runtime)

    def only(self) -> R | None:
        """Return the one started runtime, or ``None`` with none or several."""
        with self._guard:
            return self._started[0] if len(self._started) == 1 else None
