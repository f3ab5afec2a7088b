"""Load sweeps of speculation settings against concurrency (input to the breakeven fit)."""

from datetime import datetime
from typing import Any

from sqlalchemy import Float, ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, BigIntId, UTCDateTime
from app.models.billing import JsonType


class Sweep(Base):
    __tablename__ = "sweeps"

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(256))
    deployment: Mapped[str | None] = mapped_column(String(128), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    settings: Mapped[dict[str, Any]] = mapped_column(JsonType, default=dict)
    fit: Mapped[dict[str, Any] | None] = mapped_column(JsonType, nullable=True)
    """The breakeven fit of this sweep, as ``specledger breakeven fit --json`` prints it."""


class SweepPointRecord(Base):
    """One (speculation config, concurrency) measurement."""

    __tablename__ = "sweep_points"

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    sweep_id: Mapped[int] = mapped_column(ForeignKey("sweeps.id", ondelete="CASCADE"), index=True)
    config: Mapped[str] = mapped_column(String(128))
    method: Mapped[str] = mapped_column(String(32))
    k: Mapped[int] = mapped_column(Integer)
    concurrency: Mapped[int] = mapped_column(Integer)
    output_tokens_per_s: Mapped[float] = mapped_column(Float)
    requests_per_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    tpot_p50_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    metrics: Mapped[dict[str, Any]] = mapped_column(JsonType, default=dict)
    """TTFT/TPOT percentiles, acceptance, GPU-seconds per 1K tokens, as measured."""
