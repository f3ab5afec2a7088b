"""Request dependencies for the caller's key: who is calling, and what they may see."""

from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from app.auth.service import Principal, authenticate
from app.deps import read_sessionmaker
from app.domain.errors import Forbidden, Unauthorized

_bearer = HTTPBearer(auto_error=False, description="An API key: `Authorization: Bearer slk_...`")
_header = APIKeyHeader(
    name="X-API-Key",
    auto_error=False,
    description="An API key, as an alternative to the bearer header.",
)


def get_principal(
    request: Request,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
    header: Annotated[str | None, Security(_header)],
) -> Principal:
    """The caller, from ``Authorization: Bearer <key>`` or ``X-API-Key: <key>``.

    The key is read in a short read-only transaction of its own, done before the endpoint
    runs: the request's session then begins where the endpoint first uses it (on SQLite a
    writer's ``BEGIN IMMEDIATE``), and an endpoint that writes through its own
    transaction (billing ingest, allocation runs) is not blocked by the request's.

    Raises:
        Unauthorized: If no key was sent, or the key is unknown or revoked.
    """
    secret = bearer.credentials if bearer is not None else header
    if not secret:
        raise Unauthorized(
            "missing API key: send `Authorization: Bearer <key>` (create keys "
            "with `specledger keys create`)"
        )
    with read_sessionmaker(request)() as session:
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
