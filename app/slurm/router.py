"""Slurm job accounting over HTTP: jobs, and GPU-hours and cost by account and partition. A
team key sees only its own Slurm account's (the account is the team)."""

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from sqlalchemy import select

from app.auth.deps import PrincipalDep, team_scope
from app.deps import SessionDep, SettingsDep
from app.domain.periods import Month
from app.domain.windows import TimeWindow
from app.errors import RESPONSES_READ
from app.kit.http_params import name_query
from app.kit.schemas import Amount, Schema, money
from app.models import SlurmJob
from app.slurm.report import slurm_usage

router = APIRouter(prefix="/slurm", tags=["slurm"])

_MONTH = Query(pattern=r"^\d{4}-\d{2}$", description="YYYY-MM (UTC).", examples=["2026-12"])
_TEAM = name_query("Only this Slurm account (a team key: its own only).")


class SlurmJobRead(Schema):
    cluster: str
    job: str
    account: str | None
    user: str | None
    partition: str | None
    qos: str | None
    state: str
    start: datetime
    end: datetime | None
    """None while it runs."""
    elapsed_s: int
    gpus: int
    gpu_seconds: int
    nodes: list[str]
    metered: bool
    """Its usage records are written (it has ended)."""


class SlurmUsageRead(Schema):
    cluster: str
    account: str
    partition: str
    jobs: int
    gpu_hours: float
    cost: Amount
    currency: str | None


@router.get("/jobs", response_model=list[SlurmJobRead], responses=RESPONSES_READ)
def list_jobs(
    session: SessionDep,
    principal: PrincipalDep,
    month: Annotated[str, _MONTH],
    team: Annotated[str | None, _TEAM] = None,
    partition: Annotated[str | None, name_query("Only this partition.")] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> list[SlurmJobRead]:
    """Job allocations (not steps) that ran in the month, latest first."""
    window = Month.parse(month)
    query = select(SlurmJob).where(
        SlurmJob.step == "",
        SlurmJob.start_at < window.end,
        (SlurmJob.end_at.is_(None)) | (SlurmJob.end_at > window.start),
    )
    account = team_scope(principal, team)
    if account is not None:
        query = query.where(SlurmJob.account == account)
    if partition is not None:
        query = query.where(SlurmJob.partition == partition)
    rows = session.scalars(query.order_by(SlurmJob.start_at.desc()).limit(limit))
    return [
        SlurmJobRead(
            cluster=r.cluster,
            job=r.job,
            account=r.account,
            user=r.user_name,
            partition=r.partition,
            qos=r.qos,
            state=r.state,
            start=r.start_at,
            end=r.end_at,
            elapsed_s=r.elapsed_s,
            gpus=r.gpus,
            gpu_seconds=r.gpu_seconds,
            nodes=list(r.nodes),
            metered=r.metered,
        )
        for r in rows
    ]


@router.get("/usage", response_model=list[SlurmUsageRead], responses=RESPONSES_READ)
def usage(
    session: SessionDep,
    principal: PrincipalDep,
    settings: SettingsDep,
    month: Annotated[str, _MONTH],
    team: Annotated[str | None, _TEAM] = None,
) -> list[SlurmUsageRead]:
    """GPU-hours (from accounting) and allocated cost (from the ledger) per cluster, account
    and partition; a node's unused GPUs are ``(idle)`` (admin only: a team sees its own)."""
    window = Month.parse(month)
    lines = slurm_usage(
        session,
        TimeWindow(window.start, window.end),
        team=team_scope(principal, team),
        s3_endpoint_url=settings.s3_endpoint_url,
    )
    return [
        SlurmUsageRead(
            cluster=line.cluster,
            account=line.account,
            partition=line.partition,
            jobs=line.jobs,
            gpu_hours=round(line.gpu_seconds / 3600, 6),
            cost=money(line.cost_micros),
            currency=line.currency,
        )
        for line in lines
    ]
