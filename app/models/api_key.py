"""API keys and proxy keys: shown once at creation, stored as a SHA-256 hash with a short
lookup prefix."""

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, CheckConstraint, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, BigIntId, UTCDateTime


class ApiKey(Base):
    """A key with either admin scope or one team's scope (never both, never neither).

    ``purpose`` says where the key is presented: ``api`` keys read (and, for admins, change)
    the REST API; ``proxy`` keys are presented to the metering proxy, where the key, not a
    header, decides the team and cost center a request is billed to.
    """

    __tablename__ = "api_keys"
    __table_args__ = (
        CheckConstraint(
            "(is_admin AND team IS NULL) OR (NOT is_admin AND team IS NOT NULL)",
            name="admin_xor_team",
        ),
        CheckConstraint("purpose IN ('api', 'proxy')", name="purpose_known"),
        CheckConstraint(
            "purpose = 'proxy' OR (cost_center IS NULL AND tags IS NULL "
            "AND deployments IS NULL AND NOT is_gateway)",
            name="proxy_fields_only_on_proxy_keys",
        ),
    )

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    prefix: Mapped[str] = mapped_column(String(16), index=True)
    """The key's first characters, stored in clear to find its row (and to name it in lists)."""
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    """SHA-256 of the whole key, hex. Keys are 256-bit random tokens, so a fast hash is
    enough: there is no low-entropy secret to stretch."""
    name: Mapped[str] = mapped_column(String(128))
    team: Mapped[str | None] = mapped_column(String(128), nullable=True)
    """The only team whose rows the key can read (api) or bill (proxy); None for admin keys."""
    is_admin: Mapped[bool] = mapped_column(Boolean)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    purpose: Mapped[str] = mapped_column(String(16), server_default="api")
    cost_center: Mapped[str | None] = mapped_column(String(128), nullable=True)
    """Proxy keys: the cost center every request with the key is billed to."""
    tags: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    """Proxy keys: tags set on every request with the key; a header cannot change them."""
    deployments: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    """Proxy keys: the deployments the key may use; None means every deployment."""
    is_gateway: Mapped[bool] = mapped_column(Boolean, server_default="0")
    """Proxy keys: a trusted gateway, which may pass its end user's team and cost center on
    in ``X-Team`` / ``X-Cost-Center``; the usage record says it did."""
