"""Wire schemas of usage and sessions. :class:`UsageEventIn` and :class:`ReplicaIdleIn` are
the one validation of a usage record, for the HTTP route and for the proxy's JSONL log."""

from datetime import UTC, datetime
from typing import Annotated, Any, Literal, Self

from pydantic import AwareDatetime, Field, ValidationError, model_validator

from app.domain.usage import (
    HISTOGRAM_MAX,
    MODEL_MAX,
    SESSION_ID_MAX,
    ReplicaIdleEvent,
    UsageEvent,
)
from app.kit.schemas import (
    INTEGER_MAX,
    NAME_MAX,
    Amount,
    PageMeta,
    Schema,
    StoredText,
    WindowRead,
)

MAX_BATCH = 5000


class UsageEventIn(Schema):
    """One request, as the metering proxy records it (``usage_records``).

    Numbers, booleans and strings are strict (``"5"`` is not an integer, ``"yes"`` not a
    boolean): a record is a machine's output, and a coerced value would hide a bug there."""

    record: Literal["usage"] = "usage"
    """The JSONL log's record type; optional."""
    event_id: StoredText = Field(strict=True, min_length=1, max_length=64)
    """Idempotency key: an event id already stored is skipped."""
    session_id: StoredText = Field(strict=True, min_length=1, max_length=SESSION_ID_MAX)
    team: StoredText | None = Field(None, strict=True, min_length=1, max_length=SESSION_ID_MAX)
    cost_center: StoredText | None = Field(
        None, strict=True, min_length=1, max_length=SESSION_ID_MAX
    )
    tags: dict[StoredText, Annotated[StoredText, Field(strict=True)]] = Field(
        default_factory=dict, max_length=64
    )
    deployment: StoredText = Field(strict=True, min_length=1, max_length=NAME_MAX)
    replica: StoredText = Field(strict=True, min_length=1, max_length=NAME_MAX)
    model: StoredText = Field(strict=True, min_length=1, max_length=MODEL_MAX)
    endpoint: StoredText = Field("completions", strict=True, min_length=1, max_length=32)
    streamed: bool = Field(False, strict=True)
    spec_method: StoredText = Field("none", strict=True, min_length=1, max_length=32)
    spec_k: int | None = Field(None, strict=True, ge=0, le=64)
    arrived_at: AwareDatetime
    first_token_at: AwareDatetime | None = None
    finished_at: AwareDatetime
    prompt_tokens: int = Field(0, strict=True, ge=0, le=INTEGER_MAX)
    cached_tokens: int = Field(0, strict=True, ge=0, le=INTEGER_MAX)
    completion_tokens: int = Field(0, strict=True, ge=0, le=INTEGER_MAX)
    num_drafts: int = Field(0, strict=True, ge=0, le=INTEGER_MAX)
    draft_tokens: int = Field(0, strict=True, ge=0, le=INTEGER_MAX)
    accepted_tokens: int = Field(0, strict=True, ge=0, le=INTEGER_MAX)
    accepted_hist: list[Annotated[int, Field(strict=True, ge=0, le=INTEGER_MAX)]] | None = Field(
        None, min_length=1, max_length=HISTOGRAM_MAX
    )
    """vLLM's ``acceptance_histogram``: entry ``j`` counts the verification steps that
    accepted exactly ``j`` drafted tokens (``k + 1`` entries)."""
    gpu_ns: int = Field(0, strict=True, ge=0, le=2**62)
    concurrency: int = Field(1, strict=True, ge=1, le=INTEGER_MAX)
    status: Literal["ok", "error", "cancelled"] = "ok"
    http_status: int | None = Field(None, strict=True, ge=100, le=599)
    error: StoredText | None = Field(None, strict=True, max_length=4000)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.finished_at < self.arrived_at:
            raise ValueError("finished_at is before arrived_at")
        if self.accepted_tokens > self.draft_tokens:
            raise ValueError("accepted_tokens exceeds draft_tokens")
        return self

    def to_event(self) -> UsageEvent:
        """The domain record, instants in UTC."""
        fields = self.model_dump(exclude={"record"})
        for name in ("arrived_at", "first_token_at", "finished_at"):
            if fields[name] is not None:
                fields[name] = fields[name].astimezone(UTC)
        if fields["accepted_hist"] is not None:
            fields["accepted_hist"] = tuple(fields["accepted_hist"])
        return UsageEvent(**fields)


class ReplicaIdleIn(Schema):
    """GPU time of a replica with no request in flight (``replica_idle``)."""

    record: Literal["replica_idle"]
    deployment: StoredText = Field(strict=True, min_length=1, max_length=NAME_MAX)
    replica: StoredText = Field(strict=True, min_length=1, max_length=NAME_MAX)
    start_at: AwareDatetime
    end_at: AwareDatetime
    gpu_ns: int = Field(strict=True, ge=0, le=2**62)

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.end_at < self.start_at:
            raise ValueError("end_at is before start_at")
        return self

    def to_event(self) -> ReplicaIdleEvent:
        return ReplicaIdleEvent(
            deployment=self.deployment,
            replica=self.replica,
            start_at=self.start_at.astimezone(UTC),
            end_at=self.end_at.astimezone(UTC),
            gpu_ns=self.gpu_ns,
        )


def record_from_json(obj: Any) -> UsageEvent | ReplicaIdleEvent:
    """Decode one JSONL line's object: a usage record (``"record": "usage"``, the default)
    or an idle record (``"record": "replica_idle"``).

    Raises:
        ValueError: If the object is not a valid record; the message names the first bad field.
    """
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    kind = obj.get("record", "usage")
    schema: type[UsageEventIn] | type[ReplicaIdleIn]
    if kind == "usage":
        schema = UsageEventIn
    elif kind == "replica_idle":
        schema = ReplicaIdleIn
    else:
        raise ValueError(f"unknown record type {kind!r} (expected usage or replica_idle)")
    try:
        return schema.model_validate(obj).to_event()
    except ValidationError as exc:
        raise ValueError(first_error(exc)) from None


def first_error(exc: ValidationError) -> str:
    """The first problem of a validation error, naming its field."""
    error = exc.errors(include_url=False)[0]
    where = ".".join(str(part) for part in error["loc"])
    message = error["msg"]
    if error["type"] == "missing":
        return f"field {where!r} is missing"
    return f"field {where!r}: {message}" if where else message


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
