"""Signing in to a token dashboard, and out: the token and a name, then a signed session.

The sign-in form carries a CSRF token too (of a session made for it, with nobody signed in):
no other site can sign a browser in under a name of its choosing. Every refusal is logged with
the client's address.
"""

from __future__ import annotations

from ._auth import Guard, clean_name
from ._http import Receive, Request, Send, read_form, send_page, send_redirect
from ._layout import Frame, login_page, message_page

__all__ = ["sign_in", "sign_out"]


async def sign_in(
    guard: Guard, frame: Frame, request: Request, receive: Receive, send: Send
) -> None:
    """Serve ``/login``: the form (GET), or its check (POST) and the signed-in session."""
    if guard.mode != "token":
        await send_redirect(send, request.url("/"))
        return
    failed = False
    if request.method == "POST":
        fields = await read_form(receive) or {}
        name = clean_name(fields.get("name", ""))
        if not guard.csrf_ok(request, fields.get("csrf")):
            guard.refused(request, "a sign-in without a valid CSRF token")
        elif guard.token_ok(fields.get("token")) and name:
            signed_in = guard.new_session(name)
            await send_redirect(send, request.url("/"), cookies=[guard.cookie(request, signed_in)])
            return
        else:
            guard.refused(request, f"a sign-in as {name!r}: wrong token")
        failed = True
    # a session before signing in: its nonce makes the sign-in form's CSRF token. The one the
    # browser has, if any: a second GET (another tab, a favicon's redirect) must not change the
    # token of a form already shown
    session = guard.session(request) or guard.new_session()
    html = login_page(frame, guard.csrf_token(session), failed=failed)
    cookie = guard.cookie(request, session)
    await send_page(send, html, status=403 if failed else 200, cookies=[cookie])


async def sign_out(
    guard: Guard, frame: Frame, request: Request, receive: Receive, send: Send
) -> None:
    """Serve ``/logout`` (POST, with the session's CSRF token): forget the session."""
    fields = await read_form(receive) or {}
    if guard.csrf_ok(request, fields.get("csrf")):
        await send_redirect(send, request.url("/login"), cookies=[guard.cookie(request, None)])
        return
    line = "Reload the page to sign out."
    await send_page(send, message_page(frame, "Not allowed", line), status=403)
