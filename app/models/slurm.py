"""Slurm job accounting (``sacct``): one row per job allocation or step run, and the log of
ingests (which windows were read from which cluster)."""

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Boolean, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, BigIntId, UTCDateTime
from app.models.billing import JsonType


class SlurmJob(Base):
    """A job's allocation line (``step`` is ``""``) or one of its steps, for one run: a
    requeued job has one row per run (its ``start_at``)."""

    __tablename__ = "slurm_jobs"
    __table_args__ = (UniqueConstraint("cluster", "job", "step", "start_at"),)

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    cluster: Mapped[str] = mapped_column(String(128))
    job: Mapped[str] = mapped_column(String(64))
    """The allocation's id as sacct prints it without the step: ``42``, ``42_3``, ``42+1``."""
    step: Mapped[str] = mapped_column(String(64))
    """``""`` for the allocation line, else ``batch``, ``extern``, ``0``..."""
    job_id_raw: Mapped[str] = mapped_column(String(64))
    array_job_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    array_task_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    het_job_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    het_offset: Mapped[int | None] = mapped_column(Integer, nullable=True)
    name: Mapped[str] = mapped_column(String(256))
    account: Mapped[str | None] = mapped_column(String(128), nullable=True)
    user_name: Mapped[str | None] = mapped_column(String(128), nullable=True)
    partition: Mapped[str | None] = mapped_column(String(128), nullable=True)
    qos: Mapped[str | None] = mapped_column(String(128), nullable=True)
    state: Mapped[str] = mapped_column(String(32))
    state_reason: Mapped[str | None] = mapped_column(String(128), nullable=True)
    submit_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    start_at: Mapped[datetime] = mapped_column(UTCDateTime())
    end_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    """None while the job runs; it is read again until it has ended."""
    elapsed_s: Mapped[int] = mapped_column(BigInteger)
    gpus: Mapped[int] = mapped_column(Integer)
    gpu_seconds: Mapped[int] = mapped_column(BigInteger)
    """Allocated GPUs x ElapsedRaw."""
    nodes: Mapped[list[str]] = mapped_column(JsonType)
    alloc_tres: Mapped[dict[str, Any]] = mapped_column(JsonType)
    usage_in_tot: Mapped[dict[str, Any]] = mapped_column(JsonType)
    metered: Mapped[bool] = mapped_column(Boolean, default=False)
    """Its usage records are written (the allocation line of a job that has ended)."""
    accrued_until: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    """While it runs: the instant its usage records are accrued to (the end of the last
    window read); None once it has ended and its records are trued up, or if never accrued."""
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())


class SlurmIngest(Base):
    """One read of a cluster's accounting: the window asked for and what it found."""

    __tablename__ = "slurm_ingests"

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    cluster: Mapped[str] = mapped_column(String(128))
    window_start: Mapped[datetime] = mapped_column(UTCDateTime())
    window_end: Mapped[datetime] = mapped_column(UTCDateTime())
    ran_at: Mapped[datetime] = mapped_column(UTCDateTime())
    lines: Mapped[int] = mapped_column(Integer)
    jobs_new: Mapped[int] = mapped_column(Integer)
    jobs_updated: Mapped[int] = mapped_column(Integer)
    usage_records: Mapped[int] = mapped_column(Integer)
