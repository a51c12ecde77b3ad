"""The dashboard's pages around their live part: the frame, sign-in, confirmations, messages.

Server-rendered HTML that works without script: links and forms do everything, and the page's
script (``dashboard.js``) only keeps the live part and the relative times current. Readable
on a phone (one column under 700 px, tables turn into cards) and in dark mode (the system's
choice, ``prefers-color-scheme``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, final

from ._text import esc, said
from ._watch import Page

__all__ = ["Frame", "confirm_page", "frame", "login_page", "message_page"]

NAV: Final[tuple[tuple[Page, str, str], ...]] = (
    ("locks", "/", "Locks"),
    ("jobs", "/jobs", "Jobs"),
    ("timeline", "/timeline", "Timeline"),
)


@final
@dataclass(frozen=True, slots=True)
class Frame:
    """What every page shows around its content: where it is, who looks, what they may do.

    Attributes:
        root: the mount point, every link's start.
        title: the dashboard's title.
        store: the store, passwords redacted.
        mode: ``read-only``, ``token`` or ``host``.
        operator: who is signed in, or ``None``.
        csrf: the CSRF token of this session's forms, or ``None`` without a session.
        flash: the outcome of the last action, shown once.
    """

    root: str
    title: str
    store: str
    mode: str
    operator: str | None
    csrf: str | None
    flash: str | None = None


def frame(context: Frame, page: Page | None, heading: str, body: str) -> str:
    """Return a whole page: header, navigation, who is signed in, then ``body``."""
    root = context.root
    current = ' aria-current="page"'
    nav = "".join(
        f'<a href="{esc(root + path)}"{current if name == page else ""}>{label}</a>'
        for name, path, label in NAV
    )
    flash = f'<p class="flash" role="status">{said(context.flash)}</p>' if context.flash else ""
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="color-scheme" content="light dark">'
        f"<title>{esc(heading)} · {esc(context.title)}</title>"
        # no icon: a browser asks for none (the sign-in page's session stays the one it made)
        '<link rel="icon" href="data:,">'
        f'<link rel="stylesheet" href="{esc(root)}/static/dashboard.css">'
        f'<script src="{esc(root)}/static/dashboard.js" defer></script>'
        # without script, the page reads itself again every 5 s
        '<noscript><meta http-equiv="refresh" content="5"></noscript>'
        "</head><body>"
        f'<header><a class="brand" href="{esc(root)}/">{esc(context.title)}</a>'
        f'<nav aria-label="Pages">{nav}</nav>{_who(context)}</header>'
        f'<main><p class="store">Store: <code>{said(context.store)}</code></p>{flash}'
        f"<h1>{esc(heading)}</h1>{body}</main></body></html>\n"
    )


def _who(context: Frame) -> str:
    if context.mode == "read-only":
        return (
            '<p class="who" title="No token is configured: nobody can act from this page">'
            "read-only</p>"
        )
    if context.operator is None:
        return ""
    sign_out = ""
    if context.mode == "token" and context.csrf is not None:
        sign_out = (
            f'<form method="post" action="{esc(context.root)}/logout">'
            f'<input type="hidden" name="csrf" value="{esc(context.csrf)}">'
            '<button class="link">Sign out</button></form>'
        )
    return (
        f'<div class="who"><span>Signed in as <b>{esc(context.operator)}</b></span>{sign_out}</div>'
    )


def login_page(context: Frame, csrf: str, *, failed: bool) -> str:
    """Return the sign-in page: the dashboard's token, and a name for the audit trail."""
    wrong = (
        '<p class="error" role="alert">That is not the token. Ask whoever runs this '
        "application for it.</p>"
        if failed
        else ""
    )
    body = (
        f"{wrong}<p>This dashboard breaks locks and pauses jobs for every instance: sign in "
        "with its token. Your name goes into the audit trail of everything you do here.</p>"
        f'<form class="stack" method="post" action="{esc(context.root)}/login">'
        f'<input type="hidden" name="csrf" value="{esc(csrf)}">'
        '<label>Token <input type="password" name="token" required autocomplete="current-password">'
        "</label>"
        '<label>Your name <input name="name" required maxlength="80" autocomplete="username" '
        'placeholder="alice"></label>'
        "<button>Sign in</button></form>"
    )
    return frame(context, None, "Sign in", body)


def confirm_page(
    context: Frame,
    *,
    heading: str,
    explain: Sequence[str],
    fields: dict[str, str],
    inputs: str = "",
    confirm: str,
    back: str,
) -> str:
    """Return a confirmation: what will happen, then one button that does it, one that does not.

    ``fields`` are hidden form fields (the action and its target); ``inputs`` any fields the
    operator fills in (a pause's note).
    """
    hidden = "".join(
        f'<input type="hidden" name="{esc(name)}" value="{esc(value)}">'
        for name, value in {**fields, "csrf": context.csrf or ""}.items()
    )
    paragraphs = "".join(f"<p>{line}</p>" for line in explain)
    body = (
        f'<div class="confirm">{paragraphs}'
        f'<form class="stack" method="post" action="{esc(context.root)}/act">{hidden}{inputs}'
        f'<div class="buttons"><button class="danger">{esc(confirm)}</button>'
        f'<a class="button" href="{esc(back)}">Cancel</a></div></form></div>'
    )
    return frame(context, None, heading, body)


def message_page(context: Frame, heading: str, line: str, *, back: str | None = None) -> str:
    """Return a page of one clear line (a refusal, a missing page): no traceback, ever."""
    link = f'<p><a href="{esc(back)}">Back</a></p>' if back else ""
    return frame(context, None, heading, f'<p class="error" role="alert">{said(line)}</p>{link}')
