"""The unit-cost ledger: allocation runs, their append-only entries, and closed months."""

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, BigIntId, StrEnumType, UTCDateTime
from app.domain.ledger import AllocationMethod, EntryKind, RunStatus
from app.models.billing import JsonText, JsonType


class AllocationRun(Base):
    """One allocation of a window's billing; re-running an open month replaces the run."""

    __tablename__ = "allocation_runs"

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    month: Mapped[str | None] = mapped_column(String(7), nullable=True, index=True)
    """``YYYY-MM`` for a month run (closable); None for an ad-hoc window."""
    window_start: Mapped[datetime] = mapped_column(UTCDateTime())
    window_end: Mapped[datetime] = mapped_column(UTCDateTime())
    share_idle: Mapped[bool]
    status: Mapped[RunStatus] = mapped_column(StrEnumType(RunStatus, 16))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    replaced_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    entry_count: Mapped[int] = mapped_column(Integer, default=0)
    summary: Mapped[dict[str, Any]] = mapped_column(JsonType, default=dict)
    store_uri: Mapped[str | None] = mapped_column(Text, nullable=True)
    """The Parquet store (folder or ``s3://`` prefix) that holds the run's entries; None
    when they are in ``ledger_entries``."""
    store_files: Mapped[dict[str, str] | None] = mapped_column(JsonText, nullable=True)
    """The run's entry files in the store, relative to it, with their SHA-256."""


class LedgerEntry(Base):
    """A share of one billing row: a request's, the idle remainder's, a shared cost's, an
    unallocated row, or an adjustment to a closed month. Never updated; deleted only when an
    open month is re-run."""

    __tablename__ = "ledger_entries"
    # Few indexes on purpose: a month's run writes one entry per request and charge period
    # (millions), and every index slows that bulk write. Reports filter by run or month, a
    # team's by team and run, and per-request costs join usage by event_id (migration 0015).
    __table_args__ = (
        Index("ix_ledger_entries_month_kind", "booked_month", "kind"),
        Index("ix_ledger_entries_team_run", "team", "run_id"),
        Index("ix_ledger_entries_event_id", "event_id", "run_id"),
    )

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    # No foreign key on purpose: PostgreSQL checks one per row, which more than doubled the
    # time to write a month of a million requests; entries are only written with their run.
    run_id: Mapped[int] = mapped_column(BigInteger, index=True)
    booked_month: Mapped[str] = mapped_column(String(7))
    """The accounting month (``YYYY-MM``) the entry belongs to."""
    corrects_month: Mapped[str | None] = mapped_column(String(7), nullable=True)
    """For adjustments: the closed month whose allocation this entry corrects."""
    kind: Mapped[EntryKind] = mapped_column(StrEnumType(EntryKind, 16))
    method: Mapped[AllocationMethod] = mapped_column(StrEnumType(AllocationMethod, 32))
    """How the share was computed; an adjustment's names the kind it restates."""
    billing_row_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    """The billing row split; None for an adjustment or a pool of several rows."""
    pool_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    """The pool of billing rows split together (its first row's id; see LedgerPoolRow)."""
    charge_period_start: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    charge_period_end: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    deployment: Mapped[str | None] = mapped_column(String(128), nullable=True)
    replica: Mapped[str | None] = mapped_column(String(128), nullable=True)
    event_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    session_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    team: Mapped[str | None] = mapped_column(String(128), nullable=True)
    gpu_ns: Mapped[int] = mapped_column(BigInteger, default=0)
    """The allocation basis this entry got its share for (GPU-nanoseconds)."""
    effective_cost_micros: Mapped[int] = mapped_column(BigInteger)
    """Share of the row's EffectiveCost (amortised) in micros of currency."""
    billed_cost_micros: Mapped[int] = mapped_column(BigInteger)
    """Share of the row's BilledCost (cash) in micros of currency."""
    list_cost_micros: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    contracted_cost_micros: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    effective_cost_residual_picos: Mapped[int] = mapped_column(
        BigInteger, default=0, server_default="0"
    )
    """What the exact share of EffectiveCost is beyond its micros, in picos: the pool's
    entries sum to its rows in micros and, with this, exactly (``app.domain.money``)."""
    billed_cost_residual_picos: Mapped[int] = mapped_column(
        BigInteger, default=0, server_default="0"
    )
    list_cost_residual_picos: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    contracted_cost_residual_picos: Mapped[int] = mapped_column(
        BigInteger, default=0, server_default="0"
    )
    currency: Mapped[str] = mapped_column(String(8))


class LedgerPoolRow(Base):
    """A billing row of a pool of several rows that a run split together."""

    __tablename__ = "ledger_pool_rows"
    __table_args__ = (Index("ix_ledger_pool_rows_run_pool", "run_id", "pool_id"),)

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(BigInteger)
    pool_id: Mapped[int] = mapped_column(BigInteger)
    billing_row_id: Mapped[int] = mapped_column(BigInteger)


class LedgerClosure(Base):
    """A closed month: its entries are frozen (database triggers refuse changes)."""

    __tablename__ = "ledger_closures"

    month: Mapped[str] = mapped_column(String(7), primary_key=True)
    closed_at: Mapped[datetime] = mapped_column(UTCDateTime())
    run_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("allocation_runs.id"))
    billing_fingerprint: Mapped[str] = mapped_column(String(64))
    """Hash of the billing the month was closed on: a change means a restatement."""
    store_files: Mapped[dict[str, str] | None] = mapped_column(JsonText, nullable=True)
    """For a run in a Parquet store: its files and their SHA-256 when the month closed."""


class LedgerRollup(Base):
    """A run's entries summed per pool, charge period, deployment, team, kind, method,
    currency and corrected month: what reconciliation and reports read, whether the entries
    are in the database or in a Parquet store."""

    __tablename__ = "ledger_rollups"
    __table_args__ = (Index("ix_ledger_rollups_run", "run_id"),)

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(BigInteger)
    booked_month: Mapped[str] = mapped_column(String(7))
    pool_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    billing_row_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    charge_period_start: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    charge_period_end: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    deployment: Mapped[str | None] = mapped_column(String(128), nullable=True)
    team: Mapped[str | None] = mapped_column(String(128), nullable=True)
    kind: Mapped[EntryKind] = mapped_column(StrEnumType(EntryKind, 16))
    method: Mapped[AllocationMethod] = mapped_column(StrEnumType(AllocationMethod, 32))
    currency: Mapped[str] = mapped_column(String(8))
    corrects_month: Mapped[str | None] = mapped_column(String(7), nullable=True)
    entries: Mapped[int] = mapped_column(BigInteger)
    gpu_ns: Mapped[int] = mapped_column(BigInteger)
    effective_cost_micros: Mapped[int] = mapped_column(BigInteger)
    billed_cost_micros: Mapped[int] = mapped_column(BigInteger)
    list_cost_micros: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    """None where the run's entries had no ListCost (entries before migration 0007)."""
    contracted_cost_micros: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    effective_cost_residual_picos: Mapped[int] = mapped_column(
        BigInteger, default=0, server_default="0"
    )
    billed_cost_residual_picos: Mapped[int] = mapped_column(
        BigInteger, default=0, server_default="0"
    )
    list_cost_residual_picos: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    contracted_cost_residual_picos: Mapped[int] = mapped_column(
        BigInteger, default=0, server_default="0"
    )
