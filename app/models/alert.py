"""Alert webhooks and their delivery log: one delivery per (webhook, event)."""

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, ForeignKey, Index, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, BigIntId, StrEnumType, UTCDateTime
from app.domain.alerts import AlertKind, DeliveryStatus, WebhookFormat


class AlertWebhook(Base):
    """Where alerts go. Disabled, never deleted: its deliveries stay in the log."""

    __tablename__ = "alert_webhooks"

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    url: Mapped[str] = mapped_column(String(2048))
    """May hold a secret itself (Slack's do): shown redacted only, ``scheme://host/…``."""
    secret: Mapped[str] = mapped_column(String(128))
    """The HMAC signing key, in clear because signing needs it; shown once, at creation."""
    format: Mapped[WebhookFormat] = mapped_column(StrEnumType(WebhookFormat, 16))
    kinds: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
    """The alert kinds it receives; None for all."""
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    disabled_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class AlertDelivery(Base):
    """One alert to one webhook, with its attempts; the UNIQUE pair is the deduplication."""

    __tablename__ = "alert_deliveries"
    __table_args__ = (
        UniqueConstraint("webhook_id", "dedup_key"),
        # Deliverers look for pending rows whose next attempt is due.
        Index("ix_alert_deliveries_status_next", "status", "next_attempt_at"),
    )

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    webhook_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("alert_webhooks.id"))
    kind: Mapped[AlertKind] = mapped_column(StrEnumType(AlertKind, 32))
    dedup_key: Mapped[str] = mapped_column(String(256))
    """Names the event (``budget:7:2026-12:80``); one delivery per webhook and key."""
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    """The body, rendered in the webhook's format when the alert was raised (read back
    whole, never queried inside: plain JSON)."""
    status: Mapped[DeliveryStatus] = mapped_column(StrEnumType(DeliveryStatus, 16))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    """Attempts started; a deliverer counts one when it claims the row, before sending."""
    next_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    """When the next attempt is due (UTC) while pending; while one is in flight, the end
    of the sender's claim. None once delivered or failed."""
    last_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    last_error: Mapped[str | None] = mapped_column(String(256), nullable=True)
    """Why the last attempt failed, short, with the URL redacted and no secrets."""
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
