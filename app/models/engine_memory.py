"""Draft-model memory measured from vLLM's start-up logs, per deployment (newest counts)."""

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, BigIntId, UTCDateTime
from app.models.billing import JsonType


class EngineMemory(Base):
    """One measurement: a start-up without the drafter against one with it
    (:func:`app.engine_health.rules.engine_memory.draft_memory`)."""

    __tablename__ = "engine_memory"

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    deployment_id: Mapped[int] = mapped_column(
        ForeignKey("deployments.id", ondelete="CASCADE"), index=True
    )
    measured_at: Mapped[datetime] = mapped_column(UTCDateTime())
    device: Mapped[str] = mapped_column(String(16))
    """vLLM's KV pool name: ``CPU`` or ``GPU``."""
    method: Mapped[str] = mapped_column(String(64))
    draft_model: Mapped[str | None] = mapped_column(String(1024), nullable=True)
    kv_tokens_without: Mapped[int] = mapped_column(BigInteger)
    kv_tokens_with: Mapped[int] = mapped_column(BigInteger)
    kv_bytes_without: Mapped[int] = mapped_column(BigInteger)
    kv_bytes_with: Mapped[int] = mapped_column(BigInteger)
    draft_bytes: Mapped[int] = mapped_column(BigInteger)
    """The target KV cache the drafter holds: ``(T0 - T1) * KV0 / T0``."""
    pool_bytes: Mapped[int] = mapped_column(BigInteger)
    """The replica's memory the share is of."""
    pool_basis: Mapped[str] = mapped_column(String(16))
    draft_weights_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    target_weights_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    max_model_len: Mapped[int] = mapped_column(Integer)
    figures: Mapped[dict[str, Any]] = mapped_column(JsonType)
    """Both logs' parsed figures and where they came from."""
