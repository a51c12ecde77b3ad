"""Contention: W workers taking one key in turn, across OS processes or in one, beside peers.

Each worker loops for SECONDS: wait for the key (up to 30 s), hold it for a moment (no work),
release it. All start together. It prints, per store and W:

    handoffs per second: acquisitions that passed the key to another worker, all workers
        together, and the share "retaken by the releaser" when there is one (a worker that
        released and took the key back before a waiter did: an acquisition, not a handoff);
    starved: workers that never got the key; and the fewest and most acquisitions of one worker;
    the longest wait of any acquisition;
    CPU per critical section: the workers' CPU time together, over the acquisitions.

A fair lock serves every worker and bounds the longest wait; an unfair one lets the worker
that just released take the key again while the others sleep.

Beside them runs the floor: the least a handoff between waiting workers costs on the store.
On Redis, one token passed through a list: each worker waits in BLPOP on a connection of its
own and pushes the token back (Redis serves BLPOP waiters first come, first served). On
PostgreSQL, a blocked ``pg_advisory_lock``, released by ``pg_advisory_unlock``. Neither has a
lease or a fencing token. leaselock's CPU per section is printed as a multiple of the floor's
at each W: where that multiple stays flat as W grows, what grows is the machine's cost of
waking another process, not extra wake-ups of leaselock's. Each contender runs --repeat
times, taking turns with the others (every other round in the reverse order), and each figure
is the median of its runs with their range and its width: on a shared machine, runs a few
seconds apart differ by 20 % and more. leaselock's handoffs/s over the peer's is the median of
the rounds' ratios, each of two runs seconds apart.

With --in-process, the W workers are tasks of one process sharing one Locks (python-redis-lock's
are threads sharing one client), and CPU is that process's. That process runs on one CPU
(--cpu; the last by default), the same for every contender. Left to the scheduler on this
2-core machine, python-redis-lock's eight threads ran at 1,000-1,370 handoffs/s when spread
over both cores (0.8-0.9 ms of CPU per section: a thread woken on the other core waits there
for the GIL) and at 1,640-1,990/s when they shared one (0.5 ms). Which of the two a run got
depended on where the scheduler put them and on what else ran, so its ratio to leaselock's one
asyncio thread (2,300-3,300/s either way) moved by half from run to run. ``--cpu any``
measures that.
Each handoff's time is read while the key is held, so merging every worker's times gives the
order of the holders.

Every process warms up before the start, each contender alike: it takes and releases a key of
its own (opening its connections, loading its scripts, subscribing), then runs a full garbage
collection. The figures are then those of processes that have run for a while. Without it,
each of 64 freshly started interpreters opened its connections inside the measured seconds,
which set the longest wait, and paid its first full collection there too (its imports' 50,000
objects, 15-30 ms), which moved the CPU per section by up to 10 % at random.

Run: .venv/bin/python benchmarks/bench_contention.py [--stores redis,postgres,sqlite]
     [--workers 8,64] [--seconds 5] [--repeat 5] [--in-process [--cpu N|any]]
python-redis-lock comes with the benchmark dependency group (make bench). URLs default to
LEASELOCK_TEST_POSTGRES_URL / LEASELOCK_TEST_REDIS_URL, else the machine's servers.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import itertools
import logging
import multiprocessing
import os
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.synchronize import Barrier

import asyncpg
import redis
import redis_lock
from _servers import add_server_arguments, delete_prefix, drop_store_tables

from leaselock import Locks
from leaselock.stores.postgres import PostgresLockStore
from leaselock.stores.redis import RedisLockStore
from leaselock.stores.sqlite import SQLiteLockStore

START_TIMEOUT_S = 60.0
FLOOR = "floor"


@dataclass(frozen=True)
class WorkerResult:
    """What one worker did: ``held_at``, when (monotonic) each of its acquisitions held the key."""

    held_at: list[float]
    longest_wait_s: float
    cpu_s: float

    @property
    def acquisitions(self) -> int:
        return len(self.held_at)


# what a worker process is given: store kind, URL or path, run id, seconds, start, results, and
# how many workers it runs (tasks, or python-redis-lock's threads)
Job = tuple[str, str, str, float, Barrier, "multiprocessing.Queue[WorkerResult]", int]


def make_store(
    kind: str, where: str, run: str
) -> PostgresLockStore | RedisLockStore | SQLiteLockStore:
    if kind == "sqlite":
        return SQLiteLockStore(where)
    if kind == "redis":
        return RedisLockStore.from_url(where, prefix=f"leaselock-contention-{run}:")
    table = f"leaselock_contention_{run}"
    return PostgresLockStore.from_url(where, table=table, sequence=f"{table}_seq", max_size=2)


def leaselock_worker(job: Job) -> None:
    kind, where, run, seconds, start, results, tasks = job
    logging.getLogger("leaselock").setLevel(logging.ERROR)

    async def loop(locks: Locks, until: float) -> tuple[list[float], float]:
        held_at: list[float] = []
        longest = 0.0
        while time.monotonic() < until:
            asked = time.monotonic()
            lock = await locks.acquire("contended", wait="30s")
            held = time.monotonic()
            longest = max(longest, held - asked)
            if lock is not None:
                held_at.append(held)
                await lock.release()
        return held_at, longest

    async def work() -> list[WorkerResult]:
        async with Locks(store=make_store(kind, where, run), ttl="30s") as locks:
            warm_up = await locks.acquire(f"warm-up-{uuid.uuid4().hex}", wait="30s")
            if warm_up is not None:
                await warm_up.release()
            gc.collect()
            start.wait(START_TIMEOUT_S)
            cpu = time.process_time()
            until = time.monotonic() + seconds
            done = await asyncio.gather(*(loop(locks, until) for _ in range(tasks)))
            cpu_s = (time.process_time() - cpu) / tasks
            # no process winds down while others still wait: 64 interpreters exiting at once
            # starve the last waiters of CPU, and their waits would measure that
            start.wait(START_TIMEOUT_S)
            return [WorkerResult(held_at, longest, cpu_s) for held_at, longest in done]

    for result in asyncio.run(work()):
        results.put(result)


def redis_token_worker(job: Job) -> None:
    """The Redis floor: a token passed through one list, each worker on a connection of its own."""
    _, where, run, *_, threads = job
    client = redis.Redis.from_url(where)
    token_list = f"leaselock-contention-{run}:token"
    connections = [client.connection_pool.get_connection() for _ in range(threads)]
    warm_up = f"leaselock-contention-{run}:warm-up-{uuid.uuid4().hex}"
    for connection in connections:
        connection.send_command("RPUSH", warm_up, "token")
        connection.read_response()
        connection.send_command("BLPOP", warm_up, 30)
        connection.read_response()
    gc.collect()

    def loop(
        connection: redis.connection.AbstractConnection, until: float
    ) -> tuple[list[float], float]:
        held_at: list[float] = []
        longest = 0.0
        while time.monotonic() < until:
            asked = time.monotonic()
            connection.send_command("BLPOP", token_list, 30)
            taken = connection.read_response() is not None
            held = time.monotonic()
            longest = max(longest, held - asked)
            if taken:
                held_at.append(held)
                connection.send_command("RPUSH", token_list, "token")
                connection.read_response()
        return held_at, longest

    contend_in_threads([functools.partial(loop, each) for each in connections], job)


def postgres_advisory_worker(job: Job) -> None:
    """The PostgreSQL floor: a blocked pg_advisory_lock, each worker on a session of its own."""
    _, where, run, seconds, start, results, tasks = job
    key = int(run, 16)

    async def loop(connection: asyncpg.Connection, until: float) -> tuple[list[float], float]:
        held_at: list[float] = []
        longest = 0.0
        while time.monotonic() < until:
            asked = time.monotonic()
            await connection.execute("SELECT pg_advisory_lock($1)", key)
            held = time.monotonic()
            longest = max(longest, held - asked)
            held_at.append(held)
            await connection.execute("SELECT pg_advisory_unlock($1)", key)
        return held_at, longest

    async def work() -> list[WorkerResult]:
        connections = [await asyncpg.connect(where) for _ in range(tasks)]
        try:
            for connection in connections:
                await connection.execute("SELECT pg_advisory_lock($1)", key + 1)
                await connection.execute("SELECT pg_advisory_unlock($1)", key + 1)
            gc.collect()
            start.wait(START_TIMEOUT_S)
            cpu = time.process_time()
            until = time.monotonic() + seconds
            done = await asyncio.gather(*(loop(each, until) for each in connections))
            cpu_s = (time.process_time() - cpu) / tasks
            start.wait(START_TIMEOUT_S)
        finally:
            for connection in connections:
                await connection.close()
        return [WorkerResult(held_at, longest, cpu_s) for held_at, longest in done]

    for result in asyncio.run(work()):
        results.put(result)


def python_redis_lock_worker(job: Job) -> None:
    _, where, run, *_, threads = job
    client = redis.Redis.from_url(where, max_connections=threads + 4)
    warm_up = redis_lock.Lock(client, f"warm-up-{uuid.uuid4().hex}", expire=30)
    if warm_up.acquire(blocking=True, timeout=30):
        warm_up.release()
    gc.collect()

    def loop(until: float) -> tuple[list[float], float]:
        held_at: list[float] = []
        longest = 0.0
        while time.monotonic() < until:
            asked = time.monotonic()
            lock = redis_lock.Lock(client, f"contention-{run}", expire=30)
            taken = lock.acquire(blocking=True, timeout=30)
            held = time.monotonic()
            longest = max(longest, held - asked)
            if taken:
                held_at.append(held)
                lock.release()
        return held_at, longest

    contend_in_threads([loop] * threads, job)


def contend_in_threads(loops: list[Callable[[float], tuple[list[float], float]]], job: Job) -> None:
    """Run each loop, given when to stop, in a thread of its own from the common start.

    Each loop returns when each of its acquisitions held the key, and its longest wait; the
    process's CPU is shared out among them.
    """
    _, _, _, seconds, start, results, _ = job
    done: list[tuple[list[float], float]] = []
    start.wait(START_TIMEOUT_S)
    cpu = time.process_time()
    until = time.monotonic() + seconds
    workers = [
        threading.Thread(target=lambda loop=loop: done.append(loop(until))) for loop in loops
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    cpu_s = (time.process_time() - cpu) / len(loops)
    start.wait(START_TIMEOUT_S)
    for held_at, longest in done:
        results.put(WorkerResult(held_at, longest, cpu_s))


def put_token(where: str, run: str) -> None:
    """Put the one token of ``redis_token_worker``'s run in its list."""
    with redis.Redis.from_url(where) as client:
        client.rpush(f"leaselock-contention-{run}:token", "token")


