"""Run the docs' python blocks for real: programs as they stand, fragments in an application.

``test_docs.py`` runs every block that ``doc_blocks.py`` finds with these:

- a **program** runs in a subprocess as ``__main__``, as a reader runs it, under its page's path
  and lines: a traceback quotes the page's line.
- a **fragment** is compiled from the page's imports above it and its own code, numbered by the
  page's lines, under the page's path (a traceback quotes ``docs/stores/redis.md``, line 25),
  and run where its free names are real (:class:`Application`): a started ``Locks`` on an
  in-memory store and a ``ManualClock``, recording fakes of the reader's own functions, and the
  test servers, which stand in for the placeholder servers it names (``doc_servers.py``).
- a fragment that imports pytest is a test module: pytest runs it, in a subprocess.

What a fragment leaves behind is used once more: a store it made without taking a lock on it
takes one (it reached the server), and the pools, engines and clients the block opened are closed
(the stores never close what they were given).
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import inspect
import logging
import os
import subprocess
import sys
import types
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock
from urllib.parse import urlsplit

import asyncmy
import asyncpg
import redis.asyncio
from sqlalchemy.ext.asyncio import AsyncEngine

from doc_blocks import ROOT, DocBlock
from doc_servers import CLIENT_SERVER, PAGE_SERVERS, RealServers
from leaselock import Locks, LockSignal, SyncLocks
from leaselock.stores import InMemoryLockStore, LockStore, store_from_url
from leaselock.testing import ManualClock
from leaselock.testing.pytest import LockStoreContractTests

__all__ = [
    "CONTRACT_CASES",
    "NAMES",
    "Application",
    "FragmentRun",
    "call_gunicorn_hooks",
    "run_contract_classes",
    "run_fragment",
    "run_program",
    "run_test_module",
]

PROGRAM_TIMEOUT_S = 60
# what a contract test class of the docs runs: racing callers (its `concurrent`), and an expiry
# (its `ttl`, on its `advance_time` if it has one); the whole suite runs in tests/stores
CONTRACT_CASES = ("one_winner_per_key", "takeover_after_expiry")
# what a module that the docs show as a pytest test module runs of itself
_TEST_MODULE_CASES = " or ".join(CONTRACT_CASES)
_ENDED = "__doc_block_ended__"
# runs the program on stdin as __main__ under the file name argv[1]: a traceback quotes its page
_AS_MAIN = (
    "import sys; "
    "code = compile(sys.stdin.read(), sys.argv[1], 'exec', dont_inherit=True); "
    "exec(code, {'__name__': '__main__'})"
)
_GUNICORN_EXAMPLE = ROOT / "examples" / "gunicorn"


def run_program(block: DocBlock, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a program block in a subprocess, as ``__main__``, under its page's path and lines."""
    return subprocess.run(  # noqa: S603 -- our own docs, run by our own interpreter
        [sys.executable, "-c", _AS_MAIN, str(ROOT / block.path)],
        input="\n" * (block.body.line - 1) + block.body.text,
        capture_output=True,
        text=True,
        timeout=PROGRAM_TIMEOUT_S,
        check=False,
        cwd=cwd,
    )


