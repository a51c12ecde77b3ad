"""The public surface: complete, sorted, importable, and nothing private leaks through it."""

import collections.abc
import datetime as dt
import importlib
import inspect
import pickle
import pkgutil
import re
import subprocess
import sys
import types
import typing
from collections.abc import Iterator

import pytest

import leaselock
import leaselock.stores
from leaselock import LockLostError, LockNotAcquiredError, StaleFencingTokenError

PUBLIC_MODULES = ["leaselock", "leaselock.stores", "leaselock.testing"]


def isort_style(name: str) -> tuple[int, str]:
    """Constants, then classes, then functions: the order ruff keeps __all__ in."""
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_all_is_sorted_and_every_name_in_it_exists(module_name: str):
    module = importlib.import_module(module_name)
    assert module.__all__ == sorted(module.__all__, key=isort_style)
    for name in module.__all__:
        assert hasattr(module, name), name


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_every_public_attribute_is_listed_in_all(module_name: str):
    module = importlib.import_module(module_name)
    public = {
        name
        for name in dir(module)
        if not name.startswith("_") and not inspect.ismodule(getattr(module, name))
    }
    public -= {"TYPE_CHECKING", "importlib"}
    assert public == set(module.__all__)


@pytest.mark.parametrize(
    ("module_name", "names"),
    [
        (
            "leaselock",
            (
                "Locks Lock LockLostError LockNotAcquiredError LockStoreError "
                "LocksConfigurationError LockError SyncLocks SyncLock current_lock"
            ),
        ),
        ("leaselock.stores", "InMemoryLockStore LockStore Acquired NotAcquired"),
        (
            "leaselock.integrations.sqlalchemy",
            "fenced fenced_sync fenced_table unfenced unfenced_sync StaleFencingTokenError",
        ),
        ("leaselock.testing", "ManualClock lock_store_contract ContractCase"),
    ],
)
def test_the_design_names_are_public_where_the_design_says(module_name: str, names: str):
    module = importlib.import_module(module_name)
    for name in names.split():
        assert name in module.__all__, name


def test_every_error_is_a_lock_error():
    for name in leaselock.__all__:
        value = getattr(leaselock, name)
        if inspect.isclass(value) and issubclass(value, Exception):
            assert issubclass(value, leaselock.LockError), name


def test_public_classes_and_functions_have_docstrings():
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            value = getattr(module, name)
            if inspect.isclass(value) or inspect.isfunction(value):
                assert inspect.getdoc(value), f"{module_name}.{name}"


def test_importing_leaselock_loads_no_database_driver_and_no_telemetry():
    program = (
        "import sys, leaselock, leaselock.stores, leaselock.testing;"
        "loaded = {'asyncpg', 'redis', 'sqlalchemy', 'psycopg', 'opentelemetry'}"
        " & set(sys.modules);"
        "sys.exit(', '.join(sorted(loaded)) or None)"
    )
    finished = subprocess.run(  # noqa: S603 -- our own interpreter, our own one-liner
        [sys.executable, "-c", program], capture_output=True, text=True, check=False
    )
    assert finished.returncode == 0, finished.stderr


def test_errors_survive_pickling_across_processes():
    lost = pickle.loads(pickle.dumps(LockLostError("k", 7, "deadline")))  # noqa: S301 -- our own bytes
    assert (lost.key, lost.fencing_token, lost.detected_by) == ("k", 7, "deadline")
    missed = pickle.loads(pickle.dumps(LockNotAcquiredError("k", 2000)))  # noqa: S301
    assert (missed.key, missed.waited_ms) == ("k", 2000)
    stale = pickle.loads(pickle.dumps(StaleFencingTokenError("k", 3, 4)))  # noqa: S301
    assert (stale.key, stale.fencing_token, stale.newer_token, stale.detected_by) == (
        "k",
        3,
        4,
        "fencing",
    )
    assert str(stale) == str(StaleFencingTokenError("k", 3, 4))


def public_modules() -> list[str]:
    """Every public module: the three of the design, sync, testing's and integrations' own."""
    import leaselock.integrations  # noqa: PLC0415 -- walked, not used

    integrations = [
        f"leaselock.integrations.{info.name}"
        for info in pkgutil.iter_modules(leaselock.integrations.__path__)
        if not info.name.startswith("_")
    ]
    testing = ["leaselock.testing.check", "leaselock.testing.history", "leaselock.testing.pytest"]
    return [*PUBLIC_MODULES, "leaselock.sync", *testing, *integrations]


