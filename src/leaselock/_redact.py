"""Redaction: keep passwords out of every line leaselock logs."""

from __future__ import annotations

import re

__all__ = ["redact_secrets"]

# the password runs to the LAST "@" of the authority: an unescaped "@" may sit inside it
_URL_PASSWORD = re.compile(r"(?P<head>[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*:)[^\s/?#]*@")
_KEYWORD_PASSWORD = re.compile(
    r"(?P<head>\bpassword\s*=\s*)('[^']*'|\"[^\"]*\"|[^\s,)]+)", re.IGNORECASE
)


def redact_secrets(text: str) -> str:
    """Return ``text`` with URL passwords and ``password=`` values replaced by ``***``."""
    text = _URL_PASSWORD.sub(r"\g<head>***@", text)
    return _KEYWORD_PASSWORD.sub(r"\g<head>***", text)
