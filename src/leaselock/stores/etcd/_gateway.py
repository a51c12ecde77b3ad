"""EtcdGateway: etcd's own gRPC JSON gateway (``POST /v3/...``) over httpx, every call bounded.

etcd (3.4 and later) serves its v3 API as JSON on its client URL. What the JSON looks like:
keys and values are base64; int64 fields (revisions, lease ids, TTLs) are JSON strings; a field
equal to its default is left out (a txn that failed has no ``"succeeded"``; a missing lease's
keep-alive answers no ``"TTL"``). A refused call answers a non-200 status with
``{"error", "code", "message"}``, ``code`` being the gRPC status; a refused streaming call
(keep-alive, watch) answers ``{"error": {"grpc_code", "message", ...}}``.

**Across a change of leader.** A cluster of several members keeps answering while one of them
dies or is cut off, but a request caught in the change behaves in one of three ways, measured
on etcd 3.4 with a killed leader (and what :meth:`EtcdGateway.call` does about each):

- refused at once, unapplied: every request carries the ``hasleader`` metadata, so a member
  with no leader (a cut-off one, or any during an election) answers ``no leader`` at once
  instead of holding the request: sent to the next member;
- held for about an election (1-1.5 s), then answered: reads, keep-alives and ``timetolive``
  wait on a follower for the new leader;
- held until etcd's request timeout (7 s by default), then ``request timed out``: a write that
  a follower forwarded to the dead leader. Applied or not, nobody can tell: a call that may be
  sent again goes to the next member after :data:`ATTEMPT_SHARE` of its time.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, final

from ..._errors import LockStoreError

if TYPE_CHECKING:
    import httpx

__all__ = [
    "ATTEMPT_SHARE",
    "HAS_LEADER",
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
# refusals that etcd makes before a request is handled: nothing of it was applied
_UNAPPLIED: Final = ("etcdserver: no leader", "etcdserver: too many requests")

HAS_LEADER: Final = {"Grpc-Metadata-hasleader": "true"}
"""etcd's ``hasleader`` metadata (clientv3's ``WithRequireLeader``), which the gateway passes on:
a member without a leader refuses the request at once, unapplied, and cancels a watch once it
has been without one for a few election timeouts, instead of holding either."""

ATTEMPT_SHARE: Final = 0.3
"""The share of a call's time (the store's ``timeout``) that one attempt may take before a call
that may be resent goes to the next member: a write held by a follower for a dead leader is
abandoned after 1.5 s (of 5 s), not after etcd's 7 s."""

