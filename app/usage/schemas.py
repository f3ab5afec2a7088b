"""Wire schemas of usage ingestion and sessions."""

from datetime import datetime
from typing import Literal, Self

from pydantic import AwareDatetime, Field, model_validator

from app.kit.schemas import Amount, PageMeta, Schema, WindowRead

MAX_BATCH = 5000


class UsageEventIn(Schema):
    """One request, as the metering proxy records it (``usage_records``)."""

    event_id: str = Field(min_length=1, max_length=64)
    """Idempotency key: an event id already stored is skipped."""
    session_id: str = Field(min_length=1, max_length=128)
    team: str | None = Field(None, min_length=1, max_length=128)
    cost_center: str | None = Field(None, min_length=1, max_length=128)
    tags: dict[str, str] = Field(default_factory=dict, max_length=64)
    deployment: str = Field(min_length=1, max_length=128)
    replica: str = Field(min_length=1, max_length=128)
    model: str = Field(min_length=1, max_length=256)
    endpoint: str = Field("completions", min_length=1, max_length=32)
    streamed: bool = False
    spec_method: str = Field("none", min_length=1, max_length=32)
    spec_k: int | None = Field(None, ge=0, le=64)
    arrived_at: AwareDatetime
    first_token_at: AwareDatetime | None = None
    finished_at: AwareDatetime
    prompt_tokens: int = Field(0, ge=0)
    cached_tokens: int = Field(0, ge=0)
    completion_tokens: int = Field(0, ge=0)
    num_drafts: int = Field(0, ge=0)
    draft_tokens: int = Field(0, ge=0)
    accepted_tokens: int = Field(0, ge=0)
    gpu_ns: int = Field(0, ge=0, le=2**62)
    concurrency: int = Field(1, ge=1)
    status: Literal["ok", "error", "cancelled"] = "ok"
    http_status: int | None = Field(None, ge=100, le=599)
    error: str | None = Field(None, max_length=4000)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.finished_at < self.arrived_at:
            raise ValueError("finished_at is before arrived_at")
        if self.accepted_tokens > self.draft_tokens:
            raise ValueError("accepted_tokens exceeds draft_tokens")
        return self


class UsageBatch(Schema):
    events: list[UsageEventIn] = Field(min_length=1, max_length=MAX_BATCH)


class UsageBatchResult(Schema):
    received: int
    inserted: int
    duplicates: int
    """Events whose event_id was already stored (or repeated in the batch): skipped."""


class SessionRead(Schema):
    session_id: str
    team: str | None
    first_arrival: datetime
    last_finish: datetime
    requests: int
    deployments: list[str]
    session_seconds: float
    """Wall time with at least one request in flight (the union of its requests)."""
    gpu_seconds: float
    prompt_tokens: int
    completion_tokens: int
    draft_tokens: int
    accepted_tokens: int
    acceptance_rate: float | None
    effective_cost: Amount
    billed_cost: Amount
    cost_per_1k_session_seconds: Amount | None


class SessionPage(PageMeta):
    window: WindowRead
    items: list[SessionRead]


class RequestRead(Schema):
    event_id: str
    deployment: str
    replica: str
    model: str
    spec_method: str
    spec_k: int | None
    arrived_at: datetime
    finished_at: datetime
    prompt_tokens: int
    completion_tokens: int
    draft_tokens: int
    accepted_tokens: int
    gpu_seconds: float
    concurrency: int
    status: str
    effective_cost: Amount
    billed_cost: Amount


class SessionDetail(Schema):
    session: SessionRead
    requests: list[RequestRead]
    """The session's requests in arrival order (up to ``limit``)."""
    total_requests: int
