"""API keys: create (the secret is returned once), list, revoke, and authenticate requests.

A key is ``slk_`` followed by 43 URL-safe characters (256 random bits). The database keeps
its first 12 characters, to find the row and to name the key in listings, and the SHA-256
of the whole key; the key itself is never stored.
"""

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.errors import Invalid
from app.models import ApiKey

KEY_MARK = "slk_"
PREFIX_LENGTH = 12


class ApiKeyError(Invalid):
    """A key operation that cannot be done (unknown key, bad scope)."""

    code = "invalid_key_request"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: an admin, or one team."""

    key_id: int
    name: str
    team: str | None
    is_admin: bool


@dataclass(frozen=True, slots=True)
class CreatedKey:
    record: ApiKey
    secret: str
    """The key itself: shown once, never stored."""


def hash_key(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def create_key(
    session: Session,
    *,
    team: str | None,
    admin: bool,
    name: str | None = None,
    now: datetime | None = None,
) -> CreatedKey:
    """Create a key with admin scope or one team's scope.

    Raises:
        ApiKeyError: If both or neither of ``team`` and ``admin`` are given.
    """
    team = team.strip() if team else None
    if admin == (team is not None):
        raise ApiKeyError(
            "a key has either admin scope or one team's scope: give exactly one "
            "of --admin and --team"
        )
    secret = KEY_MARK + secrets.token_urlsafe(32)
    record = ApiKey(
        prefix=secret[:PREFIX_LENGTH],
        key_hash=hash_key(secret),
        name=name or ("admin" if admin else f"team {team}"),
        team=team,
        is_admin=admin,
        created_at=now or datetime.now(UTC),
    )
    session.add(record)
    session.flush()
    return CreatedKey(record, secret)


def list_keys(session: Session, *, include_revoked: bool = False) -> list[ApiKey]:
    query = select(ApiKey).order_by(ApiKey.id)
    if not include_revoked:
        query = query.where(ApiKey.revoked_at.is_(None))
    return list(session.scalars(query))


def revoke_key(session: Session, ident: str, *, now: datetime | None = None) -> ApiKey:
    """Revoke a key named by its id or its prefix; revoking twice is harmless.

    Raises:
        ApiKeyError: If no key, or more than one, matches.
    """
    query = select(ApiKey)
    query = (
        query.where(ApiKey.id == int(ident))
        if ident.isdigit()
        else query.where(ApiKey.prefix == ident[:PREFIX_LENGTH])
    )
    matches = list(session.scalars(query))
    if len(matches) != 1:
        raise ApiKeyError(
            f"{'no' if not matches else 'more than one'} key matches {ident!r}; "
            "give its id or prefix from `specledger keys list`"
        )
    key = matches[0]
    if key.revoked_at is None:
        key.revoked_at = now or datetime.now(UTC)
        session.flush()
    return key


def authenticate(session: Session, secret: str) -> Principal | None:
    """The principal a presented key stands for, or None for an unknown or revoked key."""
    if not secret.startswith(KEY_MARK) or len(secret) < PREFIX_LENGTH + 8:
        return None
    digest = hash_key(secret)
    candidates = session.scalars(
        select(ApiKey).where(ApiKey.prefix == secret[:PREFIX_LENGTH], ApiKey.revoked_at.is_(None))
    )
    for key in candidates:
        if hmac.compare_digest(key.key_hash, digest):
            return Principal(key_id=key.id, name=key.name, team=key.team, is_admin=key.is_admin)
    return None
