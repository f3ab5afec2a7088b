"""Webhooks (add, list, disable), raising alerts, and the delivery log.

:func:`enqueue` is an outbox: it only writes delivery rows, in the caller's transaction, so
an alert raised by work that is rolled back is never sent. :mod:`app.alerts.delivery` sends
them later. A webhook's signing secret is returned once, by :func:`add_webhook`; listings
and the log carry the URL redacted (``scheme://host/…``) and never the secret.
"""

import secrets
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from app.domain.alerts import (
    Alert,
    AlertKind,
    DeliveryStatus,
    WebhookFormat,
    parse_kinds,
    receives,
    redact_url,
    render_payload,
    validate_webhook_url,
)
from app.domain.errors import Conflict, Invalid, NotFound
from app.models.alert import AlertDelivery, AlertWebhook

SECRET_MARK = "whsec_"
MAX_NAME = 128


class WebhookNotFound(NotFound):
    code = "webhook_not_found"


class WebhookExists(Conflict):
    code = "webhook_exists"


class WebhookDisabled(Conflict):
    code = "webhook_disabled"


@dataclass(frozen=True, slots=True)
class WebhookInfo:
    """A webhook as it may be shown: URL redacted, no secret."""

    id: int
    name: str
    url: str
    """``scheme://host[:port]/…`` only."""
    format: WebhookFormat
    kinds: list[str] | None
    created_at: datetime
    disabled_at: datetime | None

    @classmethod
    def of(cls, hook: AlertWebhook) -> "WebhookInfo":
        return cls(
            id=hook.id,
            name=hook.name,
            url=redact_url(hook.url),
            format=hook.format,
            kinds=list(hook.kinds) if hook.kinds is not None else None,
            created_at=hook.created_at,
            disabled_at=hook.disabled_at,
        )


@dataclass(frozen=True, slots=True)
class CreatedWebhook:
    webhook: WebhookInfo
    secret: str = field(repr=False)
    """The signing secret: shown once. Receivers verify requests with it."""


def add_webhook(
    session: Session,
    *,
    name: str,
    url: str,
    format: WebhookFormat | str = WebhookFormat.json,
    kinds: list[str] | None = None,
    now: datetime,
) -> CreatedWebhook:
    """Register a webhook and generate its signing secret.

    Args:
        name: Unique label (1 to 128 characters).
        url: Absolute http(s) URL; it may itself be secret (Slack's are).
        format: ``json`` (SpecLedger's body) or ``slack`` (``{"text", "blocks"}``).
        kinds: Alert kinds it receives (names, comma-separated allowed); None or empty: all.
        now: Creation time, aware.

    Raises:
        InvalidWebhook: For a bad URL, format or kind.
        WebhookExists: If the name is taken (by an enabled or a disabled webhook).
    """
    name = name.strip()
    if not name or len(name) > MAX_NAME or any(c.isspace() or ord(c) < 32 for c in name):
        raise Invalid(f"a webhook name is 1 to {MAX_NAME} characters without spaces")
    url = validate_webhook_url(url)
    try:
        fmt = WebhookFormat(format)
    except ValueError:
        raise Invalid(
            f"unknown format {format!r}; choose from {', '.join(WebhookFormat)}"
        ) from None
    subscribed = parse_kinds(kinds)
    if session.scalar(select(AlertWebhook.id).where(AlertWebhook.name == name)) is not None:
        raise WebhookExists(f"a webhook named {name!r} exists already (perhaps disabled)")
    secret = SECRET_MARK + secrets.token_urlsafe(32)
    hook = AlertWebhook(
        name=name,
        url=url,
        secret=secret,
        format=fmt,
        kinds=[k.value for k in subscribed] if subscribed else None,
        created_at=now,
    )
    session.add(hook)
    session.flush()
    return CreatedWebhook(WebhookInfo.of(hook), secret)


def list_webhooks(session: Session, *, include_disabled: bool = False) -> list[WebhookInfo]:
    query = select(AlertWebhook).order_by(AlertWebhook.id)
    if not include_disabled:
        query = query.where(AlertWebhook.disabled_at.is_(None))
    return [WebhookInfo.of(h) for h in session.scalars(query)]


def get_webhook(session: Session, name: str) -> AlertWebhook:
    """The webhook named ``name`` (enabled or not).

    Raises:
        WebhookNotFound: If there is none.
    """
    hook = session.scalar(select(AlertWebhook).where(AlertWebhook.name == name.strip()))
    if hook is None:
        raise WebhookNotFound(
            f"no webhook named {name!r}; see `specledger alerts webhooks list --all`"
        )
    return hook


