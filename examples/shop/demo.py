"""``make demo``: the example shop on three instances (three OS processes), narrated.

It migrates and seeds a fresh database, starts the shop on ports 3001-3003 (or ``DEMO_PORTS``)
with a stock reconciliation every two seconds and a lock ttl of six seconds, then tells what
happens, with the log lines that show it (and the URL of the operator's dashboard, live while it
runs): one instance runs the reconciliation and leads the warehouse feed; two admin exports sent
at once to two instances export the orders once; the owner killed with SIGKILL is replaced after
the ttl, and the tick it never ran is reported missed; the next owner's scheduler stops while
its process lives, and it lets go so the other takes over, the overdue alert raised and cleared;
an operator pauses the reconciliation for every instance, runs it once by hand and resumes it;
the owner after that, stopped with SIGTERM, hands over at once; the accounting system booked
each invoice exactly once. It ends with the jobs' run records and the locks table, stops every
process it started, and removes what it made.

``make demo`` uses a SQLite file in a temporary directory (orders and locks in one file).
``make demo DATABASE_URL=postgresql://... REDIS_URL=redis://...`` runs on real servers: a new
database ``shop_demo_<random>`` on that PostgreSQL server (dropped at the end), and the locks in
Redis under a prefix of this run's own (deleted at the end). Either variable may come alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import asyncpg
import httpx
import redis.asyncio
from sqlalchemy.engine import make_url

from shop.app import DASHBOARD_PATH
from shop.database import create_engine, migrate, sqlite_file
from shop.seed import PLACED_ORDER_IDS, seed
from shop.settings import Settings

SHOP_DIR: Final = Path(__file__).resolve().parent
# kept after the demo, which removes everything else it made
DEFAULT_PORTS: Final = "3001,3002,3003"
LOCK_TTL_S: Final = 6
RECONCILE_EVERY_S: Final = 2
# the reconciliation's dead-man's switch: a run succeeds every 2 s while all is well
EXPECT_RECONCILED_EVERY: Final = "4s"
# runs an owner sees before it can tell how long without a tick means its scheduler stopped
TICKS_TO_LEARN_THE_INTERVAL: Final = 3
ALERT_EVERY_S: Final = 2.5
# the nightly export must not fire by itself during the demo: 02:00 on 1 January
EXPORT_CRON: Final = "0 2 1 1 *"
# generous bounds for what should take seconds; a demo that overruns them says so and stops
START_TIMEOUT_S: Final = 30.0
EVENT_TIMEOUT_S: Final = 20.0
STOP_TIMEOUT_S: Final = 10.0

RECONCILIATION = "inventory:stock-reconciliation"
FEED = "inventory:warehouse-feed"
TAKES_RECONCILIATION: Final = re.compile(rf"^{RECONCILIATION} runs on this instance")
LEADS_FEED: Final = re.compile(rf'^Leading "{FEED}"')
RECONCILED: Final = re.compile(r"^Stock reconciled")
SKIPPED_ELSEWHERE: Final = re.compile(rf"^Skipped {RECONCILIATION}: it runs on another instance")
LOW_STOCK: Final = re.compile(r"^Low stock:")
HANDED_BACK_IDLE: Final = re.compile(rf'^Handed back "{RECONCILIATION}:owner".*owner_idle')
OVERDUE: Final = re.compile(rf"^{RECONCILIATION} is overdue")
RECOVERED: Final = re.compile(rf"^{RECONCILIATION} ran successfully again")
MISSED: Final = re.compile(rf"^{RECONCILIATION} missed its tick")
PAUSED: Final = re.compile(rf"^Paused {RECONCILIATION}")
SKIPPED_PAUSED: Final = re.compile(rf"^Skipped {RECONCILIATION}: it is paused")
RESUMED: Final = re.compile(rf"^Resumed {RECONCILIATION}")
LAST_WORDS: Final = re.compile(r"^(Stepped down|Disconnected|Application shutdown complete)")
READY: Final = re.compile(r"^Application startup complete")
# "2026-11-29 08:24:38,858 INFO    leaselock: Leading ..." -> the message
LOG_LINE: Final = re.compile(r"^\S+ \S+ \w+\s+[\w.]+: (.*)$")


class DemoError(Exception):
    """Something the demo expected did not happen; the message says what."""


def demo_ports(value: str | None = None) -> tuple[int, int, int]:
    """Return the three ports of ``DEMO_PORTS`` (default 3001,3002,3003), each free now.

    Raises:
        DemoError: not three distinct ports, or one is taken; the message names the fix.
    """
    # make exports the variable empty when it is not set
    text = (os.environ.get("DEMO_PORTS") or DEFAULT_PORTS) if value is None else value
    fix = "choose three free ones: make demo DEMO_PORTS=3101,3102,3103"
    try:
        ports = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise DemoError(f"DEMO_PORTS={text!r} is not three port numbers; {fix}") from None
    if len(ports) != 3 or len(set(ports)) != 3 or not all(1024 <= p <= 65535 for p in ports):  # noqa: PLR2004 -- three instances, unprivileged ports
        raise DemoError(f"DEMO_PORTS={text!r} is not three distinct ports from 1024 up; {fix}")
    for port in ports:
        with socket.socket() as probe:
            # as uvicorn binds: connections of a demo that just ended (TIME_WAIT) do not count
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                raise DemoError(f"port {port} is taken by another program; {fix}") from None
    return ports[0], ports[1], ports[2]


def say(text: str = "") -> None:
    """Tell the reader."""
    print(text, flush=True)  # noqa: T201 -- narrating is what the demo is for


@dataclass
class Line:
    """One log line of an instance, and when the demo read it."""

    at: float
    message: str


@dataclass(eq=False)
class Instance:
    """One shop process, and every line it logged."""

    port: int
    process: asyncio.subprocess.Process
    lines: list[Line] = field(default_factory=list)
    reader: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        """How the narration names it."""
        return str(self.port)

    @property
    def running(self) -> bool:
        """Whether the process has not exited."""
        return self.process.returncode is None

    def matching(self, pattern: re.Pattern[str], *, since: float = 0.0) -> list[Line]:
        """Return the lines since ``since`` whose message matches ``pattern``."""
        return [line for line in self.lines if line.at >= since and pattern.search(line.message)]


class Shops:
    """The shop's processes, their output, and a way to wait for a line among them."""

    def __init__(self, environment: dict[str, str], event_logs: Path) -> None:
        """Prepare to start instances with ``environment``; each logs events in ``event_logs``."""
        self.environment = environment
        self.event_logs = event_logs
        self.instances: list[Instance] = []
        self._new_line = asyncio.Condition()

    async def start(self, port: int) -> Instance:
        """Start one instance on ``port`` and wait until it serves."""
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "shop",
            "serve",
            "--port",
            str(port),
            cwd=SHOP_DIR,
            env=self.environment | self._own_variables(port),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            # its own process group: a Ctrl-C in the terminal reaches the demo, which stops it
            start_new_session=True,
        )
        instance = Instance(port, process)
        instance.reader = asyncio.create_task(self._read(instance))
        self.instances.append(instance)
        await self.wait_for(READY, [instance], since=0.0, within_s=START_TIMEOUT_S)
        return instance

    def _own_variables(self, port: int) -> dict[str, str]:
        return {
            "INSTANCE_NAME": f"shop-{port}",
            "EVENT_LOG": str(self.event_logs / f"shop-{port}.jsonl"),
        }

    async def _read(self, instance: Instance) -> None:
        stream = instance.process.stdout
        assert stream is not None  # noqa: S101 -- piped above
        while raw := await stream.readline():
            text = raw.decode(errors="replace").rstrip()
            parsed = LOG_LINE.match(text)
            instance.lines.append(Line(time.monotonic(), parsed.group(1) if parsed else text))
            async with self._new_line:
                self._new_line.notify_all()
        await instance.process.wait()
        async with self._new_line:
            self._new_line.notify_all()

    async def wait_for(
        self,
        pattern: re.Pattern[str],
        among: Iterable[Instance],
        *,
        since: float,
        within_s: float = EVENT_TIMEOUT_S,
    ) -> tuple[Instance, Line]:
        """Wait until one of ``among`` logs a line matching ``pattern`` after ``since``.

        Raises:
            DemoError: none did within ``within_s`` seconds, or one exited meanwhile.
        """
        candidates = list(among)

        def found() -> tuple[Instance, Line] | None:
            hits = [(i, line) for i in candidates for line in i.matching(pattern, since=since)]
            return min(hits, key=lambda hit: hit[1].at) if hits else None

        async def first() -> tuple[Instance, Line]:
            async with self._new_line:
                while (hit := found()) is None:
                    gone = [i for i in candidates if not i.running and i.reader and i.reader.done()]
                    if gone:
                        raise DemoError(
                            f"{gone[0].name} exited (code {gone[0].process.returncode}) "
                            f"before logging /{pattern.pattern}/:\n{tail(gone[0])}"
                        )
                    await self._new_line.wait()
                return hit

        try:
            return await asyncio.wait_for(first(), within_s)
        except TimeoutError:
            names = ", ".join(i.name for i in candidates)
            raise DemoError(f"no /{pattern.pattern}/ from {names} within {within_s:g} s") from None

    async def stop(self, instance: Instance, how: signal.Signals) -> int:
        """Send ``how`` to ``instance`` and wait for it to exit; return its exit code."""
        if instance.running:
            with contextlib.suppress(ProcessLookupError):
                instance.process.send_signal(how)
        try:
            code = await asyncio.wait_for(instance.process.wait(), STOP_TIMEOUT_S)
        except TimeoutError:
            instance.process.kill()
            code = await instance.process.wait()
        if instance.reader is not None:
            await instance.reader
        return code

    async def stop_all(self) -> None:
        """Stop every instance still running (SIGTERM, then SIGKILL if it lingers)."""
        await asyncio.gather(*(self.stop(i, signal.SIGTERM) for i in self.instances if i.running))


