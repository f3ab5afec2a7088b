"""Who a request is for: the proxy key decides, headers may only narrow (pure, no I/O).

A request presents a proxy key (``Authorization: Bearer slk_...`` or ``X-API-Key``). The
key's :class:`~app.domain.attribution.ProxyGrant` fixes the team and cost center; headers add
a session id and tags but cannot change the team, the cost center or the key's own tags. A
key marked as a trusted gateway may pass its end user's team and cost center on in
``X-Team`` / ``X-Cost-Center``, and the record's ``specledger.via`` tag says so. Without a
key, a request is refused, or, where the proxy allows anonymous use, billed to
:data:`~app.domain.attribution.UNATTRIBUTED` (and it may not name a team).
"""

from collections.abc import Mapping
from dataclasses import dataclass, field

from app.domain.attribution import (
    KEY_TAG,
    RESERVED_TAG_PREFIX,
    UNATTRIBUTED,
    VIA_TAG,
    ProxyGrant,
    parse_tags,
)
from app.domain.usage import SESSION_ID_MAX


class AttributionRefused(Exception):
    """A request the proxy will not bill: its HTTP status and OpenAI-style error code."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class Attribution:
    """Who a request is for."""

    session_id: str
    team: str | None = None
    cost_center: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    session_generated: bool = False
    """The client sent no session id; the proxy made one up and returns it."""
    grant: ProxyGrant | None = None
    """The key the request presented; None for an anonymous request."""


def _invalid(message: str) -> AttributionRefused:
    return AttributionRefused(400, "invalid_attribution", message)


def _forbidden(message: str) -> AttributionRefused:
    return AttributionRefused(403, "permission_denied", message)


def _header(name: str, value: str | None) -> str | None:
    value = (value or "").strip()
    if len(value) > SESSION_ID_MAX:
        raise _invalid(f"{name} is longer than {SESSION_ID_MAX} characters")
    return value or None


def attribute(
    grant: ProxyGrant | None,
    *,
    protected_tags: frozenset[str] = frozenset(),
    session_id: str | None,
    team: str | None,
    cost_center: str | None,
    tags_header: str | None,
    new_session_id: str,
) -> Attribution:
    """Attribution of a request that presented ``grant`` (None: no key, and the proxy allows
    anonymous requests), from its ``X-Session-Id``, ``X-Team``, ``X-Cost-Center`` and
    ``X-Tags`` header values (None when absent). ``protected_tags`` are the tag keys that
    some proxy key sets: only those keys' requests carry them, so a header cannot.

    Raises:
        AttributionRefused: 400 for a malformed header or a reserved tag; 401 for an
            anonymous request that names a team or cost center; 403 for a header that would
            change what the key decides.
    """
    given_session = _header("X-Session-Id", session_id)
    asked_team = _header("X-Team", team)
    asked_center = _header("X-Cost-Center", cost_center)
    try:
        asked_tags = parse_tags(tags_header)
    except ValueError as exc:
        raise _invalid(str(exc)) from None
    reserved = sorted(k for k in asked_tags if k.startswith(RESERVED_TAG_PREFIX))
    if reserved:
        raise _invalid(f"X-Tags key {reserved[0]!r}: tags starting {RESERVED_TAG_PREFIX!r} are "
                       "set by the proxy")  # fmt: skip
    if grant is None:
        if asked_team is not None or asked_center is not None:
            raise AttributionRefused(
                401,
                "invalid_api_key",
                "billing a team or cost center needs a proxy key: send `Authorization: "
                "Bearer <key>` (create one with `specledger keys create --proxy --team T`)",
            )
        billed_team, billed_center, via = UNATTRIBUTED, None, "anonymous"
    elif grant.gateway:
        billed_team = asked_team or grant.team
        billed_center = asked_center if asked_team or asked_center else grant.cost_center
        via = "gateway" if asked_team or asked_center else "key"
    else:
        if asked_team is not None and asked_team != grant.team:
            raise _forbidden(
                f"this key bills team {grant.team!r}; X-Team cannot change it (a trusted "
                "gateway key may pass its user's team on)"
            )
        if asked_center is not None and asked_center != grant.cost_center:
            raise _forbidden(
                f"this key bills cost center {grant.cost_center!r}; X-Cost-Center cannot change it"
            )
        billed_team, billed_center, via = grant.team, grant.cost_center, "key"
    own = grant.tags if grant is not None else {}
    taken = sorted(k for k in asked_tags if k in protected_tags and k not in own)
    if taken:
        raise _forbidden(f"tag {taken[0]!r} is set by proxy keys; X-Tags cannot set it")
    tags = dict(asked_tags)
    if grant is not None:
        for key, value in grant.tags.items():
            if tags.get(key, value) != value:
                raise _forbidden(f"this key sets tag {key}={value}; X-Tags cannot change it")
            tags[key] = value
        tags[KEY_TAG] = str(grant.key_id)
    tags[VIA_TAG] = via
    return Attribution(
        session_id=given_session or new_session_id,
        team=billed_team,
        cost_center=billed_center,
        tags=tags,
        session_generated=given_session is None,
        grant=grant,
    )
