"""The house has floors: every import of the package points down (or within its own room).

Read from the source, type-only imports included (an import under ``if TYPE_CHECKING:`` is still a
dependency a reader has to follow). The floors, from the ground up:

- ground: errors, durations, keys, clock, events, redaction, threads, forks, cancellation;
- stores: the store protocol (with its optional capabilities) and the stores (import only the
  ground floor); a package per store over ``stores/_common``, none importing another but the
  cluster store the Redis one;
- engine (``_engine/``): the ground floor and the store protocol, nothing else;
- jobs (``_jobs/``): the engine, the ground floor and the store protocol;
- facade: ``Locks`` and what it is made of (``_locks``, ``_hold``, ``_fencing``);
- timeline (``_timeline/``): the lease model and its drawing, on the ground floor alone, so that
  two rooms of the top floor share it without importing each other: the ``timeline`` command
  (``_cli``) and the dashboard (``integrations``);
- top: ``sync``, ``integrations``, ``testing`` (each on its own: none imports another), and the
  package's ``__init__``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parent.parent / "src" / "leaselock"

GROUND = frozenset(
    f"leaselock.{name}"
    for name in (
        "_errors",
        "_durations",
        "_keys",
        "_clock",
        "_events",
        "_event_types",
        "_redact",
        "_threads",
        "_forks",
        "_telemetry",
        "_event_log",
        "_cancellation",
    )
)
# the store contract: the three methods, and the optional capabilities' shapes and records
PROTOCOL = frozenset(
    {
        "leaselock.stores._common._protocol",
        "leaselock.stores._common._capabilities",
        "leaselock.stores._common._job_control",
        "leaselock.stores._common._store_clock",
    }
)
# what one store package may import of another: the cluster store is built on the Redis one
STORE_NEIGHBOURS: Mapping[str, frozenset[str]] = {"redis_cluster": frozenset({"redis"})}
FACADE = frozenset({"leaselock._locks", "leaselock._hold", "leaselock._fencing"})


def room(module: str) -> str:
    """Name the room a module belongs to."""
    if module in GROUND:
        return "ground"
    if module in FACADE:
        return "facade"
    if module == "leaselock":
        return "package"
    parts = module.split(".")
    return {
        "stores": "stores",
        "_engine": "engine",
        "_jobs": "jobs",
        "sync": "sync",
        "integrations": "integrations",
        "testing": "testing",
        "_cli": "cli",
        "__main__": "cli",
        "_timeline": "timeline",
    }[parts[1]]


BELOW_JOBS = frozenset({"ground", "protocol", "engine", "jobs"})
MAY_IMPORT: Mapping[str, frozenset[str]] = {
    "ground": frozenset({"ground"}),
    "stores": frozenset({"ground", "protocol", "stores"}),
    "engine": frozenset({"ground", "protocol", "engine"}),
    "jobs": BELOW_JOBS,
    "facade": BELOW_JOBS | {"stores", "facade"},
    "timeline": frozenset({"ground", "timeline"}),
    "sync": BELOW_JOBS | {"stores", "facade", "sync"},
    "integrations": BELOW_JOBS | {"stores", "facade", "integrations", "timeline"},
    "testing": BELOW_JOBS | {"stores", "facade", "testing"},
    "package": BELOW_JOBS | {"stores", "facade", "sync", "testing", "integrations", "timeline"},
    "cli": BELOW_JOBS | {"stores", "facade", "sync", "testing", "integrations", "cli", "timeline"},
}


def kind_of(target: str) -> str:
    """The room of an imported module, with the store protocol apart from the stores."""
    return "protocol" if target in PROTOCOL else room(target)


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(module: str, source: str, *, is_package: bool) -> Iterator[str]:
    """Yield every leaselock module ``source`` imports, type-only ones included."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name.startswith("leaselock"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts)
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            if not target.startswith("leaselock"):
                continue
            if node.module is None:
                # "from . import x": x is a module of that package
                yield from (f"{target}.{alias.name}" for alias in node.names)
            else:
                yield target


def package_sources(root: Path = PACKAGE) -> dict[str, tuple[str, bool]]:
    """Every module of the package: name -> (source, is a package)."""
    return {
        module_name(path, root): (path.read_text(), path.name == "__init__.py")
        for path in sorted(root.rglob("*.py"))
    }


