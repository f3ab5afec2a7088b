"""Budgets: a spending limit for one scope (team, cost center, deployment or tag) and period."""

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, CheckConstraint, String, text
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, BigIntId, UTCDateTime


class Budget(Base):
    """A limit in the ledger's currency, with alert thresholds in percent of ``amount`` and an
    optional hard limit that the metering proxy enforces (429 once spend reaches it)."""

    __tablename__ = "budgets"
    __table_args__ = (
        CheckConstraint(
            "scope_kind IN ('team', 'cost_center', 'deployment', 'tag')", name="scope_kind_known"
        ),
        CheckConstraint(
            "(period = 'month' AND period_start IS NULL AND period_end IS NULL) OR "
            "(period = 'custom' AND period_start IS NOT NULL AND period_end > period_start)",
            name="period_bounds",
        ),
        CheckConstraint("amount_micros > 0", name="amount_positive"),
        CheckConstraint(
            "hard_limit_micros IS NULL OR hard_limit_micros > 0", name="hard_limit_positive"
        ),
    )

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    scope_kind: Mapped[str] = mapped_column(String(16))
    scope_value: Mapped[str] = mapped_column(String(300))
    """The team, cost center or deployment name; for a tag, ``key=value``."""
    period: Mapped[str] = mapped_column(String(16))
    """``month`` (every calendar month, UTC) or ``custom`` (``period_start`` to ``period_end``)."""
    period_start: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    period_end: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    amount_micros: Mapped[int] = mapped_column(BigInteger)
    currency: Mapped[str] = mapped_column(String(8))
    thresholds: Mapped[list[Any]] = mapped_column(JSON)
    """Percentages of ``amount`` that raise an alert when spend reaches them."""
    hard_limit_micros: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    steps: Mapped[list[Any]] = mapped_column(JSON, default=list, server_default=text("'[]'"))
    """Brownout steps before the hard limit (:mod:`app.budgets.rules.steps`), as JSON."""
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    archived_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
