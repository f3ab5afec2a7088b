"""The deployments registry: what serves, on which GPUs, and how its billing is recognised."""

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, BigIntId, StrEnumType, UTCDateTime
from app.domain.ledger import SharedPolicy
from app.models.billing import JsonType


class Deployment(Base):
    __tablename__ = "deployments"

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    tag_value: Mapped[str] = mapped_column(String(256))
    """Value of the billing tag (``SPECLEDGER_BILLING_TAG_KEY``) on this deployment's rows."""
    tier: Mapped[str | None] = mapped_column(String(32), nullable=True)
    shared_cost_policy: Mapped[SharedPolicy] = mapped_column(
        StrEnumType(SharedPolicy, 16), default=SharedPolicy.proportional
    )
    """How shared rows (networking, storage) are split."""
    shared_cost_team: Mapped[str | None] = mapped_column(String(128), nullable=True)
    engine_config: Mapped[dict[str, Any] | None] = mapped_column(JsonType, nullable=True)
    """The vLLM engine config of its replicas, incl. a fitted speculation schedule."""
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


class Replica(Base):
    __tablename__ = "replicas"
    __table_args__ = (UniqueConstraint("deployment_id", "name"),)

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    deployment_id: Mapped[int] = mapped_column(ForeignKey("deployments.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(128))
    gpus: Mapped[int] = mapped_column(Integer)
    resource_id: Mapped[str | None] = mapped_column(String(1024), nullable=True, unique=True)
    """Billing ResourceId (e.g. the EC2 instance ARN) whose rows belong to this replica."""
    base_url: Mapped[str | None] = mapped_column(String(512), nullable=True)
    slurm_job: Mapped[str | None] = mapped_column(String(200), nullable=True)
    """``cluster:job`` of the Slurm job this replica runs in: the job's share of its nodes is
    split again to the replica's requests (the rest is the job's own, unmetered)."""