FIRST_PAUSE_S: Final = 0.05
MAX_PAUSE_S: Final = 0.4
"""After every member failed once, the pause before the next round doubles from
:data:`FIRST_PAUSE_S` up to this: an election takes about a second."""


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
    """Calls etcd's JSON gateway through one ``httpx.AsyncClient``, across the cluster's members.

    A call goes to the current endpoint (the member that answered last) and, when that member
    fails, to the next ones in turn, for as long as the call's time (``timeout_s``) lasts:

    - a call that was not applied (the connection could not be made, or etcd refused it
      before handling it: ``no leader``, ``too many requests``) is always sent to the next
      member; after a round in which every member failed so, the call waits a little for an
      election (:data:`FIRST_PAUSE_S` doubling to :data:`MAX_PAUSE_S`), unless every member
      refused the connection: a cluster that nobody listens for is down, and the call fails;
    - a call that may have been applied (its connection broke, it timed out, or etcd answered
      ``request timed out``, ``leader changed``) is sent again only if the caller says
      ``resend=True``: a call whose repetition does no harm, or whose answer tells the
      repetition from the first (an acquire's failure branch names the owner that wrote).
      Each of its attempts may take :data:`ATTEMPT_SHARE` of the call's time;
    - any other refusal (a full database, a login needed, a path the server does not know)
      fails the call at once.

    Args:
        client: sends the requests; the store decides who closes it.
        endpoints: ``http(s)://host:port`` client URLs of the cluster's members.
        timeout_s: the bound of each call, all its attempts included.
        store: how to name the store in error messages.
    """

    __slots__ = ("_attempt_s", "_client", "_current", "_endpoints", "_store", "_timeout_s")

    def __init__(
        self, client: httpx.AsyncClient, endpoints: Sequence[str], timeout_s: float, store: str
    ) -> None:
        """Talk to ``endpoints`` through ``client``."""
        self._client = client
        self._endpoints = tuple(endpoints)
        self._current = 0
        self._timeout_s = timeout_s
        self._attempt_s = timeout_s * ATTEMPT_SHARE
        self._store = store

    async def call(
        self, path: str, body: Mapping[str, object], *, resend: bool = True
    ) -> dict[str, Any]:
        """POST ``body`` to ``/v3/<path>``; return the JSON answer.

        Args:
            path: the gateway path after ``/v3/``.
            body: the request, as etcd's JSON.
            resend: whether an attempt that may have been applied may be sent again (see the
                class); ``False`` for a call whose answer a repetition would falsify.

        Raises:
            LeaseGoneError: the call named a lease that no longer exists.
            LockStoreError: no member answered within the call's time, or the cluster refused
                the call; the message says which, and the fix.
        """
        answer, _ = await self.resent_call(path, body, resend=resend)
        return answer

    async def resent_call(
        self, path: str, body: Mapping[str, object], *, resend: bool = True
    ) -> tuple[dict[str, Any], bool]:
        """Do what :meth:`call` does; also tell whether an earlier attempt may have been applied.

        A caller whose request is not idempotent tells its own earlier write from another's
        by that: an acquire whose failure branch finds its own owner.

        Raises:
            LeaseGoneError: as :meth:`call`.
            LockStoreError: as :meth:`call`.
        """
        loop = asyncio.get_running_loop()
        maybe_applied = False
        deadline = loop.time() + self._timeout_s
        pause_s = FIRST_PAUSE_S
        tried = refused = 0
        while True:
            endpoint = self._endpoints[self._current]
            left_s = deadline - loop.time()
            bound_s = min(left_s, self._attempt_s) if resend else left_s
            outcome = await self._attempt(endpoint, path, body, bound_s)
            if not isinstance(outcome, _Failure):
                return outcome, maybe_applied
            maybe_applied |= outcome.maybe_applied
            tried += 1
            refused += outcome.refused
            self._skip(endpoint)
            if outcome.maybe_applied and not resend:
                raise LockStoreError(
                    f"{outcome.message}; not sent again, since it may have been applied"
                )
            if tried % len(self._endpoints) == 0:
                if refused == len(self._endpoints):
                    raise self._unreachable(outcome)
                refused = 0
                # every member failed once: give the cluster time to elect a leader
                await asyncio.sleep(max(0.0, min(pause_s, deadline - loop.time())))  # noqa: TID251 -- pacing retries of a real server
                pause_s = min(2 * pause_s, MAX_PAUSE_S)
            if loop.time() >= deadline:
                raise (
                    self._unreachable(outcome)
                    if outcome.refused
                    else LockStoreError(outcome.message)
                )

    async def _attempt(
        self, endpoint: str, path: str, body: Mapping[str, object], bound_s: float
    ) -> dict[str, Any] | _Failure:
        """Send the call once to ``endpoint``: the answer, or how it failed."""
        import httpx  # noqa: PLC0415 -- the store checked the driver before building this

        try:
            response = await self._client.post(
                f"{endpoint}/v3/{path}", json=body, headers=HAS_LEADER, timeout=bound_s
            )
        except (httpx.ConnectError, httpx.ConnectTimeout) as error:
            # nothing was sent
            return _Failure(str(error), maybe_applied=False, refused=True)
        except httpx.PoolTimeout as error:
            return _Failure(
                f"{self._store}: no connection of its client to etcd at {endpoint} was free "
                f"for /v3/{path} ({error}); give the store a client with more connections",
                maybe_applied=False,
            )
        except httpx.TimeoutException as error:
            return _Failure(
                f"{self._store}: etcd at {endpoint} did not answer /v3/{path} within "
                f"{self._timeout_s:g} s ({type(error).__name__}); check the server's load "
                "and the network, or raise timeout=",
                maybe_applied=True,
            )
        except httpx.HTTPError as error:
            return _Failure(
                f"{self._store}: the connection to etcd at {endpoint} broke during "
                f"/v3/{path} ({type(error).__name__}: {error}); check that the server "
                "runs, and that the URL is its client URL",
                maybe_applied=True,
            )
        return self._judged(endpoint, path, response)

    def _judged(
        self, endpoint: str, path: str, response: httpx.Response
    ) -> dict[str, Any] | _Failure:
        """Return etcd's answer, or the failure its refusal is; raise a refusal for good."""
        answer = self._json(endpoint, path, response)
        if response.status_code == _HTTP_OK and "error" not in answer:
            return answer
        code, message = _error_of(answer)
        if _LEASE_NOT_FOUND in message:
            raise LeaseGoneError(message)
        refusal = _refusal(self._store, endpoint, path, code, message)
        if any(unapplied in message for unapplied in _UNAPPLIED):
            return _Failure(refusal, maybe_applied=False)
        if code == _UNAVAILABLE:
            return _Failure(refusal, maybe_applied=True)
        raise LockStoreError(refusal)

    def _unreachable(self, last: _Failure) -> LockStoreError:
        return LockStoreError(
            f"{self._store} could not connect to etcd at {', '.join(self._endpoints)} "
            f"({last.message}); check that etcd runs and listens there (--listen-client-urls) "
            "and that each URL is a client URL (port 2379 by default)"
        )

    @asynccontextmanager
    async def watch(
        self, key: str, start_revision: int | None = None
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        """Open a watch of the deletions of ``key``; yield its messages (``created`` first).

        From ``start_revision`` on when given (events since then are sent first), else from
        now. Opened on the current member, or the next ones that can be connected to. One
        streaming request per watched key: the gateway's HTTP/1.1 server reads a request's
        whole body before it answers, so a stream cannot carry a second watch request. A
        member that loses its leader ends the stream (``hasleader``).

        Raises:
            LockStoreError: the watch could not be opened, or its stream broke; later calls
                go to the next member.
        """
        import httpx  # noqa: PLC0415 -- the store checked the driver before building this

        request: dict[str, object] = {"key": encoded(key), "filters": ["NOPUT"]}
        if start_revision is not None:
            request["start_revision"] = str(start_revision)
        # waiting for a release may take hours: only connecting and sending are bounded
        timeout = httpx.Timeout(self._timeout_s, read=None)
        response = None
        for _ in self._endpoints:
            endpoint = self._endpoints[self._current]
            sent = self._client.build_request(
                "POST",
                f"{endpoint}/v3/watch",
                json={"create_request": request},
                headers=HAS_LEADER,
                timeout=timeout,
            )
            try:
                response = await self._client.send(sent, stream=True)
                break
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as error:
                last_refusal: Exception = error
                self._skip(endpoint)
            except httpx.HTTPError as error:
                last_refusal = error
                self._skip(endpoint)
                break
        if response is None:
            raise LockStoreError(
                f"{self._store}: the watch of {key!r} could not be opened on etcd at "
                f"{', '.join(self._endpoints)} ({type(last_refusal).__name__}: {last_refusal})"
            ) from last_refusal
        try:
            if response.status_code != _HTTP_OK:
                await response.aread()
                self._answer(endpoint, "watch", response)
            yield _messages(response, self._store)
        except httpx.HTTPError as error:
            self._skip(endpoint)
            raise LockStoreError(
                f"{self._store}: the watch of {key!r} on etcd at {endpoint} failed "
                f"({type(error).__name__}: {error})"
            ) from error
        except LockStoreError:
            self._skip(endpoint)
            raise
        finally:
            await response.aclose()

    def _json(self, endpoint: str, path: str, response: httpx.Response) -> dict[str, Any]:
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
        return answer

    def _answer(self, endpoint: str, path: str, response: httpx.Response) -> dict[str, Any]:
        """Return a successful answer; raise what etcd's refusal means."""
        answer = self._json(endpoint, path, response)
        if response.status_code == _HTTP_OK and "error" not in answer:
            return answer
        code, message = _error_of(answer)
        if _LEASE_NOT_FOUND in message:
            raise LeaseGoneError(message)
        raise LockStoreError(_refusal(self._store, endpoint, path, code, message))

    def _skip(self, endpoint: str) -> None:
        """Point later calls at the endpoint after ``endpoint``, which failed."""
        self._current = (self._endpoints.index(endpoint) + 1) % len(self._endpoints)


@final
@dataclass(frozen=True, slots=True)
class _Failure:
    """One attempt that failed: what to say, and whether etcd may have applied it."""

    message: str
    maybe_applied: bool
    refused: bool = False


def _error_of(answer: Mapping[str, Any]) -> tuple[int | None, str]:
    """Return the gRPC code and message of a refusal, unary or streaming."""
    error = answer.get("error")
    if isinstance(error, dict):  # a streaming call's refusal
        code, message = error.get("grpc_code"), error.get("message")
    else:
        code, message = answer.get("code"), answer.get("message") or error
    return (code if isinstance(code, int) else None), str(message or answer)


def _refusal(store: str, endpoint: str, path: str, code: int | None, message: str) -> str:
    fix = {
        _UNAUTHENTICATED: "EtcdLockStore does not log in: use a cluster without auth, or "
        "client certificates through an httpx.AsyncClient(cert=...) of your own",
        _RESOURCE_EXHAUSTED: "the database is full (NOSPACE alarm): compact and defragment "
        "it, raise --quota-backend-bytes, then disarm the alarm",
        _UNAVAILABLE: "the cluster had no leader, or was changing it, for the whole call: "
        "check that a majority of its members run and reach each other",
        _NOT_FOUND: "check that the URL is an etcd 3.4 or later client URL",
    }.get(-1 if code is None else code, "check the server's log")
    return f"{store}: etcd at {endpoint} refused /v3/{path}: {message}; {fix}"


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
