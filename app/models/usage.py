"""Per-request usage, written by the metering proxy (or loaded from its JSONL files)."""

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, Index, Integer, String, Text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, BigIntId, UTCDateTime
from app.models.billing import JsonType

_HISTOGRAM = JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")
"""JsonType that stores None as SQL NULL (not JSON ``null``), so ``IS NOT NULL`` finds the
records that have a histogram."""


class UsageRecord(Base):
    """One request through the proxy: who, what, how fast, how much speculation, GPU time."""

    __tablename__ = "usage_records"
    __table_args__ = (
        Index("ix_usage_records_deployment_finished", "deployment", "finished_at"),
        Index("ix_usage_records_session", "session_id"),
        Index("ix_usage_records_team_arrived", "team", "arrived_at"),
    )

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    event_id: Mapped[str] = mapped_column(String(64), unique=True)
    """Idempotency key: writing the same event twice keeps the first."""
    session_id: Mapped[str] = mapped_column(String(128))
    team: Mapped[str | None] = mapped_column(String(128), nullable=True)
    cost_center: Mapped[str | None] = mapped_column(String(128), nullable=True)
    tags: Mapped[dict[str, Any]] = mapped_column(JsonType, default=dict)
    deployment: Mapped[str] = mapped_column(String(128))
    replica: Mapped[str] = mapped_column(String(128))
    model: Mapped[str] = mapped_column(String(256))
    endpoint: Mapped[str] = mapped_column(String(32))
    """``completions`` or ``chat.completions``."""
    streamed: Mapped[bool] = mapped_column(Boolean, default=False)
    spec_method: Mapped[str] = mapped_column(String(32))
    """``none``, ``ngram``, ``draft_model``, ... as configured on the replica."""
    spec_k: Mapped[int | None] = mapped_column(Integer, nullable=True)

    arrived_at: Mapped[datetime] = mapped_column(UTCDateTime())
    """When the proxy received the request (UTC)."""
    first_token_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    finished_at: Mapped[datetime] = mapped_column(UTCDateTime())
    """When the last byte went to the client, or the request failed or was cancelled."""

    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cached_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    num_drafts: Mapped[int] = mapped_column(Integer, default=0)
    draft_tokens: Mapped[int] = mapped_column(Integer, default=0)
    accepted_tokens: Mapped[int] = mapped_column(Integer, default=0)
    accepted_hist: Mapped[list[int] | None] = mapped_column(_HISTOGRAM, nullable=True)
    """vLLM's per-request ``acceptance_histogram``: ``k + 1`` counts, entry ``j`` the
    verification steps that accepted exactly ``j`` drafted tokens (bonus token excluded);
    None when the server did not report it."""

    gpu_ns: Mapped[int] = mapped_column(BigInteger, default=0)
    """GPU-nanoseconds allocated to the request by the proxy's meter (GPUs x wall time)."""
    concurrency: Mapped[int] = mapped_column(Integer, default=1)
    """Requests in flight on the replica when this one arrived, itself included."""
    status: Mapped[str] = mapped_column(String(16))
    """``ok``, ``error`` or ``cancelled``."""
    http_status: Mapped[int | None] = mapped_column(Integer, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)


class ReplicaIdle(Base):
    """GPU time with no request in flight, per replica and metering interval, so that
    requests + idle = GPUs x wall time holds in the database too."""

    __tablename__ = "replica_idle"
    __table_args__ = (Index("ix_replica_idle_replica_start", "deployment", "replica", "start_at"),)

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    deployment: Mapped[str] = mapped_column(String(128))
    replica: Mapped[str] = mapped_column(String(128))
    start_at: Mapped[datetime] = mapped_column(UTCDateTime())
    end_at: Mapped[datetime] = mapped_column(UTCDateTime())
    gpu_ns: Mapped[int] = mapped_column(BigInteger)
