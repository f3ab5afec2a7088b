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

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.domain.attribution import RESERVED_TAG_PREFIX, ProxyGrant
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


@dataclass(frozen=True, slots=True)
class ProxyKeyOptions:
    """What a proxy key decides beyond its team (see :class:`ProxyGrant`)."""

    cost_center: str | None = None
    tags: dict[str, str] | None = None
    deployments: tuple[str, ...] | None = None
    gateway: bool = False


def create_key(
    session: Session,
    *,
    team: str | None,
    admin: bool,
    name: str | None = None,
    proxy: ProxyKeyOptions | None = None,
    now: datetime | None = None,
) -> CreatedKey:
    """Create a key with admin scope or one team's scope; with ``proxy``, a proxy key (one
    team's, presented to the metering proxy, which bills that team).

    Raises:
        ApiKeyError: If both or neither of ``team`` and ``admin`` are given, a proxy key
            has no team, or a proxy tag uses the reserved prefix.
    """
    team = (team or "").strip() or None  # a blank team is no team, never "every team"
    if admin == (team is not None):
        raise ApiKeyError(
            "a key has either admin scope or one team's scope: give exactly one "
            "of --admin and --team"
        )
    if proxy is not None and admin:
        raise ApiKeyError("a proxy key bills one team: give --team, not --admin")
    reserved = [k for k in (proxy.tags or {}) if k.startswith(RESERVED_TAG_PREFIX)] if proxy else []
    if reserved:
        raise ApiKeyError(f"tag {reserved[0]!r}: tags starting {RESERVED_TAG_PREFIX!r} are the "
                          "proxy's own")  # fmt: skip
    secret = KEY_MARK + secrets.token_urlsafe(32)
    default_name = "admin" if admin else f"{'proxy' if proxy else 'team'} {team}"
    record = ApiKey(
        prefix=secret[:PREFIX_LENGTH],
        key_hash=hash_key(secret),
        name=name or default_name,
        team=team,
        is_admin=admin,
        created_at=now or datetime.now(UTC),
        purpose="proxy" if proxy else "api",
        is_gateway=bool(proxy and proxy.gateway),
    )
    if proxy is not None:
        record.cost_center = (proxy.cost_center or "").strip() or None
        record.tags = dict(proxy.tags) if proxy.tags else None
        record.deployments = sorted(proxy.deployments) if proxy.deployments else None
    session.add(record)
    session.flush()
    return CreatedKey(record, secret)


def proxy_grants(session: Session) -> dict[str, ProxyGrant]:
    """Every live proxy key's grant, by the SHA-256 of the key (what the proxy looks up)."""
    keys = session.scalars(
        select(ApiKey).where(ApiKey.purpose == "proxy", ApiKey.revoked_at.is_(None))
    )
    return {
        key.key_hash: ProxyGrant(
            key_id=key.id,
            name=key.name,
            team=key.team or "",
            cost_center=key.cost_center,
            tags={str(k): str(v) for k, v in (key.tags or {}).items()},
            deployments=frozenset(map(str, key.deployments)) if key.deployments else None,
            gateway=key.is_gateway,
        )
        for key in keys
    }


def keys_fingerprint(session: Session) -> tuple[object, ...]:
    """Changes whenever a key is created or revoked: the proxy reloads its grants then."""
    row = session.execute(
        select(func.count(), func.max(ApiKey.id), func.count(ApiKey.revoked_at))
    ).one()
    return tuple(row)


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
    """The principal a presented API key stands for, or None for an unknown or revoked key,
    or a proxy key (those bill usage at the proxy; they do not read the API)."""
    if not secret.startswith(KEY_MARK) or len(secret) < PREFIX_LENGTH + 8:
        return None
    digest = hash_key(secret)
    candidates = session.scalars(
        select(ApiKey).where(
            ApiKey.prefix == secret[:PREFIX_LENGTH],
            ApiKey.revoked_at.is_(None),
            ApiKey.purpose == "api",
        )
    )
    for key in candidates:
        if hmac.compare_digest(key.key_hash, digest):
            return Principal(key_id=key.id, name=key.name, team=key.team, is_admin=key.is_admin)
    return None