def run_on(cpus: set[int] | None, target: Callable[[Job], None], job: Job) -> None:
    """Run ``target(job)`` in this process, on ``cpus`` only when given (every thread)."""
    if cpus is not None:
        os.sched_setaffinity(0, cpus)
    target(job)


def contend(
    target: Callable[[Job], None],
    kind: str,
    where: str,
    workers: int,
    seconds: float,
    *,
    in_process: bool,
    cpus: set[int] | None = None,
) -> list[WorkerResult]:
    """Run ``workers`` workers of ``target`` on one key; ``cpus``: where their processes run."""
    context = multiprocessing.get_context("spawn")
    processes_needed, per_process = (1, workers) if in_process else (workers, 1)
    start = context.Barrier(processes_needed)
    results: multiprocessing.Queue[WorkerResult] = context.Queue()
    run = uuid.uuid4().hex[:8]
    if target is redis_token_worker:
        put_token(where, run)
    processes = [
        context.Process(
            target=run_on,
            args=(cpus, target, (kind, where, run, seconds, start, results, per_process)),
        )
        for _ in range(processes_needed)
    ]
    for process in processes:
        process.start()
    gathered = [results.get(timeout=START_TIMEOUT_S + seconds + 60) for _ in range(workers)]
    for process in processes:
        process.join(30)
    if kind == "redis":
        asyncio.run(delete_prefix(where, f"leaselock-contention-{run}:"))
    elif kind == "postgres":
        asyncio.run(drop_store_tables(where, f"leaselock_contention_{run}"))
    return gathered


