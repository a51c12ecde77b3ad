"""Several instances of the shop in one process, on one database, as the tests run them.

A :class:`Backend` is where the instances meet (database and lock store) and how time passes
there; a :class:`Cluster` starts instances on it, with one accounting system and one warehouse
shared among them, and fires their scheduled ticks through APScheduler's own jobs.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal, TypeVar

import asyncpg
import httpx
import redis.asyncio
from apscheduler.events import (  # type: ignore[import-untyped]
    EVENT_JOB_ERROR,
    EVENT_JOB_EXECUTED,
    JobExecutionEvent,
)
from fastapi import FastAPI
from pydantic import SecretStr
from sqlalchemy import insert, select
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from helpers import wait_for_real
from leaselock import Locks
from leaselock.integrations.sqlalchemy import unfenced
from leaselock.testing import ManualClock
from shop.app import create_app
from shop.clients import AccountingClient, WarehouseClient
from shop.database import create_engine, migrate
from shop.models import Order, Product
from shop.seed import order_row, seed
from shop.settings import Settings
from shop.state import Shop, shop_of

BackendName = Literal["sqlite", "postgres", "redis"]

ADMIN_TOKEN: Final = "test-admin-token-0123456789"
# 04:00 on 1 January: every tick of a test comes from Cluster.fire, never from the calendar
NEVER_DURING_A_TEST: Final = "0 4 1 1 *"
# on SQLite the store's clock is a ManualClock: a long ttl costs nothing. Servers keep their
# own time, so there it is short, and waited for for real; but not so short that a loaded
# machine (CI beside other jobs) stalls a renewal past it: 600 ms lost leases there
MANUAL_TTL_MS: Final = 30_000
SERVER_TTL_MS: Final = 2_000
# past the ttl by this much, the lease has surely expired at the store
SERVER_TTL_MARGIN_MS: Final = 500
MANUAL_TTL_MARGIN_MS: Final = 1_000
# a safety net for a tick that never reports, not a wait anything depends on
TICK_TIMEOUT_S: Final = 20.0
# the real time work in threads gets between two steps of a manual clock
REAL_STEP_S: Final = 0.02

T = TypeVar("T")


@dataclass
class Backend:
    """Where the instances meet, and how time passes on the store's clock.

    On SQLite the lock store reads a :class:`ManualClock` that every running instance shares
    (the "database's clock"): ``await backend.pass_time(...)`` moves it, renewals and retries
    included. On PostgreSQL and Redis the store measures expiry on the server: running
    instances use the system clock, and time passes for real.
    """

    name: BackendName
    database_url: str
    redis_url: str | None = None
    redis_prefix: str = "shop:"
    clock: ManualClock | None = None
    ttl_ms: int = SERVER_TTL_MS

    def settings(self, instance_name: str, **overrides: Any) -> Settings:
        """Return the settings of one instance on this backend."""
        values: dict[str, Any] = {
            "database_url": self.database_url,
            "redis_url": self.redis_url,
            "redis_lock_prefix": self.redis_prefix,
            "admin_token": SecretStr(ADMIN_TOKEN),
            "lock_ttl": f"{self.ttl_ms}ms",
            "invoice_export_cron": NEVER_DURING_A_TEST,
            "stock_reconciliation_cron": NEVER_DURING_A_TEST,
            "schedule_timezone": "Europe/Warsaw",
            "instance_name": instance_name,
            "leaselock_jobs": True,
            "fenced_stock_writes": True,
        }
        return Settings(**(values | overrides))

    async def pass_time(self, ms: int) -> None:
        """Let ``ms`` pass on the store's clock (and every running instance's)."""
        if self.clock is not None:
            await self.clock.advance(timedelta(milliseconds=ms))
        else:
            await wait_for_real(ms)

    async def pass_ttl(self) -> None:
        """Let the ttl pass on the store's clock, and a little more: unrenewed leases expire."""
        margin = MANUAL_TTL_MARGIN_MS if self.clock is not None else SERVER_TTL_MARGIN_MS
        await self.pass_time(self.ttl_ms + margin)

    async def pass_time_until(
        self, condition: Callable[[], bool], *, step_ms: int, limit_ms: int
    ) -> None:
        """Let time pass ``step_ms`` at a time until ``condition()`` holds.

        Raises:
            AssertionError: it still does not hold after ``limit_ms``.
        """
        passed = 0
        while not condition():
            if passed >= limit_ms:
                raise AssertionError(f"still not true after {limit_ms} ms on {self.name}")
            await self.pass_time(step_ms)
            passed += step_ms

    async def pass_time_until_done(self, work: Awaitable[T], *, step_ms: int, limit_ms: int) -> T:
        """Let time pass ``step_ms`` at a time until ``work`` is done; return its result.

        Between steps, ``work`` gets up to :data:`REAL_STEP_S` of real time: what it does in
        threads (the SQLite store, aiosqlite) moves on real time, which a manual clock does not
        move. It returns as soon as ``work`` is done, and waits no longer than that otherwise.

        Raises:
            AssertionError: ``work`` is still not done after ``limit_ms``.
        """
        future = asyncio.ensure_future(work)
        passed = 0
        while True:
            done, _ = await asyncio.wait({future}, timeout=REAL_STEP_S)
            if done:
                return future.result()
            if passed >= limit_ms:
                future.cancel()
                raise AssertionError(f"not done after {limit_ms} ms on {self.name}")
            await self.pass_time(step_ms)
            passed += step_ms