def tail(instance: Instance, count: int = 15) -> str:
    """Return the last lines an instance logged."""
    return "\n".join(f"      {line.message}" for line in instance.lines[-count:])


def evidence(instance: Instance, line: Line, *, since: float | None = None) -> None:
    """Show one log line as evidence, with the time since ``since`` if given."""
    when = "" if since is None else f"+{line.at - since:4.1f} s  "
    say(f"      {when}[{instance.name}] {line.message}")


# --------------------------------------------------------------------------- the database


@dataclass
class Stores:
    """Where this run keeps orders and locks, and how to show and remove them."""

    database_url: str
    redis_url: str | None
    redis_prefix: str
    scratch: Path
    created_database: tuple[str, str] | None = None  # (server URL, database name)

    def describe(self) -> list[str]:
        """Say where things are, without passwords."""
        path = sqlite_file(self.database_url)
        if path is not None:
            database = f"SQLite file {path}"
        else:
            shown = make_url(self.database_url).render_as_string(hide_password=True)
            database = f"PostgreSQL {shown} (a new database, dropped at the end)"
        if self.redis_url is not None:
            shown = make_url(self.redis_url).render_as_string(hide_password=True)
            locks = f"Redis {shown}, keys under {self.redis_prefix!r}"
        elif path is not None:
            locks = "the same SQLite file (table leaselock_locks)"
        else:
            locks = "the same PostgreSQL database (table leaselock_locks)"
        return [f"Orders and products: {database}", f"Locks: {locks}"]