@dataclass(frozen=True)
class RunFigures:
    """What one run of W workers gave.

    ``handoffs_per_s`` counts the acquisitions whose holder differs from the one before;
    ``retaken``: the share of acquisitions by the worker that held the key last (it released
    and took the key back before a waiter did).
    """

    handoffs_per_s: float
    retaken: float
    starved: int
    fewest: int
    most: int
    longest_wait_ms: float
    cpu_ms_per_section: float


def handoffs(results: list[WorkerResult]) -> int:
    """Count the acquisitions that passed the key to another worker.

    The key is held by one worker at a time, and each acquisition's time is read while it is
    held, so the times of all workers in order are the order of the holders (one monotonic
    clock for every process of the machine).
    """
    holders = sorted(
        (held, worker) for worker, result in enumerate(results) for held in result.held_at
    )
    return sum(1 for before, after in itertools.pairwise(holders) if before[1] != after[1])


def figures(seconds: float, results: list[WorkerResult]) -> RunFigures:
    counts = [result.acquisitions for result in results]
    total = sum(counts)
    passed = handoffs(results)
    return RunFigures(
        handoffs_per_s=passed / seconds,
        retaken=(total - 1 - passed) / total if total > 1 else 0.0,
        starved=counts.count(0),
        fewest=min(counts),
        most=max(counts),
        longest_wait_ms=max(result.longest_wait_s for result in results) * 1000,
        cpu_ms_per_section=sum(result.cpu_s for result in results) * 1000 / max(total, 1),
    )