def exported(module_name: str) -> set[object]:
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", [n for n in dir(module) if not n.startswith("_")])
    return {getattr(module, name) for name in names}


def signature_hints(function: object, module: types.ModuleType) -> dict[str, object]:
    """The resolved annotations of ``function``; the optional drivers named by TYPE_CHECKING
    imports are resolved from the installed packages."""
    import asyncmy  # noqa: PLC0415 -- optional drivers, installed for the tests
    import asyncpg  # noqa: PLC0415
    import redis  # noqa: PLC0415
    import sqlalchemy  # noqa: PLC0415
    from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession  # noqa: PLC0415
    from sqlalchemy.orm import QueryableAttribute, Session  # noqa: PLC0415

    drivers = {"asyncmy": asyncmy, "asyncpg": asyncpg, "redis": redis, "sqlalchemy": sqlalchemy}
    drivers |= {name: getattr(sqlalchemy, name) for name in ("Table", "MetaData", "Update")}
    drivers |= {"ColumnElement": sqlalchemy.ColumnElement, "QueryableAttribute": QueryableAttribute}
    drivers |= {"AsyncEngine": AsyncEngine, "AsyncSession": AsyncSession, "Session": Session}
    # names a module imports only for type checking: the standard ones, the drivers, and the
    # classes of leaselock's own modules
    standard = {**vars(typing), **vars(collections.abc), **vars(dt), **vars(types)}
    own = {
        name: value
        for loaded, contents in list(sys.modules.items())
        if loaded.startswith("leaselock")
        for name, value in vars(contents).items()
        if inspect.isclass(value)
    }
    namespace = {
        **standard,
        **own,
        **drivers,
        **vars(module),
        **getattr(function, "__globals__", {}),
    }
    hints: dict[str, object] = {}
    for name, annotation in inspect.get_annotations(function).items():  # type: ignore[arg-type]
        try:
            hints[name] = eval(annotation, namespace) if isinstance(annotation, str) else annotation  # noqa: S307 -- our own annotations
        except TypeError:
            # a driver's class subscripted as only its stubs allow (asyncpg.Pool[Record]):
            # what leaselock names in it is found by name
            hints[name] = [namespace.get(word) for word in re.findall(r"\w+", annotation)]
    return hints


def classes_in(annotation: object) -> Iterator[type]:
    if isinstance(annotation, list):
        for named in annotation:
            yield from classes_in(named)
        return
    if isinstance(annotation, type):
        yield annotation
    origin = typing.get_origin(annotation)
    if isinstance(origin, type):
        yield origin
    for argument in typing.get_args(annotation):
        yield from classes_in(argument)


def callables_of(value: object) -> Iterator[tuple[str, object]]:
    """A public function, or a public class's constructor, methods and properties."""
    if not inspect.isclass(value):
        if inspect.isfunction(value):
            yield value.__name__, value
        return
    for name, attribute in vars(value).items():
        if name.startswith("_") and name != "__init__":
            continue
        member = attribute.fget if isinstance(attribute, property) else attribute
        if isinstance(member, staticmethod | classmethod):
            member = member.__func__
        elif not inspect.isfunction(member) and hasattr(member, "__get__"):
            # a descriptor that reads as a function on its class (SyncLocks' operator methods)
            member = getattr(value, name)
        # a constructor users never call (its docstring says "internal") takes internal types
        if name == "__init__" and "(internal" in (inspect.getdoc(member) or ""):
            continue
        if inspect.isfunction(member):
            yield f"{value.__qualname__}.{name}", member


@pytest.mark.parametrize("module_name", public_modules())
def test_every_type_a_public_signature_names_is_importable_from_the_public_surface(
    module_name: str,
):
    surface = set().union(*(exported(name) for name in public_modules()))
    # what leaselock's own names take and return comes from leaselock, or is a store
    home = exported(module_name) | (
        {leaselock.stores.LockStore} if module_name == "leaselock" else surface
    )
    module = importlib.import_module(module_name)
    unreachable = set()
    for value in exported(module_name):
        for where, function in callables_of(value):
            for annotation in signature_hints(function, module).values():
                for named in classes_in(annotation):
                    if named.__module__.startswith("leaselock") and named not in home:
                        unreachable.add(f"{where} names {named.__module__}.{named.__qualname__}")
    assert sorted(unreachable) == []
