"""EtcdGateway: etcd's own gRPC JSON gateway (``POST /v3/...``) over httpx, every call bounded.

etcd (3.4 and later) serves its v3 API as JSON on its client URL. What the JSON looks like:
keys and values are base64; int64 fields (revisions, lease ids, TTLs) are JSON strings; a field
equal to its default is left out (a txn that failed has no ``"succeeded"``; a missing lease's
keep-alive answers no ``"TTL"``). A refused call answers a non-200 status with
``{"error", "code", "message"}``, ``code`` being the gRPC status.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final, final

from .._errors import LockStoreError

if TYPE_CHECKING:
    import httpx

__all__ = [
    "EtcdGateway",
    "LeaseGoneError",
    "as_int",
    "decoded",
    "encoded",
    "prefix_end",
]

# gRPC status codes the gateway passes on
_NOT_FOUND: Final = 5
_RESOURCE_EXHAUSTED: Final = 8
_UNAVAILABLE: Final = 14
_UNAUTHENTICATED: Final = 16
_LEASE_NOT_FOUND: Final = "requested lease not found"
_HTTP_OK: Final = 200


class LeaseGoneError(Exception):
    """The lease a call named no longer exists (it expired or was revoked). Internal."""


def encoded(text: str) -> str:
    """Return ``text`` as etcd's JSON carries bytes: UTF-8, then base64."""
    return base64.b64encode(text.encode()).decode("ascii")


def encoded_bytes(raw: bytes) -> str:
    """Return ``raw`` as base64, for a key range's end."""
    return base64.b64encode(raw).decode("ascii")


def decoded(value: object) -> str:
    """Return the text a base64 field carries ("" where the field was left out)."""
    if not isinstance(value, str):
        return ""
    return base64.b64decode(value).decode(errors="replace")


def as_int(value: object) -> int:
    """Return an int64 field, which the gateway sends as a string (0 where it was left out)."""
    if value is None:
        return 0
    if isinstance(value, str | int) and not isinstance(value, bool):
        return int(value)
    raise LockStoreError(f"etcd's gateway sent {value!r} where an integer belongs")


def prefix_end(prefix: bytes) -> bytes:
    """Return the first key after every key that starts with ``prefix`` (etcd's range end)."""
    end = bytearray(prefix)
    while end and end[-1] == 0xFF:  # noqa: PLR2004 -- the largest byte has no successor
        end.pop()
    if not end:
        return b"\x00"  # every key: etcd reads a range end of "\0" as "to the end"
    end[-1] += 1
    return bytes(end)