@contextlib.asynccontextmanager
async def fresh_stores() -> AsyncIterator[Stores]:
    """Yield a new database (and Redis prefix) for this run; remove them afterwards."""
    suffix = secrets.token_hex(4)
    scratch = Path(tempfile.mkdtemp(prefix="shop-demo-"))
    server_url = os.environ.get("DATABASE_URL") or None
    redis_url = os.environ.get("REDIS_URL") or None
    stores = Stores(
        database_url=f"sqlite:///{scratch / 'shop.db'}",
        redis_url=redis_url,
        redis_prefix=f"shop-demo-{suffix}:",
        scratch=scratch,
    )
    try:
        if server_url is not None:
            name = f"shop_demo_{suffix}"
            connection = await asyncpg.connect(_asyncpg_url(server_url))
            try:
                await connection.execute(f'CREATE DATABASE "{name}"')
            finally:
                await connection.close()
            stores.created_database = (server_url, name)
            stores.database_url = (
                make_url(server_url).set(database=name).render_as_string(hide_password=False)
            )
        yield stores
    finally:
        await _remove(stores)


def _asyncpg_url(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


async def _remove(stores: Stores) -> None:
    if stores.created_database is not None:
        server_url, name = stores.created_database
        connection = await asyncpg.connect(_asyncpg_url(server_url))
        try:
            await connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await connection.close()
    if stores.redis_url is not None:
        client = redis.asyncio.Redis.from_url(stores.redis_url)
        try:
            keys = [key async for key in client.scan_iter(match=f"{stores.redis_prefix}*")]
            if keys:
                await client.delete(*keys)
        finally:
            await client.aclose()
    shutil.rmtree(stores.scratch, ignore_errors=True)


async def prepare_database(stores: Stores) -> None:
    """Migrate (Alembic) and seed the new database."""
    engine = create_engine(stores.database_url)
    try:
        await migrate(engine)
        await seed(engine)
    finally:
        await engine.dispose()


@dataclass
class LockRow:
    """One row of the locks table."""

    key: str
    owner: str | None
    token: int | None
    expires_in_ms: int | None


async def read_locks(stores: Stores) -> list[LockRow]:
    """Read the locks where the store keeps them (the store's documented schema)."""
    if stores.redis_url is not None:
        return await _redis_locks(stores.redis_url, stores.redis_prefix)
    path = sqlite_file(stores.database_url)
    if path is not None:
        return _sqlite_locks(path)
    connection = await asyncpg.connect(_asyncpg_url(stores.database_url))
    try:
        rows = await connection.fetch(
            "SELECT key, owner, fencing_token, "
            "(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint AS expires_in_ms "
            "FROM leaselock_locks ORDER BY key"
        )
    finally:
        await connection.close()
    return [LockRow(r["key"], r["owner"], r["fencing_token"], r["expires_in_ms"]) for r in rows]


def _sqlite_locks(path: Path) -> list[LockRow]:
    # the SQLite store measures expiry on the host's wall clock, in ms since the epoch
    now_ms = time.time_ns() // 1_000_000
    with contextlib.closing(sqlite3.connect(path)) as connection:
        rows = connection.execute(
            "SELECT key, owner, fencing_token, expires_at_ms FROM leaselock_locks ORDER BY key"
        ).fetchall()
    return [LockRow(key, owner, token, expires - now_ms) for key, owner, token, expires in rows]


async def _redis_locks(url: str, prefix: str) -> list[LockRow]:
    client = redis.asyncio.Redis.from_url(url, decode_responses=True)
    try:
        found = []
        lock_prefix = f"{prefix}lock:"
        async for name in client.scan_iter(match=f"{lock_prefix}*"):
            owner, expires_in_ms = await client.get(name), await client.pttl(name)
            # Redis keeps the owner with the key; the token went to the holder and is not stored
            found.append(LockRow(name.removeprefix(lock_prefix), _text(owner), None, expires_in_ms))
    finally:
        await client.aclose()
    return sorted(found, key=lambda row: row.key)


def _text(value: bytes | str | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


# --------------------------------------------------------------------------- the story


async def tell(stores: Stores, ports: tuple[int, int, int]) -> None:
    """Run the demo on ``stores``, its instances on ``ports``."""
    started = time.monotonic()
    say("leaselock demo: a cat food shop, three instances, one schedule")
    say("=" * 64)
    for line in stores.describe():
        say(line)
    # a directory of this run's own, kept: a fixed path would be overwritten by the next run
    kept = Path(tempfile.mkdtemp(prefix="leaselock-demo-"))
    say(f"Kept after the demo, in {kept}: the timeline, and the event logs it is drawn from")
    say()
    say("1. Bootstrap")
    await prepare_database(stores)
    say("   Migrated the database with Alembic and seeded it: 3 products, and 4 orders of which")
    say(f"   3 are placed and not invoiced yet ({', '.join(PLACED_ORDER_IDS)}).")
    story = Story(stores, ports)
    try:
        await story.start_three_instances()
        await story.one_instance_runs_each_tick()
        await story.two_admin_exports_at_once()
        await story.kill_the_owner()
        await story.pause_the_owners_scheduler()
        await story.pause_run_and_resume()
        await story.stop_the_next_owner()
        await story.count_the_bookings()
        await story.show_the_locks()
    finally:
        await story.shops.stop_all()
    await draw_the_timeline(stores.scratch, kept)
    say()
    say(f"Every process the demo started has stopped. Done in {time.monotonic() - started:.0f} s.")


class Story:
    """The demo's sections, in order; each leaves what the next needs on ``self``."""

    def __init__(self, stores: Stores, ports: tuple[int, int, int]) -> None:
        """Prepare three instances' environment on ``stores``, to listen on ``ports``."""
        self.stores = stores
        self.ports = ports
        self.admin_token = secrets.token_urlsafe(24)
        self.ledger = stores.scratch / "accounting-ledger.jsonl"
        # the shop's variables are the demo's to set: none leaks in from the caller's environment
        shop_variables = {name.upper() for name in Settings.model_fields}
        environment = {
            key: value for key, value in os.environ.items() if key not in shop_variables
        } | {
            "DATABASE_URL": stores.database_url,
            "ADMIN_TOKEN": self.admin_token,
            "LOCK_TTL": f"{LOCK_TTL_S}s",
            "STOCK_RECONCILIATION_CRON": f"*/{RECONCILE_EVERY_S} * * * * *",
            "STOCK_RECONCILIATION_EXPECT_EVERY": EXPECT_RECONCILED_EVERY,
            "INVOICE_EXPORT_CRON": EXPORT_CRON,
            "LOG_LEVEL": "DEBUG",
            "FAKE_ACCOUNTING_LEDGER": str(self.ledger),
            "FAKE_WAREHOUSE_ALERT_EVERY_S": str(ALERT_EVERY_S),
            "PYTHONUNBUFFERED": "1",
        }
        if stores.redis_url is not None:
            environment |= {"REDIS_URL": stores.redis_url, "REDIS_LOCK_PREFIX": stores.redis_prefix}
        self.shops = Shops(environment, stores.scratch)
        self.first: Instance
        self.others: list[Instance]
        self.owner: Instance
        self.owner_since: float
        self.leader: Instance
        self.last: Instance

    async def start_three_instances(self) -> None:
        """2. Start 3001 alone (it takes everything), then 3002 and 3003."""
        say()
        say("2. Three instances of the shop, each a separate OS process")
        say(f"   Same code, same database, same schedule: a stock reconciliation every "
            f"{RECONCILE_EVERY_S} s, lock ttl {LOCK_TTL_S} s.")  # fmt: skip
        since = time.monotonic()
        first = self.first = await self.shops.start(self.ports[0])
        say(f"   Started {first.name} (pid {first.process.pid}). Alone, it leads the warehouse")
        say("   feed and takes the reconciliation at its first tick:")
        for pattern in (LEADS_FEED, TAKES_RECONCILIATION):
            _, line = await self.shops.wait_for(pattern, [first], since=since)
            evidence(first, line)
        others = self.others = [await self.shops.start(port) for port in self.ports[1:]]
        say(f"   Started {others[0].name} and {others[1].name} (pids "
            f"{others[0].process.pid}, {others[1].process.pid}).")  # fmt: skip
        say("   The operator's dashboard, live while the demo runs (each instance serves it until "
            "it stops):")  # fmt: skip
        say(f"   {dashboard_url(first.port)} (or :{others[0].port}, :{others[1].port}); sign in "
            f"with the admin token {self.admin_token}")  # fmt: skip

    async def one_instance_runs_each_tick(self) -> None:
        """3. Two ticks: 3001 runs them, the others skip; only 3001 hears the warehouse."""
        say()
        say("3. One instance runs each tick; the others skip it")
        since = next_tick = time.monotonic()
        for _ in range(2):
            _, ran = await self.shops.wait_for(RECONCILED, [self.first], since=next_tick)
            next_tick = ran.at + RECONCILE_EVERY_S / 2
            for other in self.others:
                # the same tick fires on every instance within a few milliseconds
                await self.shops.wait_for(
                    SKIPPED_ELSEWHERE, [other], since=ran.at - RECONCILE_EVERY_S / 2
                )
        say(f"   In the last {time.monotonic() - since:.0f} s:")
        for instance in self.shops.instances:
            runs = len(instance.matching(RECONCILED, since=since))
            skips = len(instance.matching(SKIPPED_ELSEWHERE, since=since))
            say(f"   {instance.name} ran the reconciliation {runs} times and skipped {skips} ticks")
        for instance, pattern in ((self.first, RECONCILED), (self.others[0], SKIPPED_ELSEWHERE)):
            evidence(instance, instance.matching(pattern, since=since)[-1])
        _, alert = await self.shops.wait_for(LOW_STOCK, [self.first], since=0.0)
        say("   Only the leader is connected to the warehouse's low-stock alerts:")
        evidence(self.first, alert)

    async def two_admin_exports_at_once(self) -> None:
        """4. A request without the token, then two at once to 3002 and 3003."""
        say()
        say("4. Two admins export the invoices at the same moment, on two instances")
        async with httpx.AsyncClient(timeout=10) as http:
            url = f"http://127.0.0.1:{self.others[0].port}/admin/invoice-exports"
            refused = await http.post(url)
            say(f"   Without the admin token: {refused.status_code} {refused.json()['detail']}")
            begun = time.monotonic()

            async def export(instance: Instance) -> tuple[Instance, httpx.Response, float]:
                response = await http.post(
                    f"http://127.0.0.1:{instance.port}/admin/invoice-exports",
                    headers={"x-admin-token": self.admin_token},
                )
                return instance, response, time.monotonic() - begun

            answers = await asyncio.gather(*(export(instance) for instance in self.others))
        for instance, response, took in answers:
            say(f"   POST :{instance.port}/admin/invoice-exports -> {response.status_code} "
                f"{json.dumps(response.json())}  ({took * 1000:.0f} ms)")  # fmt: skip
        exported = sorted(response.json()["exported"] for _, response, _ in answers)
        if exported != [0, 3]:
            raise DemoError(f"the two exports exported {exported}, not [0, 3]")
        say("   One took the lock and exported the three orders; the other took it after that")
        say("   (an admin export waits up to 2 s for the lock) and found nothing left to export.")

    async def kill_the_owner(self) -> None:
        """5. SIGKILL 3001: its leases expire after the ttl, and others take them."""
        say()
        say(f"5. {self.first.name}, which runs the reconciliation and leads the feed, is killed "
            "(SIGKILL)")  # fmt: skip
        say(f"   It hands nothing back: its leases stay until they expire, {LOCK_TTL_S} s after "
            "its last renewal.")  # fmt: skip
        killed_at = time.monotonic()
        await self.shops.stop(self.first, signal.SIGKILL)
        survivors = [instance for instance in self.shops.instances if instance.running]
        owner, taken = await self.shops.wait_for(TAKES_RECONCILIATION, survivors, since=killed_at)
        leader, led = await self.shops.wait_for(LEADS_FEED, survivors, since=killed_at)
        self.owner, self.owner_since, self.leader = owner, taken.at, leader
        hits = [(owner, taken), (leader, led)]
        hits.append(await self.shops.wait_for(MISSED, [owner], since=killed_at))
        missed = sum(len(i.matching(SKIPPED_ELSEWHERE, since=killed_at)) for i in survivors)
        say(f'   Meanwhile {missed} ticks were skipped ("it runs on another instance"). The new '
            "owner's first run finds")  # fmt: skip
        say(f"   that {self.first.name} never started the last of them, and records it.")
        alerts = [(i, line) for i in survivors for line in i.matching(OVERDUE, since=killed_at)]
        if alerts:
            say(f"   No run succeeded for over {EXPECT_RECONCILED_EVERY} (its expect_every), so "
                "each survivor warned (the first shown).")  # fmt: skip
            hits.append(min(alerts, key=lambda hit: hit[1].at))
        say("   In the order it happened:")
        for instance, line in sorted(hits, key=lambda hit: hit[1].at):
            evidence(instance, line, since=killed_at)

    async def pause_the_owners_scheduler(self) -> None:
        """6. The owner's scheduler stops while its process lives: it lets go, the other takes over.

        The overdue alert is raised meanwhile, and clears at the first run that succeeds.
        """
        owner = self.owner
        [other] = [i for i in self.shops.instances if i.running and i is not owner]
        say()
        say(f"6. {owner.name}'s scheduler stops firing; its process, and its lease renewals, "
            "live on")  # fmt: skip
        # the owner derives its owner_idle (three intervals) from the ticks it has run
        for count in range(TICKS_TO_LEARN_THE_INTERVAL):
            await self.shops.wait_for(
                RECONCILED, [owner], since=self.owner_since + count * RECONCILE_EVERY_S
            )
        async with httpx.AsyncClient(timeout=10) as http:
            paused = await http.post(
                f"http://127.0.0.1:{owner.port}/admin/scheduler/pause",
                headers={"x-admin-token": self.admin_token},
            )
            paused.raise_for_status()
            paused_at = time.monotonic()
            say(f"   POST :{owner.port}/admin/scheduler/pause -> {paused.status_code} "
                f"{json.dumps(paused.json())}")  # fmt: skip
            both = [owner, other]
            hits = [
                await self.shops.wait_for(OVERDUE, both, since=paused_at),
                await self.shops.wait_for(HANDED_BACK_IDLE, [owner], since=paused_at),
                await self.shops.wait_for(TAKES_RECONCILIATION, [other], since=paused_at),
                await self.shops.wait_for(RECOVERED, both, since=paused_at),
            ]
            for instance, line in sorted(hits, key=lambda hit: hit[1].at):
                evidence(instance, line, since=paused_at)
            resumed = await http.post(
                f"http://127.0.0.1:{owner.port}/admin/scheduler/resume",
                headers={"x-admin-token": self.admin_token},
            )
            resumed.raise_for_status()
        say(f"   {other.name} took over at its next tick; {owner.name}'s scheduler is resumed, and "
            "it now skips.")  # fmt: skip
        self.owner = other

    async def pause_run_and_resume(self) -> None:
        """7. Pause the reconciliation through one instance, run it by hand, resume it."""
        owner = self.owner
        [other] = [i for i in self.shops.instances if i.running and i is not owner]
        say()
        say("7. An operator pauses the reconciliation (kept in the lock store, so for every")
        say("   instance), runs it once by hand, and resumes it")
        job_url = f"http://127.0.0.1:{other.port}/admin/jobs/{RECONCILIATION}"
        headers = {"x-admin-token": self.admin_token}
        async with httpx.AsyncClient(timeout=10) as http:
            since = time.monotonic()
            paused = await http.post(
                f"{job_url}/pause", headers=headers, json={"note": "stock-taking in aisle 7"}
            )
            paused.raise_for_status()
            say(f"   POST :{other.port}/admin/jobs/{RECONCILIATION}/pause -> {paused.status_code}")
            evidence(*await self.shops.wait_for(PAUSED, [other], since=since), since=since)
            say(f"   {owner.name} owns the job; its next tick is skipped, saying by whom and why:")
            evidence(*await self.shops.wait_for(SKIPPED_PAUSED, [owner], since=since), since=since)
            ran_at = time.monotonic()
            ran = await http.post(f"{job_url}/run", headers=headers)
            ran.raise_for_status()
            say(f"   POST :{other.port}/admin/jobs/{RECONCILIATION}/run -> {ran.status_code}: "
                f"it runs on {other.name} now, paused or not, under its run lock:")  # fmt: skip
            evidence(*await self.shops.wait_for(RECONCILED, [other], since=ran_at), since=since)
            status = await http.get(f"http://127.0.0.1:{other.port}/admin/jobs", headers=headers)
            status.raise_for_status()
            [job] = [job for job in status.json() if job["job"] == RECONCILIATION]
            say(f"   GET /admin/jobs: paused by {job['paused']['paused_by']} "
                f"({job['paused']['note']!r}); last run {job['last_run']['outcome']} on "
                f"{job['last_run']['instance']}")  # fmt: skip
            resumed_at = time.monotonic()
            resumed = await http.post(f"{job_url}/resume", headers=headers)
            resumed.raise_for_status()
            say(f"   POST :{other.port}/admin/jobs/{RECONCILIATION}/resume -> "
                f"{resumed.status_code}; nothing is replayed, the next tick runs:")  # fmt: skip
            evidence(*await self.shops.wait_for(RECONCILED, [owner], since=resumed_at), since=since)

    async def stop_the_next_owner(self) -> None:
        """8. SIGTERM the new owner: it hands back at once, the last instance takes over."""
        owner = self.owner
        say()
        say(f"8. {owner.name} is stopped with SIGTERM: a graceful shutdown hands over at once")
        stopped_at = time.monotonic()
        code = await self.shops.stop(owner, signal.SIGTERM)
        [last] = [instance for instance in self.shops.instances if instance.running]
        self.last = last
        hits = [(owner, line) for line in owner.matching(LAST_WORDS, since=stopped_at)]
        hits.append(await self.shops.wait_for(TAKES_RECONCILIATION, [last], since=stopped_at))
        if self.leader is owner:
            hits.append(await self.shops.wait_for(LEADS_FEED, [last], since=stopped_at))
        for instance, line in sorted(hits, key=lambda hit: hit[1].at):
            evidence(instance, line, since=stopped_at)
        say(f"   {owner.name} exited ({exit_status(code)}). No ttl to wait for: {last.name} took "
            "over at its next tick.")  # fmt: skip

    async def count_the_bookings(self) -> None:
        """9. The ledger of the accounting system: each placed order booked once."""
        say()
        say("9. What the accounting system booked")
        text = await asyncio.to_thread(self.ledger.read_text)
        booked = [json.loads(line) for line in text.splitlines()]
        times = Counter(entry["order_id"] for entry in booked)
        for entry in booked:
            say(f"   {entry['order_id']}: booked {times[entry['order_id']]} time(s), in "
                f"{entry['batch_id']}, uploaded by {entry['uploaded_by']}")  # fmt: skip
        if sorted(times) != sorted(PLACED_ORDER_IDS) or set(times.values()) != {1}:
            raise DemoError(f"accounting booked {dict(times)}; each placed order once was expected")
        say("   Each placed order's invoice exactly once, across three processes and two failures.")

    async def show_the_locks(self) -> None:
        """10. The run records and the locks table while the last instance runs, then after."""
        say()
        say(f"10. The jobs' run records, as {self.last.name} reads them from the lock store")
        async with httpx.AsyncClient(timeout=10) as http:
            answer = await http.get(
                f"http://127.0.0.1:{self.last.port}/admin/jobs",
                headers={"x-admin-token": self.admin_token},
            )
            answer.raise_for_status()
        show_jobs(answer.json())
        say()
        say(f"   The locks table, with {self.last.name} still running")
        show_locks(await read_locks(self.stores))
        await self.shops.stop(self.last, signal.SIGTERM)
        say(f"   And after {self.last.name} stopped (SIGTERM), its leases handed back:")
        rows = await read_locks(self.stores)
        show_locks(rows)
        if any(row.owner is not None for row in rows):
            say("   (A lease whose job started less than a second before the shutdown is kept for")
            say("   the rest of that second: instances firing that same tick skip it.)")


async def draw_the_timeline(event_logs: Path, kept: Path) -> None:
    """11. ``leaselock timeline`` of the instances' event logs, both kept after the demo."""
    say()
    say("11. Who held which lock when: leaselock timeline")

    def keep_the_logs() -> list[Path]:
        return [Path(shutil.copy(log, kept)) for log in sorted(event_logs.glob("*.jsonl"))]

    logs = await asyncio.to_thread(keep_the_logs)
    timeline = kept / "timeline.html"
    drawn = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "leaselock",
        "timeline",
        *map(str, logs),
        "--output",
        str(timeline),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await drawn.communicate()
    if drawn.returncode != 0:
        raise DemoError(f"leaselock timeline failed: {output.decode().strip()}")
    say(f"   {output.decode().strip()}")
    say(f"   Open it in a browser: file://{timeline}")
    say(f"   Draw it again: leaselock timeline {kept}/*.jsonl -o timeline.html")
    say("   Each instance a colour, a token on every bar; the SIGKILLed owner's leases are held")
    say("   up to its last sign of life, then '? expired' (no end recorded) until their ttl ran")
    say("   out or the next holder took over; the SIGTERMed one's end with a hand-back mark.")


def dashboard_url(port: int) -> str:
    """The URL of the operator's dashboard of the instance on ``port``."""
    return f"http://127.0.0.1:{port}{DASHBOARD_PATH}/"


def exit_status(code: int) -> str:
    """Say how a process ended, from its exit code."""
    if code >= 0:
        return f"exit code {code}"
    # uvicorn ends a graceful shutdown by re-raising the signal it caught
    return f"ended by {signal.Signals(-code).name} after a graceful shutdown"


def show_jobs(jobs: list[dict[str, Any]]) -> None:
    """Print each job's last run and last success, as GET /admin/jobs answers them."""

    def run(record: dict[str, Any] | None) -> str:
        if record is None:
            return "-"
        outcome = record["outcome"] + (f" ({record['error']})" if record["error"] else "")
        return (
            f"{outcome} on {record['instance']}, {record['seconds'] * 1000:.0f} ms, "
            f"token {record['fencing_token']}"
        )

    for job in jobs:
        say(f"   {job['job']}")
        say(f"      last run:     {run(job['last_run'])}")
        say(f"      last success: {run(job['last_success'])}")
        overdue = "yes" if job["overdue"] else "no"
        say(f"      owner now:    {job['owner'] or '-'}; overdue: {overdue}")
        missed = "-" if job["missed_at"] is None else readable(job["missed_at"])
        paused = "-" if job["paused"] is None else f"by {job['paused']['paused_by']}"
        say(f"      missed tick:  {missed}; paused: {paused}; failures in a row: {job['failures']}")


def readable(moment: str) -> str:
    """An ISO time from the API as the log lines show theirs: to the second, ``+00:00``."""
    return datetime.fromisoformat(moment).astimezone(UTC).isoformat(timespec="seconds")


def show_locks(rows: list[LockRow]) -> None:
    """Print the locks table; the holder is the instance label every owner id ends with."""
    say(f"   {'key':<38} {'owner':<10} {'token':>5}  {'expires in':<11} holder")
    for row in rows:
        owner = "-" if row.owner is None else row.owner[:8]
        token = "-" if row.token is None else str(row.token)
        if row.owner is None:
            expires = "released"
        elif row.expires_in_ms is None or row.expires_in_ms <= 0:
            expires = "expired"
        else:
            expires = f"{row.expires_in_ms / 1000:.1f} s"
        holder = "" if row.owner is None else row.owner.partition("@")[2]
        say(f"   {row.key:<38} {owner:<10} {token:>5}  {expires:<11} {holder}")
    if any(row.token is None for row in rows):
        say("   (Redis keeps each lock's owner and expiry; the tokens come from one counter and")
        say("   are known to their holders only.)")


async def main() -> int:
    """Run the demo; return the exit status (2: it could not start)."""
    try:
        ports = demo_ports()
    except DemoError as error:
        say(f"The demo cannot start: {error}")
        return 2
    async with fresh_stores() as stores:
        try:
            await tell(stores, ports)
        except DemoError as error:
            say()
            say(f"The demo stopped: {error}")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