def disable_webhook(session: Session, name: str, *, now: datetime) -> WebhookInfo:
    """Stop sending to a webhook: it receives no new alerts, and its pending deliveries
    fail with "webhook disabled". Disabling twice is harmless.

    Raises:
        WebhookNotFound: If there is no such webhook.
    """
    hook = get_webhook(session, name)
    if hook.disabled_at is None:
        hook.disabled_at = now
        # A delivery being sent right now keeps its claim; its sender records nothing once
        # the row is no longer pending, so the log says failed even if that POST arrived.
        session.execute(
            update(AlertDelivery)
            .where(
                AlertDelivery.webhook_id == hook.id,
                AlertDelivery.status == DeliveryStatus.pending,
            )
            .values(
                status=DeliveryStatus.failed, next_attempt_at=None, last_error="webhook disabled"
            )
        )
        session.flush()
    return WebhookInfo.of(hook)


def enqueue(session: Session, alert: Alert, now: datetime) -> int:
    """Raise an alert: one pending delivery per enabled webhook that receives its kind.

    Deduplicated on (webhook, ``alert.dedup_key``): raising the same event again creates
    nothing, even from two transactions at once (INSERT … ON CONFLICT DO NOTHING). A
    webhook added later does get an event raised again after it was added. Nothing is
    sent here: run :func:`app.alerts.delivery.deliver_due` (``specledger alerts deliver``).

    Args:
        session: The caller's unit of work; the rows commit (or roll back) with it.
        alert: What happened.
        now: When it is raised, aware; the first attempt is due then.

    Returns:
        How many deliveries were created (0 when every one existed already).
    """
    hooks = session.scalars(
        select(AlertWebhook).where(AlertWebhook.disabled_at.is_(None)).order_by(AlertWebhook.id)
    )
    rows = [
        {
            "webhook_id": hook.id,
            "kind": alert.kind,
            "dedup_key": alert.dedup_key,
            "payload": render_payload(alert, hook.format),
            "status": DeliveryStatus.pending,
            "attempts": 0,
            "next_attempt_at": now,
            "created_at": now,
        }
        for hook in hooks
        if receives(hook.kinds, alert.kind)
    ]
    if not rows:
        return 0
    return len(_insert_new(session, rows))


def _insert_new(session: Session, rows: list[dict[str, object]]) -> list[int]:
    """Insert deliveries, skipping (webhook, dedup_key) pairs that exist; the new ids.
    (SpecLedger runs on SQLite and PostgreSQL; both have ON CONFLICT and RETURNING.)"""
    table = AlertDelivery.__table__
    dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    statement = (
        dialect.insert(table)
        .values(rows)
        .on_conflict_do_nothing(index_elements=["webhook_id", "dedup_key"])
        .returning(table.c.id)
    )
    return list(session.scalars(statement))


def create_test_delivery(
    session: Session, hook: AlertWebhook, alert: Alert, *, now: datetime
) -> int:
    """A delivery of ``alert`` to ``hook`` alone, whatever its kinds; its id.

    Raises:
        WebhookDisabled: If the webhook is disabled.
    """
    if hook.disabled_at is not None:
        raise WebhookDisabled(f"webhook {hook.name!r} is disabled")
    delivery = AlertDelivery(
        webhook_id=hook.id,
        kind=alert.kind,
        dedup_key=alert.dedup_key,
        payload=render_payload(alert, hook.format),
        status=DeliveryStatus.pending,
        attempts=0,
        next_attempt_at=now,
        created_at=now,
    )
    session.add(delivery)
    session.flush()
    return delivery.id


@dataclass(frozen=True, slots=True)
class DeliveryLogEntry:
    id: int
    webhook: str
    url: str
    """Redacted: ``scheme://host[:port]/…``."""
    kind: AlertKind
    dedup_key: str
    status: DeliveryStatus
    attempts: int
    next_attempt_at: datetime | None
    last_attempt_at: datetime | None
    delivered_at: datetime | None
    last_error: str | None
    created_at: datetime


def delivery_log(
    session: Session,
    *,
    status: DeliveryStatus | None = None,
    webhook: str | None = None,
    kind: AlertKind | None = None,
    limit: int = 100,
) -> list[DeliveryLogEntry]:
    """Deliveries, newest first, optionally of one status, webhook or kind."""
    query = (
        select(AlertDelivery, AlertWebhook.name, AlertWebhook.url)
        .join(AlertWebhook, AlertWebhook.id == AlertDelivery.webhook_id)
        .order_by(AlertDelivery.id.desc())
        .limit(limit)
    )
    if status is not None:
        query = query.where(AlertDelivery.status == status)
    if webhook is not None:
        query = query.where(AlertWebhook.name == webhook)
    if kind is not None:
        query = query.where(AlertDelivery.kind == kind)
    return [
        DeliveryLogEntry(
            id=d.id,
            webhook=name,
            url=redact_url(url),
            kind=d.kind,
            dedup_key=d.dedup_key,
            status=d.status,
            attempts=d.attempts,
            next_attempt_at=d.next_attempt_at,
            last_attempt_at=d.last_attempt_at,
            delivered_at=d.delivered_at,
            last_error=d.last_error,
            created_at=d.created_at,
        )
        for d, name, url in session.execute(query)
    ]
