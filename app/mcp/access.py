"""Who an MCP call speaks for: the API key of the connection, checked as the REST API checks
it (:func:`app.auth.service.authenticate`), on every call, so a key revoked while a client
is connected stops working at its next call.

Over stdio the key comes from ``SPECLEDGER_MCP_KEY`` or a key file, read once at start; over
streamable HTTP from each request's ``Authorization: Bearer`` header. A key never appears in
an error message or a log line."""

import os
from collections.abc import Callable
from pathlib import Path

from sqlalchemy.orm import Session

from app.auth.service import Principal, authenticate
from app.domain.errors import Invalid, Unauthorized

KEY_ENV = "SPECLEDGER_MCP_KEY"

KeySource = Callable[[], str | None]
"""The key presented for the call in progress (None: no key was presented)."""


class KeyMissing(Invalid):
    """``specledger mcp`` was started without a key to present."""

    code = "missing_key"


def principal(session: Session, secret: str | None) -> Principal:
    """The principal ``secret`` stands for.

    Raises:
        Unauthorized: No key, or an unknown, revoked or proxy key.
    """
    if not secret:
        raise Unauthorized(
            f"no API key: set {KEY_ENV} or --key-file for stdio, or send "
            "`Authorization: Bearer <key>` over HTTP (create keys with `specledger keys create`)"
        )
    found = authenticate(session, secret.strip())
    if found is None:
        raise Unauthorized("invalid or revoked API key")
    return found


def stdio_key(key_file: Path | None, environ: dict[str, str] | None = None) -> str:
    """The key a stdio server presents: the key file's first line, else ``SPECLEDGER_MCP_KEY``.

    Raises:
        KeyMissing: Neither holds a key, or the key file cannot be read.
    """
    if key_file is not None:
        try:
            lines = key_file.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise KeyMissing(
                f"--key-file {key_file}: cannot read it ({type(exc).__name__})"
            ) from None
        secret = lines[0].strip() if lines else ""
        if not secret:
            raise KeyMissing(f"--key-file {key_file}: its first line holds no key")
        return secret
    secret = (os.environ if environ is None else environ).get(KEY_ENV, "").strip()
    if not secret:
        raise KeyMissing(
            f"no API key: set {KEY_ENV} or give --key-file (a file whose first line is the "
            "key); create one with `specledger keys create --team TEAM` or `--admin`"
        )
    return secret
