"""Request dependencies: settings, engine, one session per request, and the caller's key."""

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from app.auth.service import Principal, authenticate
from app.errors import Forbidden, Unauthorized
from app.settings import Settings


def get_settings_dep(request: Request) -> Settings:
    settings: Settings = request.state.settings
    return settings


def get_engine(request: Request) -> Engine:
    """The app's engine, for services that run their own transaction (allocation, ingest)."""
    engine: Engine = request.state.engine
    return engine


def get_session(request: Request) -> Iterator[Session]:
    """One session per request: commit if the endpoint returned, roll back if it raised."""
    with request.state.sessionmaker() as session:
        try:
            yield session
        except Exception:
            session.rollback()
            raise
        else:
            session.commit()


def get_now() -> datetime:
    """The current instant; overridden in tests that need a fixed clock."""
    return datetime.now(UTC)


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
EngineDep = Annotated[Engine, Depends(get_engine)]
# scope="function": commit before the response is sent, so a client that reads its own
# write right after the response sees it (FastAPI >= 0.121).
SessionDep = Annotated[Session, Depends(get_session, scope="function")]
NowDep = Annotated[datetime, Depends(get_now)]

_bearer = HTTPBearer(auto_error=False, description="An API key: `Authorization: Bearer slk_...`")
_header = APIKeyHeader(
    name="X-API-Key",
    auto_error=False,
    description="An API key, as an alternative to the bearer header.",
)


def get_principal(
    session: SessionDep,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
    header: Annotated[str | None, Security(_header)],
) -> Principal:
    """The caller, from ``Authorization: Bearer <key>`` or ``X-API-Key: <key>``.

    Raises:
        Unauthorized: If no key was sent, or the key is unknown or revoked.
    """
    secret = bearer.credentials if bearer is not None else header
    if not secret:
        raise Unauthorized(
            "missing API key: send `Authorization: Bearer <key>` (create keys "
            "with `specledger keys create`)"
        )
    principal = authenticate(session, secret.strip())
    if principal is None:
        raise Unauthorized("invalid or revoked API key")
    return principal


PrincipalDep = Annotated[Principal, Depends(get_principal)]


def require_admin(principal: PrincipalDep) -> Principal:
    """The caller, who must hold an admin key.

    Raises:
        Forbidden: For a team key.
    """
    if not principal.is_admin:
        raise Forbidden("this endpoint needs an admin key")
    return principal


AdminDep = Annotated[Principal, Depends(require_admin)]


def team_scope(principal: Principal, requested: str | None) -> str | None:
    """The team whose rows a request may see: a team key's own team always; for an admin,
    the team asked for, or None (every team).

    Raises:
        Forbidden: If a team key asks for another team.
    """
    if principal.is_admin:
        return requested
    if requested is not None and requested != principal.team:
        raise Forbidden("a team key can only read its own team's data")
    return principal.team
