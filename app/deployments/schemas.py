"""Wire schemas of the deployments registry."""

from datetime import datetime
from typing import Literal

from pydantic import Field

from app.domain.ledger import SharedPolicy
from app.kit.schemas import NAME_MAX, Schema, StoredText

_NAME = r"^[^\s/\x00]+$"
"""A deployment or replica name: no whitespace, no slash (it goes in paths), no NUL."""


class ReplicaRead(Schema):
    name: str
    gpus: int
    resource_id: str | None
    base_url: str | None


class DeploymentRead(Schema):
    name: str
    tag_value: str
    tier: str | None
    shared_cost_policy: SharedPolicy
    shared_cost_team: str | None
    """Shown to admin keys and to the named team's keys only."""
    created_at: datetime
    replicas: list[ReplicaRead]


class DeploymentCreate(Schema):
    name: str = Field(min_length=1, max_length=NAME_MAX, pattern=_NAME)
    tag_value: StoredText | None = Field(None, min_length=1, max_length=256)
    """Value of the billing tag on this deployment's rows (default: the name)."""
    tier: Literal["prototype", "scaled", "enterprise"] | None = None
    shared_policy: SharedPolicy = SharedPolicy.proportional
    """How shared rows (networking, storage) are split."""
    shared_team: StoredText | None = Field(None, min_length=1, max_length=NAME_MAX)


class ReplicaCreate(Schema):
    name: str = Field(min_length=1, max_length=NAME_MAX, pattern=_NAME)
    gpus: int = Field(ge=1, le=4096)
    resource_id: StoredText | None = Field(None, min_length=1, max_length=1024)
    """Billing ResourceId of its instance."""
    base_url: StoredText | None = Field(None, max_length=512)