@contextlib.asynccontextmanager
async def fresh_database(name: BackendName, *, sqlite_path: str, postgres_url: str | None,
                         redis_url: str | None) -> AsyncIterator[Backend]:  # fmt: skip
    """Yield a backend on a new, migrated and seeded database; remove what it made after."""
    async with contextlib.AsyncExitStack() as cleanup:
        if name == "postgres":
            assert postgres_url is not None
            database_url = await cleanup.enter_async_context(postgres_database(postgres_url))
            backend = Backend(name, database_url)
        elif name == "redis":
            assert redis_url is not None
            prefix = await cleanup.enter_async_context(redis_prefix(redis_url))
            backend = Backend(name, f"sqlite:///{sqlite_path}", redis_url, prefix)
        else:
            backend = Backend(
                name, f"sqlite:///{sqlite_path}", clock=ManualClock(), ttl_ms=MANUAL_TTL_MS
            )
        engine = create_engine(backend.database_url)
        try:
            await migrate(engine)
            await seed(engine)
        finally:
            await engine.dispose()
        yield backend


@contextlib.asynccontextmanager
async def postgres_database(server_url: str) -> AsyncIterator[str]:
    """Yield the URL of a new database on the server of ``server_url``; drop it after."""
    database = f"shop_{uuid.uuid4().hex[:12]}"
    server = await asyncpg.connect(server_url)
    try:
        await server.execute(f'CREATE DATABASE "{database}"')
        try:
            yield make_url(server_url).set(database=database).render_as_string(hide_password=False)
        finally:
            # FORCE: a connection a failed test left open must not keep the database alive
            await server.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    finally:
        await server.close()


@contextlib.asynccontextmanager
async def redis_prefix(url: str) -> AsyncIterator[str]:
    """Yield a key prefix of this test's own; delete its keys after."""
    prefix = f"shop-test-{uuid.uuid4().hex[:12]}:"
    try:
        yield prefix
    finally:
        client = redis.asyncio.Redis.from_url(url)
        try:
            keys = [key async for key in client.scan_iter(match=f"{prefix}*")]
            if keys:
                await client.delete(*keys)
        finally:
            await client.aclose()


@dataclass(eq=False)
class Instance:
    """One running instance of the shop."""

    name: str
    app: FastAPI
    client: httpx.AsyncClient
    clock: ManualClock | None
    ticks: asyncio.Queue[JobExecutionEvent] = field(default_factory=asyncio.Queue)
    stack: AsyncExitStack = field(default_factory=AsyncExitStack)

    @property
    def shop(self) -> Shop:
        """The parts of this instance."""
        return shop_of(self.app)

    @property
    def locks(self) -> Locks:
        """This instance's ``Locks``."""
        return self.shop.locks

    async def post_export(self, *, token: str | None = ADMIN_TOKEN) -> httpx.Response:
        """Ask this instance to export the invoices now (``POST /admin/invoice-exports``)."""
        headers = {} if token is None else {"x-admin-token": token}
        return await self.client.post("/admin/invoice-exports", headers=headers)

    def run_directly(self, job_id: str) -> asyncio.Task[Any]:
        """Run what the scheduler's job ``job_id`` runs, in a task the test holds.

        For a run a test holds open: APScheduler counts the runs it started itself and would
        refuse the next tick on this instance (max_instances=1) before leaselock sees it.
        """
        job = self.shop.scheduler.get_job(job_id)
        return asyncio.create_task(job.func(*job.args, **job.kwargs))

    async def stop(self) -> None:
        """Shut this instance down, as a SIGTERM would (ASGI lifespan shutdown)."""
        await self.stack.aclose()


