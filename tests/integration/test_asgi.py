"""FastAPI: the Locks lives as long as the app, and a held lock answers 409."""

import asyncio

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from helpers import yield_once
from leaselock import LockNotAcquiredError, Locks
from leaselock.integrations.asgi import locks_lifespan


def make_app(locks: Locks, release: asyncio.Event) -> FastAPI:
    app = FastAPI(lifespan=locks_lifespan(locks))

    @app.exception_handler(LockNotAcquiredError)
    async def conflict(request: Request, error: LockNotAcquiredError) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=409)

    @app.post("/admin/invoice-exports")
    async def export(request: Request) -> dict[str, int]:
        app_locks: Locks = request.app.state.locks

        async def run() -> dict[str, int]:
            await release.wait()
            return {"exported": 3}

        return await app_locks.with_lock("invoices:nightly-export", run, wait="2s")

    return app


async def test_the_lifespan_starts_the_locks_and_a_held_lock_answers_409(store, clock):
    release = asyncio.Event()
    locks = Locks(store=store, clock=clock)
    app = make_app(locks, release)
    async with app.router.lifespan_context(app):
        assert locks.started
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://shop") as client:
            first = asyncio.create_task(client.post("/admin/invoice-exports"))
            while "invoices:nightly-export" not in store._rows:
                await yield_once()
            second = asyncio.create_task(client.post("/admin/invoice-exports"))
            await clock.advance("2s")
            refused = await second
            release.set()
            accepted = await first
    assert not locks.started
    assert accepted.status_code == 200
    assert accepted.json() == {"exported": 3}
    assert refused.status_code == 409
    assert "is held by another owner" in refused.json()["detail"]
