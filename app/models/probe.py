"""Acceptance probe runs: a fixed prompt set sent through a deployment on a schedule, with
the acceptance, speed and latency each run measured (``specledger probe run``)."""

from datetime import datetime

from sqlalchemy import BigInteger, Float, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, BigIntId, UTCDateTime
from app.models.billing import JsonType


class ProbeRun(Base):
    """One run of a probe set through the metering proxy; its requests are metered (and
    charged) like any others, under the probe key's team."""

    __tablename__ = "probe_runs"
    __table_args__ = (Index("ix_probe_runs_deployment_started_at", "deployment", "started_at"),)

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    deployment: Mapped[str] = mapped_column(String(128))
    model: Mapped[str] = mapped_column(String(256))
    proxy_url: Mapped[str] = mapped_column(String(2048))
    team: Mapped[str] = mapped_column(String(128))
    """The team the probe key bills: the run's usage records carry it."""
    session_id: Mapped[str] = mapped_column(String(128))
    """Sent as ``X-Session-Id`` with every request of the run: its usage records carry it."""
    probe_set_version: Mapped[str] = mapped_column(String(64))
    probe_set_sha256: Mapped[str] = mapped_column(String(64))
    concurrency: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime] = mapped_column(UTCDateTime())
    requests: Mapped[int] = mapped_column(Integer)
    ok: Mapped[int] = mapped_column(Integer)
    """Requests that finished without error."""
    output_tokens: Mapped[int] = mapped_column(BigInteger)
    num_drafts: Mapped[int] = mapped_column(BigInteger)
    """Speculative steps (the acceptance histogram's total)."""
    draft_tokens: Mapped[int] = mapped_column(BigInteger)
    accepted_tokens: Mapped[int] = mapped_column(BigInteger)
    acceptance_rate: Mapped[float | None] = mapped_column(Float, nullable=True)
    """Accepted over drafted tokens; None when nothing was drafted."""
    acceptance_histogram: Mapped[list[int]] = mapped_column(JsonType)
    """vLLM's per-request histograms summed: entry i counts steps accepting exactly i."""
    acceptance_per_position: Mapped[list[float]] = mapped_column(JsonType)
    """Position p (1..k): steps accepting at least p tokens over all steps."""
    tokens_per_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    """Output tokens over the run's wall time."""
    tpot_p50_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    tpot_p90_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    ttft_p50_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    error: Mapped[str | None] = mapped_column(String(512), nullable=True)
    """The first failed request's error, if any failed."""
