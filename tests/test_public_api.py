"""The public surface: complete, sorted, importable, and nothing private leaks through it."""

import importlib
import inspect
import pickle
import subprocess
import sys

import pytest

import leaselock
from leaselock import LockLostError, LockNotAcquiredError

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