@final
class EtcdGateway:
    """Calls etcd's JSON gateway through one ``httpx.AsyncClient``.

    A call goes to the current endpoint; when a connection to it cannot even be made or had
    (refused, timed out connecting, or no free connection in the pool: nothing was sent),
    the next endpoints are tried in turn. A call that may have reached a server and failed
    is never resent, since an acquire may have been applied; but when it timed out, or etcd
    answered UNAVAILABLE (no leader there), later calls go to the next endpoint.

    Args:
        client: sends the requests; the store decides who closes it.
        endpoints: ``http(s)://host:port`` client URLs of the cluster's members.
        timeout_s: the bound of each call (connect, send, wait for the answer).
        store: how to name the store in error messages.
    """

    __slots__ = ("_client", "_current", "_endpoints", "_store", "_timeout_s")

    def __init__(
        self, client: httpx.AsyncClient, endpoints: Sequence[str], timeout_s: float, store: str
    ) -> None:
        """Talk to ``endpoints`` through ``client``."""
        self._client = client
        self._endpoints = tuple(endpoints)
        self._current = 0
        self._timeout_s = timeout_s
        self._store = store

    async def call(self, path: str, body: Mapping[str, object]) -> dict[str, Any]:
        """POST ``body`` to ``/v3/<path>``; return the JSON answer.

        Raises:
            LeaseGoneError: the call named a lease that no longer exists.
            LockStoreError: no endpoint could be reached, the call timed out, or etcd refused
                it; the message says which, and the fix.
        """
        import httpx  # noqa: PLC0415 -- the store checked the driver before building this

        for attempt in range(len(self._endpoints)):
            endpoint = self._endpoints[(self._current + attempt) % len(self._endpoints)]
            try:
                response = await self._client.post(
                    f"{endpoint}/v3/{path}", json=body, timeout=self._timeout_s
                )
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as error:
                last_refusal = error
                continue
            except httpx.TimeoutException as error:
                self._skip(endpoint)
                raise LockStoreError(
                    f"{self._store}: etcd at {endpoint} did not answer /v3/{path} within "
                    f"{self._timeout_s:g} s ({type(error).__name__}); check the server's load "
                    "and the network, or raise timeout="
                ) from error
            except httpx.HTTPError as error:
                raise LockStoreError(
                    f"{self._store}: the connection to etcd at {endpoint} broke during "
                    f"/v3/{path} ({type(error).__name__}: {error}); check that the server "
                    "runs, and that the URL is its client URL"
                ) from error
            self._current = (self._current + attempt) % len(self._endpoints)
            return self._answer(endpoint, path, response)
        raise LockStoreError(
            f"{self._store} could not connect to etcd at {', '.join(self._endpoints)} "
            f"({last_refusal}); check that etcd runs and listens there (--listen-client-urls) "
            "and that each URL is a client URL (port 2379 by default)"
        ) from last_refusal

    @asynccontextmanager
    async def watch(self, key: str) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        """Open a watch of the deletions of ``key``; yield its messages (``created`` first).

        One streaming request per watched key: the gateway's HTTP/1.1 server reads a request's
        whole body before it answers, so a stream cannot carry a second watch request.

        Raises:
            LockStoreError: the watch could not be opened, or its stream broke.
        """
        import httpx  # noqa: PLC0415 -- the store checked the driver before building this

        endpoint = self._endpoints[self._current]
        body = {"create_request": {"key": encoded(key), "filters": ["NOPUT"]}}
        # waiting for a release may take hours: only connecting and sending are bounded
        timeout = httpx.Timeout(self._timeout_s, read=None)
        try:
            async with self._client.stream(
                "POST", f"{endpoint}/v3/watch", json=body, timeout=timeout
            ) as response:
                if response.status_code != _HTTP_OK:
                    await response.aread()
                    self._answer(endpoint, "watch", response)
                yield _messages(response, self._store)
        except httpx.HTTPError as error:
            raise LockStoreError(
                f"{self._store}: the watch of {key!r} on etcd at {endpoint} failed "
                f"({type(error).__name__}: {error})"
            ) from error

    def _answer(self, endpoint: str, path: str, response: httpx.Response) -> dict[str, Any]:
        try:
            answer = response.json()
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise LockStoreError(
                f"{self._store}: {endpoint}/v3/{path} answered {response.status_code} with "
                f"{response.text[:200]!r}, not etcd's JSON; point the store at an etcd 3.4 or "
                "later client URL"
            )
        if response.status_code == _HTTP_OK and "error" not in answer:
            return answer
        if answer.get("code") == _UNAVAILABLE:
            self._skip(endpoint)
        raise _refusal(self._store, endpoint, path, answer)

    def _skip(self, endpoint: str) -> None:
        """Point later calls at the endpoint after ``endpoint``, which may be cut off or leaderless.

        Only later calls: the current one may have reached it, so it is not resent.
        """
        self._current = (self._endpoints.index(endpoint) + 1) % len(self._endpoints)


def _refusal(store: str, endpoint: str, path: str, answer: Mapping[str, Any]) -> Exception:
    message = str(answer.get("message") or answer.get("error") or answer)
    code = answer.get("code")
    if _LEASE_NOT_FOUND in message:
        return LeaseGoneError(message)
    fix = {
        _UNAUTHENTICATED: "EtcdLockStore does not log in: use a cluster without auth, or "
        "client certificates through an httpx.AsyncClient(cert=...) of your own",
        _RESOURCE_EXHAUSTED: "the database is full (NOSPACE alarm): compact and defragment "
        "it, raise --quota-backend-bytes, then disarm the alarm",
        _UNAVAILABLE: "the cluster has no leader or is changing it: check that a majority "
        "of its members run; the call may be retried",
        _NOT_FOUND: "check that the URL is an etcd 3.4 or later client URL",
    }.get(code if isinstance(code, int) else -1, "check the server's log")
    return LockStoreError(f"{store}: etcd at {endpoint} refused /v3/{path}: {message}; {fix}")


async def _messages(response: httpx.Response, store: str) -> AsyncIterator[dict[str, Any]]:
    """Yield each ``result`` of a streaming answer (one JSON object a line)."""
    async for line in response.aiter_lines():
        if not line.strip():
            continue
        message = json.loads(line)
        result = message.get("result")
        if not isinstance(result, dict):
            raise LockStoreError(f"{store}: etcd's watch stream sent {line[:200]!r}")
        yield result
