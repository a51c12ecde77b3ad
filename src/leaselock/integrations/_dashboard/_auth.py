"""Who may look at the dashboard, who may act, and proof that an action came from its own page.

Three modes, chosen by what the dashboard is given:

- **read-only** (no token, no ``authenticate``): anyone who reaches it may look; nobody may act.
- **token**: looking and acting need a session, opened by signing in with the token (compared
  in constant time) and a name, which every audit event then carries.
- **host**: the application's own ``authenticate(scope)`` names the operator (``None``:
  refused), from its own session, SSO header or middleware; the dashboard asks for nothing.

A session is a cookie signed with HMAC-SHA256 (``HttpOnly``, ``SameSite=Strict``, ``Secure``
over HTTPS, scoped to the mount path): every process that shares the token (or ``secret``)
accepts it, so replicas behind one address need no shared session store. Every action also
carries a CSRF token, the HMAC of the session's own random nonce: a form on another site can
neither read it nor make it, and the ``SameSite=Strict`` cookie would not be sent anyway.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias, final

from ..._clock import utc_now
from ..._errors import LocksConfigurationError
from ._http import Request

__all__ = [
    "MIN_TOKEN_CHARS",
    "Authenticate",
    "Guard",
    "Mode",
    "Session",
]

Authenticate: TypeAlias = Callable[[Mapping[str, object]], Awaitable[str | None]]
"""The host application's check: given the request's ASGI scope, the operator's name, or
``None`` to refuse the request."""

Mode: TypeAlias = Literal["read-only", "token", "host"]

MIN_TOKEN_CHARS: Final = 16
MAX_NAME_CHARS: Final = 80
SESSION_MAX_AGE_S: Final = 12 * 3600
SESSION_COOKIE: Final = "leaselock_session"
FLASH_COOKIE: Final = "leaselock_flash"
FLASH_MAX_AGE_S: Final = 60

_log = logging.getLogger("leaselock.dashboard")


@final
@dataclass(frozen=True, slots=True)
class Session:
    """One browser's session: who signed in (``""`` until someone does) and its nonce."""

    who: str
    nonce: str
    issued_s: int