class Cluster:
    """Instances of the shop on one backend, sharing one accounting system and one warehouse."""

    def __init__(self, backend: Backend) -> None:
        """Prepare to start instances on ``backend``."""
        self.backend = backend
        self.accounting = AccountingClient()
        self.warehouse = WarehouseClient()
        self.instances: list[Instance] = []
        self._engine: AsyncEngine = create_engine(backend.database_url)

    async def start(self, *, paused: bool = False, **settings: Any) -> Instance:
        """Start one more instance; ``paused``: on a clock of its own that never moves.

        A paused instance renews nothing and notices nothing until the test advances its
        ``clock``: a process frozen by a long GC pause, or cut off from the store.
        """
        name = f"instance-{len(self.instances)}"
        clock = ManualClock() if paused else self.backend.clock
        app = create_app(
            self.backend.settings(name, **settings),
            clock=clock,
            store_clock=self.backend.clock,
            accounting=self.accounting,
            warehouse=self.warehouse,
        )
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://shop")
        instance = Instance(name, app, client, clock)
        await instance.stack.enter_async_context(app.router.lifespan_context(app))
        await instance.stack.enter_async_context(client)
        instance.shop.scheduler.add_listener(
            instance.ticks.put_nowait, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR
        )
        self.instances.append(instance)
        return instance

    async def start_many(self, count: int, **settings: Any) -> list[Instance]:
        """Start ``count`` instances, one after the other."""
        return [await self.start(**settings) for _ in range(count)]

    async def fire(self, job_id: str, *instances: Instance) -> list[Any]:
        """Fire one tick of ``job_id`` on each instance's scheduler; return what each returned.

        The tick goes through APScheduler's own job (its trigger, executor and events), as
        cron would fire it: the job's next run time is set to now.

        Raises:
            AssertionError: a tick raised; the error is chained.
        """
        for instance in instances:
            instance.shop.scheduler.get_job(job_id).modify(next_run_time=datetime.now(UTC))
        results = []
        for instance in instances:
            event = await asyncio.wait_for(instance.ticks.get(), TICK_TIMEOUT_S)
            assert event.job_id == job_id, f"{instance.name} ran {event.job_id}, not {job_id}"
            if event.exception is not None:
                raise AssertionError(f"{job_id} failed on {instance.name}") from event.exception
            results.append(event.retval)
        return results

    async def products(self) -> dict[str, tuple[int, int]]:
        """Return each product's (in_stock, stock_fencing_token) as the database has it."""
        async with self._engine.connect() as connection:
            rows = await connection.execute(
                select(Product.id, Product.in_stock, Product.stock_fencing_token)
            )
            return {row.id: (row.in_stock, row.stock_fencing_token) for row in rows}

    async def invoice_batches(self) -> dict[str, str | None]:
        """Return each order's invoice batch (``None``: not invoiced)."""
        async with self._engine.connect() as connection:
            rows = await connection.execute(select(Order.id, Order.invoice_batch))
            return {row.id: row.invoice_batch for row in rows}

    async def place_order(self, order_id: str) -> None:
        """Add a placed order of one bag of salmon kibble (as a customer would: no job's lock)."""
        async with AsyncSession(self._engine) as session, unfenced(session):
            await session.execute(
                insert(Order),
                [
                    order_row(
                        order_id,
                        "usr_ewa",
                        [("salmon-kibble-2kg", 1)],
                        placed_at=datetime.now(UTC),
                    )
                ],
            )
            await session.commit()

    async def aclose(self) -> None:
        """Stop every instance still running, newest first; close the cluster's own engine."""
        # a test that failed half-way may leave a run held open: shutdown would wait for it
        self.accounting.resume_held_uploads()
        self.warehouse.resume_held_counts()
        for instance in reversed(self.instances):
            await instance.stop()
        await self._engine.dispose()