def resolve(target: str, known: Mapping[str, object]) -> str:
    """The module an import names: itself, or the package holding the name it imports."""
    while target not in known and "." in target:
        target = target.rpartition(".")[0]
    return target


def graph(sources: Mapping[str, tuple[str, bool]]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for module, (source, is_package) in sources.items():
        targets = {resolve(t, sources) for t in imports_of(module, source, is_package=is_package)}
        edges[module] = targets - {module}
    return edges


def layer_violations(sources: Mapping[str, tuple[str, bool]]) -> list[str]:
    return [
        f"{module} ({room(module)}) imports {target} ({kind_of(target)})"
        for module, targets in graph(sources).items()
        for target in sorted(targets)
        if kind_of(target) not in MAY_IMPORT[room(module)]
    ]


def store_of(module: str) -> str | None:
    """The store package a module belongs to (``None``: not a store's, or ``_common``)."""
    parts = module.split(".")
    if len(parts) < 3 or parts[:2] != ["leaselock", "stores"] or parts[2].startswith("_"):
        return None
    return parts[2]


def store_violations(sources: Mapping[str, tuple[str, bool]]) -> list[str]:
    """A store package importing another store's, but where one is built on the other."""
    found = []
    for module, targets in graph(sources).items():
        store = store_of(module)
        for target in sorted(targets):
            other = store_of(target)
            allowed = {store, *STORE_NEIGHBOURS.get(store or "", frozenset())}
            if store is not None and other is not None and other not in allowed:
                found.append(f"{module} (store {store}) imports {target} (store {other})")
    return found


def cycles(sources: Mapping[str, tuple[str, bool]]) -> list[list[str]]:
    edges = graph(sources)
    found: list[list[str]] = []
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in sorted(edges.get(module, ())):
            if state.get(target) == "open":
                found.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target, [*path, target])
        state[module] = "done"

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    return found


def test_every_import_points_down_or_within_its_room():
    assert layer_violations(package_sources()) == []


def test_no_store_package_imports_another_but_the_cluster_the_redis_one():
    assert store_violations(package_sources()) == []


def test_a_planted_import_of_another_stores_package_is_caught():
    sources = package_sources()
    source, is_package = sources["leaselock.stores.sqlite._store"]
    planted = "from ..postgres._sql import statements\n"
    sources["leaselock.stores.sqlite._store"] = (source + planted, is_package)
    expected = (
        "leaselock.stores.sqlite._store (store sqlite) imports leaselock.stores.postgres._sql "
        "(store postgres)"
    )
    assert store_violations(sources) == [expected]


def test_there_is_no_import_cycle_type_only_imports_included():
    assert cycles(package_sources()) == []


@pytest.mark.parametrize(
    ("module", "planted", "expected"),
    [
        ("leaselock._engine._lock", "from .._locks import Locks", "imports leaselock._locks"),
        ("leaselock._jobs._runs", "from .._locks import Locks", "(facade)"),
        ("leaselock._engine._lease", "from .._jobs import JobRuntime", "(jobs)"),
        ("leaselock.stores.memory._store", "from ..._engine import Lock", "(engine)"),
        ("leaselock._engine._signal", "from ..stores.memory import X", "(stores)"),
        ("leaselock.testing._faulty", "from ..sync import SyncLocks", "(sync)"),
        ("leaselock._clock", "from ._engine import Lock", "(engine)"),
        ("leaselock._timeline._leases", "from .._cli import main", "(cli)"),
        ("leaselock._timeline._svg", "from .._locks import Locks", "(facade)"),
    ],
)
def test_a_planted_upward_or_sideways_import_is_caught(module: str, planted: str, expected: str):
    sources = package_sources()
    source, is_package = sources[module]
    type_only = f"from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    {planted}\n"
    sources[module] = (source + "\n" + type_only, is_package)
    found = layer_violations(sources)
    assert len(found) == 1
    assert expected in found[0]
    assert found[0].startswith(module)


def test_a_planted_cycle_is_caught():
    sources = package_sources()
    source, is_package = sources["leaselock._keys"]
    sources["leaselock._keys"] = (source + "\nfrom ._durations import parse_ttl\n", is_package)
    source, is_package = sources["leaselock._durations"]
    sources["leaselock._durations"] = (source + "\nfrom ._keys import validate_key\n", is_package)
    assert ["leaselock._durations", "leaselock._keys", "leaselock._durations"] in cycles(sources)