@final
class Guard:
    """Checks sign-ins, sessions and CSRF tokens for one dashboard.

    Args:
        token: the secret operators sign in with, or ``None``.
        authenticate: the host application's check, or ``None``.
        secret: the key that signs sessions in host mode (default: a random one per process;
            pass one shared by the processes behind one address). Token mode derives its key
            from the token.

    Raises:
        LocksConfigurationError: both ``token`` and ``authenticate``, or a short token.
    """

    __slots__ = ("_authenticate", "_key", "_token", "mode")

    def __init__(
        self,
        *,
        token: str | None,
        authenticate: Authenticate | None,
        secret: str | bytes | None,
    ) -> None:
        """Check the arguments; see the class."""
        if token is not None and authenticate is not None:
            raise LocksConfigurationError(
                "dashboard(token=..., authenticate=...): pass one, the token operators sign in "
                "with or the application's own check"
            )
        if token is not None and (not isinstance(token, str) or len(token) < MIN_TOKEN_CHARS):
            raise LocksConfigurationError(
                f"the dashboard's token is too short to resist guessing; pass at least "
                f"{MIN_TOKEN_CHARS} characters, e.g. from `openssl rand -hex 32`"
            )
        if authenticate is not None and not callable(authenticate):
            raise LocksConfigurationError(
                f"authenticate={authenticate!r}; pass an async function of the ASGI scope "
                "that returns the operator's name, or None to refuse"
            )
        self._token = token
        self._authenticate = authenticate
        self.mode: Mode = "token" if token else "host" if authenticate else "read-only"
        if token is not None:
            key_material = token.encode()
        elif isinstance(secret, str):
            key_material = secret.encode()
        else:
            key_material = secret or secrets.token_bytes(32)
        # a key of its own: the token itself never signs anything a browser holds
        self._key = hmac.new(key_material, b"leaselock dashboard sessions v1", "sha256").digest()

    @property
    def may_act(self) -> bool:
        """Whether anyone may act here: not in read-only mode."""
        return self.mode != "read-only"

    async def operator(self, request: Request, scope: Mapping[str, object]) -> str | None:
        """Return who makes ``request``: the signed-in name, the host's answer, or ``None``."""
        if self.mode == "host":
            assert self._authenticate is not None  # noqa: S101 -- host mode has one
            who = await self._authenticate(scope)
            return None if who is None else clean_name(str(who))
        session = self.session(request)
        return session.who if session is not None and session.who else None

    def session(self, request: Request) -> Session | None:
        """Return the request's session, if its cookie is one this dashboard signed, in date."""
        value = request.cookies.get(SESSION_COOKIE)
        if not value or "." not in value:
            return None
        payload, _, signature = value.rpartition(".")
        if not hmac.compare_digest(signature, self._sign(payload)):
            return None
        try:
            fields = json.loads(_unb64(payload))
            session = Session(str(fields["w"]), str(fields["n"]), int(fields["t"]))
        except (ValueError, KeyError, TypeError):
            return None
        if not 0 <= _now_s() - session.issued_s <= SESSION_MAX_AGE_S:
            return None
        return session

    def new_session(self, who: str = "") -> Session:
        """Return a fresh session for ``who`` (``""``: nobody signed in yet), with a new nonce."""
        return Session(who, secrets.token_urlsafe(16), _now_s())

    def cookie(self, request: Request, session: Session | None) -> str:
        """Return the ``Set-Cookie`` value that keeps ``session`` (``None``: forgets it)."""
        attributes = f"Path={request.root or '/'}; HttpOnly; SameSite=Strict"
        if request.https:
            attributes += "; Secure"
        if session is None:
            return f"{SESSION_COOKIE}=; Max-Age=0; {attributes}"
        payload = _b64(
            json.dumps({"w": session.who, "n": session.nonce, "t": session.issued_s}).encode()
        )
        value = f"{payload}.{self._sign(payload)}"
        return f"{SESSION_COOKIE}={value}; Max-Age={SESSION_MAX_AGE_S}; {attributes}"

    def flash_cookie(self, request: Request, text: str | None) -> str:
        """Return the ``Set-Cookie`` value that shows ``text`` once on the next page.

        ``None`` clears it. Signed, so that no other site can put words in the dashboard's mouth.
        """
        attributes = f"Path={request.root or '/'}; HttpOnly; SameSite=Strict"
        if request.https:
            attributes += "; Secure"
        if text is None:
            return f"{FLASH_COOKIE}=; Max-Age=0; {attributes}"
        payload = _b64(text.encode())
        value = f"{payload}.{self._sign('flash:' + payload)}"
        return f"{FLASH_COOKIE}={value}; Max-Age={FLASH_MAX_AGE_S}; {attributes}"

    def flash(self, request: Request) -> str | None:
        """Return the text of the request's flash cookie, if this dashboard signed it."""
        value = request.cookies.get(FLASH_COOKIE)
        if not value or "." not in value:
            return None
        payload, _, signature = value.rpartition(".")
        if not hmac.compare_digest(signature, self._sign("flash:" + payload)):
            return None
        try:
            return _unb64(payload).decode()
        except ValueError:
            return None

    def csrf_token(self, session: Session) -> str:
        """Return the CSRF token of ``session``'s forms."""
        return self._sign(f"csrf:{session.nonce}")

    def csrf_ok(self, request: Request, given: str | None) -> bool:
        """Whether ``given`` is the CSRF token of the request's own session, from this host."""
        session = self.session(request)
        if session is None or not given or not request.same_origin():
            return False
        return hmac.compare_digest(given, self.csrf_token(session))

    def token_ok(self, given: str | None) -> bool:
        """Whether ``given`` is the token, compared in constant time."""
        if self._token is None or given is None:
            return False
        # constant time: how long the comparison takes must not tell how much of a guess was right
        return hmac.compare_digest(given.encode(), self._token.encode())

    def refused(self, request: Request, what: str) -> None:
        """Log a refused sign-in or action at WARNING, with the client's address."""
        _log.warning("Dashboard refused %s from %s", what, request.client)

    def _sign(self, payload: str) -> str:
        return _b64(hmac.new(self._key, payload.encode(), hashlib.sha256).digest())


def clean_name(name: str) -> str:
    """Return an operator's name fit for a log line: printable, one line, at most 80 chars."""
    printable = "".join(char for char in name if char.isprintable())
    return printable.strip()[:MAX_NAME_CHARS]


def _now_s() -> int:
    # wall-clock seconds: a session's age must mean the same on every process that reads it
    return int(utc_now().timestamp())


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
