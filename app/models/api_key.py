"""API keys: shown once at creation, stored as a SHA-256 hash with a short lookup prefix."""

from datetime import datetime

from sqlalchemy import Boolean, CheckConstraint, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, BigIntId, UTCDateTime


class ApiKey(Base):
    """A key with either admin scope or one team's scope (never both, never neither)."""

    __tablename__ = "api_keys"
    __table_args__ = (
        CheckConstraint(
            "(is_admin AND team IS NULL) OR (NOT is_admin AND team IS NOT NULL)",
            name="admin_xor_team",
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
    """The only team whose rows the key can read; None for admin keys."""
    is_admin: Mapped[bool] = mapped_column(Boolean)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