def report(
    name: str,
    workers: int,
    runs: list[RunFigures],
    *,
    peer: list[RunFigures] | None = None,
    floor: list[RunFigures] | None = None,
) -> None:
    """Print the median of the runs, with the range (and its width) where there are several.

    Args:
        peer: the peer's runs beside these, round by round; handoffs/s is printed as a ratio,
            the median of the rounds' ratios (each run over the peer's of the same round,
            seconds apart), with their range.
        floor: the floor's runs beside these; the medians of CPU per section are printed as a
            ratio.
    """

    def spread(values: list[float], fmt: str, *, width: bool = False) -> str:
        middle = statistics.median(values)
        if len(values) == 1:
            return format(middle, fmt)
        low, high = min(values), max(values)
        shown = f"{format(middle, fmt)} ({format(low, fmt)}-{format(high, fmt)}"
        return f"{shown}, {(high - low) / middle:.0%} wide)" if width else f"{shown})"

    passed = spread([run.handoffs_per_s for run in runs], ".0f", width=True)
    cpu = spread([run.cpu_ms_per_section for run in runs], ".2f")
    longest = spread([run.longest_wait_ms for run in runs], ".0f")
    retaken = statistics.median(run.retaken for run in runs)
    print(
        f"  {name:<18} W={workers:<3} {passed} handoffs/s   "
        + (f"retaken by the releaser {retaken:.0%}   " if retaken >= 0.005 else "")
        + f"starved {max(run.starved for run in runs)}   "
        f"per worker {min(run.fewest for run in runs)}-{max(run.most for run in runs)}   "
        f"longest wait {longest} ms   CPU {cpu} ms/section"
    )
    ratios = []
    if peer:
        rounds = [
            run.handoffs_per_s / theirs.handoffs_per_s
            for run, theirs in zip(runs, peer, strict=True)
            if theirs.handoffs_per_s
        ]
        ratios.append(f"x{spread(rounds, '.2f')} the peer's handoffs/s")
    if floor:
        ratio = statistics.median(run.cpu_ms_per_section for run in runs) / statistics.median(
            run.cpu_ms_per_section for run in floor
        )
        ratios.append(f"x{ratio:.2f} the floor's CPU per section")
    if ratios:
        print(f"  {'':<18} {', '.join(ratios)}")


