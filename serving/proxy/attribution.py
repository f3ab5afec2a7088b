"""Who a request is for, from the proxy's attribution headers: pure, no I/O."""

from collections.abc import Mapping
from dataclasses import dataclass, field

from app.domain.usage import SESSION_ID_MAX


def parse_tags(header: str | None) -> dict[str, str]:
    """Parse an ``X-Tags: k=v,k2=v2`` header.

    Raises:
        ValueError: On an item without ``=``, an empty key, or a key or value over
            :data:`SESSION_ID_MAX` characters.
    """
    tags: dict[str, str] = {}
    if not header:
        return tags
    for item in header.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise ValueError(f"X-Tags item {item.strip()!r} is not key=value")
        if len(key) > SESSION_ID_MAX or len(value) > SESSION_ID_MAX:
            raise ValueError(f"X-Tags item {key!r} is longer than {SESSION_ID_MAX} characters")
        tags[key] = value
    return tags


@dataclass(frozen=True, slots=True)
class Attribution:
    """Who a request is for, from the proxy's request headers."""

    session_id: str
    team: str | None = None
    cost_center: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    session_generated: bool = False
    """The client sent no session id; the proxy made one up and returns it."""


def make_attribution(
    *,
    session_id: str | None,
    team: str | None,
    cost_center: str | None,
    tags_header: str | None,
    new_session_id: str,
) -> Attribution:
    """Attribution from the ``X-Session-Id``, ``X-Team``, ``X-Cost-Center`` and ``X-Tags``
    header values (None when absent).

    Args:
        session_id: The client's session id; blank or absent means ``new_session_id``.
        team: Team to charge.
        cost_center: Cost center to charge.
        tags_header: ``k=v,k2=v2`` tags.
        new_session_id: The id to use when the client sent none.

    Raises:
        ValueError: If a value is longer than :data:`SESSION_ID_MAX` or the tags are malformed.
    """
    for header, value in (
        ("X-Session-Id", session_id),
        ("X-Team", team),
        ("X-Cost-Center", cost_center),
    ):
        if value is not None and len(value.strip()) > SESSION_ID_MAX:
            raise ValueError(f"{header} is longer than {SESSION_ID_MAX} characters")
    given = (session_id or "").strip()
    return Attribution(
        session_id=given or new_session_id,
        team=(team or "").strip() or None,
        cost_center=(cost_center or "").strip() or None,
        tags=parse_tags(tags_header),
        session_generated=not given,
    )