def run_test_module(block: DocBlock, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run a block that is a pytest module under pytest, in a subprocess, outside this suite.

    Only :data:`CONTRACT_CASES` of it run: the module is a contract suite's subclass, which
    tests/stores runs whole.
    """
    module = tmp_path / f"test_{block.module_name}.py"
    module.write_text("\n" * (block.body.line - 1) + block.body.text, encoding="utf-8")
    return subprocess.run(  # noqa: S603 -- our own docs, run by our own interpreter
        [
            sys.executable, "-m", "pytest", str(module),
            # no pytest-asyncio: the contract's cases run their own loops, as its docs promise
            "-q", "-p", "no:cacheprovider", "-p", "no:asyncio", "-W", "error",
            "--rootdir", str(tmp_path), "-k", _TEST_MODULE_CASES,
        ],
        capture_output=True,
        text=True,
        timeout=PROGRAM_TIMEOUT_S,
        check=False,
        cwd=tmp_path,
    )  # fmt: skip


class Warehouse:
    """The shop's warehouse: counts what it is asked for."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def count(self, item: str) -> int:
        """Answer a count of ``item``, and remember the question."""
        self.asked.append(item)
        return 12


@dataclass
class Application:
    """The reader's application that ``doc_context.pyi`` declares, real, and what a block did.

    Attributes:
        url: the page's server (a store URL), else a SQLite file of the test's.
        secret: that server's password ("" if it has none).
        exported: the fencing token of each ``export`` call.
        reconciled: how many times ``reconcile`` ran.
    """

    url: str
    secret: str
    clock: ManualClock = field(default_factory=ManualClock)
    warehouse: Warehouse = field(default_factory=Warehouse)
    exported: list[int] = field(default_factory=list)
    reconciled: int = 0

    async def export(self, *, fencing_token: int, signal: LockSignal | None = None) -> None:
        """Export under the lock: remember the token."""
        if signal is not None:
            signal.raise_if_aborted()
        self.exported.append(fencing_token)

    def reconcile(self) -> None:
        """A blocking job: count the run."""
        self.reconciled += 1

    def plain_names(self) -> dict[str, object]:
        """The names that need no event loop (the rest: :meth:`loop_names`)."""
        return {
            "url": self.url,
            "secret": self.secret,
            "clock": self.clock,
            "export": self.export,
            "reconcile": self.reconcile,
            "log": logging.getLogger("docs"),
            "warehouse": self.warehouse,
            # the reader's own store, made from a URL: here, the shipped store that URL names
            "MyLockStore": store_from_url,
        }

    async def loop_names(
        self,
        names: frozenset[str],
        servers: Mapping[str, str],
        stack: contextlib.AsyncExitStack,
        *,
        start_locks: bool,
    ) -> dict[str, object]:
        """The names that live on the running loop: ``locks`` and ``client``, if in ``names``."""
        bound: dict[str, object] = {}
        if "locks" in names:
            locks = Locks(store=InMemoryLockStore(clock=self.clock), clock=self.clock)
            if start_locks:
                await stack.enter_async_context(locks)
            bound["locks"] = locks
        if "client" in names:
            client = redis.asyncio.Redis.from_url(servers[CLIENT_SERVER])
            stack.push_async_callback(client.aclose)
            bound["client"] = client
        return bound


_LOOP_NAMES = frozenset({"locks", "client"})
# what a fragment may be given: exactly doc_context.pyi's names (test_docs checks)
NAMES = frozenset({*Application(url="", secret="").plain_names(), *_LOOP_NAMES})


@dataclass
class FragmentRun:
    """A fragment that ran, and what it left: its namespace, and a lock taken on its store."""

    block: DocBlock
    application: Application
    namespace: dict[str, object]
    # a block on a server that takes no lock itself makes a store: one is taken on it after
    takes_a_lock_on_its_store: bool = False
    token_on_its_store: int | None = None

    @property
    def ended(self) -> bool:
        """Whether the fragment ran to its last line."""
        return self.namespace.get(_ENDED) is True

    def unbound(self) -> list[str]:
        """The names the fragment binds outside functions that the run left unbound."""
        return sorted(_bound_outside_functions(self.block.tree()) - self.namespace.keys())


def run_fragment(block: DocBlock, servers: Mapping[str, str], tmp_path: Path) -> FragmentRun:
    """Run a fragment in an :class:`Application`, on ``servers`` (fixture name to URL).

    A fragment that awaits runs on an event loop of its own; one that does not runs in this
    thread, outside any loop (``SyncLocks`` refuses a thread that runs one), and so cannot be
    given ``locks`` or ``client``, which live on a loop.
    """
    page = PAGE_SERVERS.get(block.path, "")
    url = servers[page] if page in servers else f"sqlite:///{tmp_path / 'my-store.db'}"
    application = Application(url=url, secret=urlsplit(url).password or "")
    run = FragmentRun(block, application, {"__name__": block.module_name})
    run.takes_a_lock_on_its_store = bool(servers) and not _takes_locks(block.tree())
    code = _compile(block, servers, tmp_path)
    names = block.free_names()
    run.namespace.update({k: v for k, v in application.plain_names().items() if k in names})
    if code.co_flags & inspect.CO_COROUTINE:
        asyncio.run(_run_on_a_loop(run, code, names, servers))
    else:
        on_a_loop = sorted(names & _LOOP_NAMES)
        assert not on_a_loop, (
            f"{block.name} reads {on_a_loop}, which live on a loop it never awaits"
        )
        exec(code, run.namespace)  # noqa: S102 -- our own docs' code, which is the test
        asyncio.run(_afterwards(run))
    return run


async def _run_on_a_loop(
    run: FragmentRun, code: types.CodeType, names: frozenset[str], servers: Mapping[str, str]
) -> None:
    async with contextlib.AsyncExitStack() as stack:
        run.namespace.update(
            await run.application.loop_names(
                names, servers, stack, start_locks=not _starts_locks(run.block.tree())
            )
        )
        awaitable = eval(code, run.namespace)  # noqa: S307 -- as above
        await awaitable
        await _afterwards(run)


async def _afterwards(run: FragmentRun) -> None:
    """Take a lock on a server store the block made and left unused; close what it opened."""
    made = [
        run.namespace[name]
        for name in sorted(_bound_outside_functions(run.block.tree()))
        if name in run.namespace
    ]
    if run.takes_a_lock_on_its_store:
        for value in made:
            # a store (a store class passes the Protocol's check too)
            if isinstance(value, LockStore) and not isinstance(value, type):
                run.token_on_its_store = await _take_a_lock(value)
    for value in made:
        await _close(value)


async def _take_a_lock(store: LockStore) -> int:
    async with Locks(store=store) as locks, locks.hold(f"docs:{uuid.uuid4().hex}") as lock:
        return lock.fencing_token


async def _close(value: object) -> None:
    """Close a pool, engine or client: the stores never close what they were given."""
    if isinstance(value, asyncpg.Pool):
        await value.close()
    elif isinstance(value, AsyncEngine):
        await value.dispose()
    elif isinstance(value, redis.asyncio.Redis | redis.asyncio.RedisCluster):
        await value.aclose()
    elif isinstance(value, asyncmy.Pool):
        value.close()
        await value.wait_closed()


def run_contract_classes(namespace: Mapping[str, object]) -> list[str]:
    """Run :data:`CONTRACT_CASES` of each contract test class the block defined, as pytest would.

    Returns:
        ``<class>.<case>`` of each case that ran and passed (a failure raises).
    """
    ran: list[str] = []
    for value in namespace.values():
        if (
            isinstance(value, type)
            and issubclass(value, LockStoreContractTests)
            and value is not LockStoreContractTests
        ):
            for case in CONTRACT_CASES:
                value().test_contract(case)
                ran.append(f"{value.__name__}.{case}")
    return ran


def call_gunicorn_hooks(namespace: Mapping[str, object], tmp_path: Path) -> SyncLocks:
    """Call the gunicorn hooks a block defines, as a worker would, on the example's ``app``.

    Here is no gunicorn: ``post_fork`` runs in this process, not a forked worker, with
    ``examples/gunicorn/app.py`` as the ``app`` it imports (tests/integration/test_gunicorn.py
    runs that example under gunicorn). The hooks never read their arguments, so gunicorn's
    arbiter and worker are bare objects.

    Returns:
        the ``SyncLocks`` of ``app``, after ``worker_exit``.
    """
    post_fork, worker_exit = namespace["post_fork"], namespace["worker_exit"]
    assert callable(post_fork)
    assert callable(worker_exit)
    with (
        mock.patch.dict(os.environ, {"LEASELOCK_DB": str(tmp_path / "locks.db")}),
        mock.patch.object(sys, "path", [str(_GUNICORN_EXAMPLE), *sys.path]),
        _forgetting_module("app"),
    ):
        post_fork(object(), object())
        locks = sys.modules["app"].locks  # what the hook imported
        assert isinstance(locks, SyncLocks)
        try:
            locks.read_lock("docs:gunicorn")  # refused unless post_fork started it
        finally:
            worker_exit(object(), object())
        return locks


@contextlib.contextmanager
def _forgetting_module(name: str) -> Iterator[None]:
    """Import ``name`` afresh inside, and forget it after (another ``app`` may follow)."""
    before = sys.modules.pop(name, None)
    try:
        yield
    finally:
        sys.modules.pop(name, None)
        if before is not None:
            sys.modules[name] = before


def _compile(block: DocBlock, servers: Mapping[str, str], tmp_path: Path) -> types.CodeType:
    """The page's imports above the block and the block, numbered by the page, made runnable."""
    tree = block.tree()
    body = [*block.imports_tree().body, *tree.body]
    ended = ast.parse(f"{_ENDED} = True").body[0]
    ast.copy_location(ended, body[-1])
    module = ast.Module(body=[*body, ended], type_ignores=[])
    module = RealServers(servers, tmp_path, block.path).visit(module)
    ast.fix_missing_locations(module)
    # the page's absolute path: a traceback quotes the markdown's line, from any directory
    filename = str(ROOT / block.path)
    code: types.CodeType = compile(
        module, filename, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True
    )
    return code


def _starts_locks(tree: ast.AST) -> bool:
    """Whether the block starts ``locks`` itself (``async with locks``): it is given unstarted."""
    for node in ast.walk(tree):
        if isinstance(node, ast.With | ast.AsyncWith):
            for item in node.items:
                if isinstance(item.context_expr, ast.Name) and item.context_expr.id == "locks":
                    return True
    return False


def _takes_locks(tree: ast.AST) -> bool:
    """Whether the block takes a lock itself (``hold``, ``acquire``, ``with_lock``)."""
    return any(
        isinstance(node, ast.Attribute) and node.attr in {"hold", "acquire", "with_lock"}
        for node in ast.walk(tree)
    )


def _bound_outside_functions(tree: ast.Module) -> set[str]:
    """The names the block binds in its own scope (inside ``with`` and ``if`` too)."""
    bound: set[str] = set()
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
            continue
        if isinstance(
            node, ast.Lambda | ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp
        ):
            continue  # scopes of their own
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        pending.extend(ast.iter_child_nodes(node))
    return bound