def warn_if_too_few_connections(url: str, workers: int, *, in_process: bool) -> None:
    """Say so when the server cannot take every worker's connections: the figure is then the
    connection limit's, not the lock's (each worker process: its statements and its LISTEN)."""

    async def allowed() -> int:
        connection = await asyncpg.connect(url)
        try:
            return int(await connection.fetchval("SHOW max_connections"))
        finally:
            await connection.close()

    needed = 4 if in_process else 3 * workers
    limit = asyncio.run(allowed())
    if limit < needed + 10:
        print(
            f"  (the server allows {limit} connections, and {workers} workers need about "
            f"{needed}: pass --postgres-url of a server with max_connections >= {needed + 10})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", default="redis,postgres,sqlite")
    parser.add_argument("--workers", default="8,64")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeat", type=int, default=5, help="runs of each contender, in turns")
    parser.add_argument(
        "--in-process", action="store_true", help="W tasks (threads) in one process"
    )
    parser.add_argument(
        "--cpu",
        default=str(max(os.sched_getaffinity(0))),
        help="with --in-process, the CPU the process runs on (default: the last this one may "
        "use), or 'any' to leave it to the scheduler",
    )
    add_server_arguments(parser)
    arguments = parser.parse_args()
    chosen = arguments.stores.split(",")
    seconds = arguments.seconds
    in_process = arguments.in_process
    repeat = arguments.repeat
    cpus = {int(arguments.cpu)} if in_process and arguments.cpu != "any" else None
    where_run = "in one process" if in_process else "in processes"
    if cpus is not None:
        where_run += f" on CPU {arguments.cpu}"
    print(
        f"one key, W workers {where_run}, {seconds:g} s; median of {repeat} runs "
        "(range, its width over the median), the contenders taking turns"
    )
    for workers in (int(count) for count in arguments.workers.split(",")):
        for kind in chosen:
            where = {"redis": arguments.redis_url, "postgres": arguments.postgres_url}.get(kind)
            print({"redis": "Redis", "postgres": "PostgreSQL", "sqlite": "SQLite"}[kind])
            if kind == "postgres":
                warn_if_too_few_connections(arguments.postgres_url, workers, in_process=in_process)
            contenders: dict[str, Callable[[Job], None]] = {"leaselock": leaselock_worker}
            if kind == "redis":
                contenders = {
                    FLOOR: redis_token_worker,
                    "python-redis-lock": python_redis_lock_worker,
                    **contenders,
                }
            elif kind == "postgres":
                contenders = {FLOOR: postgres_advisory_worker, **contenders}
            runs: dict[str, list[RunFigures]] = {name: [] for name in contenders}
            with tempfile.TemporaryDirectory() as directory:
                for turn in range(repeat):
                    # every other round in the reverse order: none always runs after another
                    order = list(contenders.items())
                    for name, target in order[:: -1 if turn % 2 else 1]:
                        place = where or f"{directory}/locks-{len(runs[name])}.db"
                        gathered = contend(
                            target, kind, place, workers, seconds, in_process=in_process, cpus=cpus
                        )
                        runs[name].append(figures(seconds, gathered))
            peer, floor = runs.get("python-redis-lock"), runs.get(FLOOR)
            for name, done in runs.items():
                report(
                    name,
                    workers,
                    done,
                    peer=peer if name == "leaselock" else None,
                    floor=floor if name != FLOOR else None,
                )


if __name__ == "__main__":
    main()
