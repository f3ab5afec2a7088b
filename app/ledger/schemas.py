"""Wire schemas of the ledger API: unit costs, reconciliation, closures."""

from datetime import datetime
from typing import Any, Self

from pydantic import ConfigDict, Field

from app.kit.schemas import Amount, PageMeta, Schema

_MONEY_FIELDS = (
    "effective_cost",
    "billed_cost",
    "cost_per_1k_session_seconds",
    "cost_per_1m_output_tokens",
    "cost_per_1m_tokens",
    "cost_per_gpu_hour",
)


class CostLineRead(Schema):
    model_config = ConfigDict(extra="ignore")  # built from CostLine.to_json, which may grow
    properties: dict[str, str]
    """The line's value on each ``by`` dimension; ``(idle)``, ``(shared)`` or
    ``(unallocated)`` for cost not tied to a request."""
    requests: int
    effective_cost: Amount
    billed_cost: Amount
    gpu_seconds: float
    session_seconds: float
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    draft_tokens: int
    accepted_tokens: int
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    cost_per_1k_session_seconds: Amount | None
    cost_per_1m_output_tokens: Amount | None
    cost_per_1m_tokens: Amount | None
    cost_per_gpu_hour: Amount | None
    idle_share: float

    @classmethod
    def of(cls, record: dict[str, Any], by: tuple[str, ...]) -> Self:
        values = dict(record)
        properties = {dimension: str(values.pop(dimension)) for dimension in by}
        return cls(properties=properties, **values)


class CostPage(PageMeta):
    month: str
    by: list[str]
    items: list[CostLineRead]


class ReconciliationRead(Schema):
    model_config = ConfigDict(extra="ignore")  # built from Reconciliation.to_json
    month: str
    run_id: int | None
    balanced: bool
    """Bill = allocated + shared + idle + unallocated, to the micro, in every currency."""
    pending_rows: int
    """Billing rows with no ledger entries (billing changed since the run)."""
    currencies: dict[str, dict[str, dict[str, Amount]]]
    """currency -> bill | request | shared | idle | unallocated -> effective / billed."""
    deployments: dict[str, dict[str, dict[str, dict[str, Amount]]]]
    """currency -> deployment -> kind -> effective / billed."""
    adjustments: list[dict[str, Any]]
    unallocated_rows: list[dict[str, Any]]


class ClosureCreate(Schema):
    month: str = Field(pattern=r"^\d{4}-(0[1-9]|1[0-2])$", examples=["2026-11"])


class ClosureRead(Schema):
    month: str
    closed_at: datetime
    run_id: int
