"""Wire schemas of the ledger API: unit costs, reconciliation, closures, billing deliveries."""

from datetime import datetime
from decimal import Decimal
from typing import Any, Literal, Self

from pydantic import ConfigDict, Field

from app.domain.money import format_picos, micros_to_decimal
from app.domain.periods import Month
from app.kit.schemas import Amount, ExactAmount, PageMeta, Schema


class CostLineRead(Schema):
    model_config = ConfigDict(extra="ignore")  # built from CostLine.to_json, which may grow
    properties: dict[str, str]
    """The line's value on each ``by`` dimension; ``(idle)``, ``(shared)`` or
    ``(unallocated)`` for cost not tied to a request."""
    requests: int
    effective_cost: Amount
    """The sum of the line's entries in micros (each billing row rounded to the micro)."""
    billed_cost: Amount
    effective_cost_exact: ExactAmount
    """The line's EffectiveCost exactly, at the bill's precision."""
    billed_cost_exact: ExactAmount
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


class PriceRead(Schema):
    deployment: str
    cost_per_1m_input_tokens: Amount | None
    """Null when the deployment streamed no request (no first-token times to split by)."""
    cost_per_1m_output_tokens: Amount | None
    cost_per_1m_tokens: Amount | None
    cost_per_gpu_hour: Amount | None
    prefill_share: float | None
    """The part of the streamed requests' GPU time before their first token: the part of
    the deployment's cost its input tokens carry."""
    currency: str | None
    """The currency of every price on the card: the month's ledger's (the bill's)."""


class PricesRead(Schema):
    month: str | None
    """The month the prices come from; null when no month is allocated yet."""
    items: list[PriceRead]


class CostPage(PageMeta):
    month: str
    by: list[str]
    currency: str | None
    """The currency of every amount on the page: the month's ledger's (the bill's)."""
    items: list[CostLineRead]


class UnpricedUsageRead(Schema):
    deployment: str
    requests: int
    gpu_seconds: float


class ReconciliationRead(Schema):
    model_config = ConfigDict(extra="ignore")  # built from Reconciliation.to_json
    month: str
    run_id: int | None
    balanced: bool
    """Bill = allocated + shared + idle + unallocated, exactly, in every currency."""
    pending_rows: int
    """Billing rows with no ledger entries (billing changed since the run)."""
    currencies: dict[str, dict[str, dict[str, ExactAmount]]]
    """currency -> bill | request | shared | idle | unallocated -> effective / billed,
    exact (to the pico)."""
    deployments: dict[str, dict[str, dict[str, dict[str, ExactAmount]]]]
    """currency -> deployment -> kind -> effective / billed."""
    adjustments: list[dict[str, Any]]
    unallocated_rows: list[dict[str, Any]]
    unpriced_usage: list[UnpricedUsageRead]
    """Requests of deployments nobody registered (loaded with
    ``--allow-unknown-deployments``): no bill prices them until the deployment is registered
    and the month allocated again."""


class ClosureCreate(Schema):
    month: str = Field(pattern=r"^\d{4}-(0[1-9]|1[0-2])$", examples=["2026-11"])


class ClosureRead(Schema):
    month: str
    closed_at: datetime
    run_id: int


def _exact_total(totals: dict[str, int], basis: str) -> Decimal:
    """A delivery's exact total of one basis (deliveries loaded before exact money kept
    only micros)."""
    picos = totals.get(f"{basis}_cost_picos")
    if picos is None:
        return micros_to_decimal(totals.get(f"{basis}_cost_micros", 0))
    return Decimal(format_picos(picos))


class DeliveryRead(Schema):
    """One billing delivery: what one source delivered for one billing period."""

    id: int
    source: str
    """``file:/abs/path``, ``s3://bucket/prefix/export`` or the name given with --source."""
    month: str
    """The billing period's month, YYYY-MM."""
    billing_period_start: datetime
    billing_period_end: datetime
    status: Literal["current", "replaced", "removed"]
    files: list[str]
    manifest: str | None
    """The AWS Data Exports manifest that listed the files."""
    focus_version: str
    billing_accounts: list[str]
    """Distinct BillingAccountId values of its rows."""
    row_count: int
    totals: dict[str, dict[str, ExactAmount]]
    """currency -> billed / effective."""
    delivered_at: datetime
    ingested_at: datetime
    superseded_at: datetime | None
    superseded_by: int | None
    """The delivery that replaced it."""
    removed_at: datetime | None

    @classmethod
    def of(cls, delivery: Any) -> "DeliveryRead":
        status = (
            "removed"
            if delivery.removed_at is not None
            else "replaced"
            if delivery.superseded_at is not None
            else "current"
        )
        return cls(
            id=delivery.id,
            source=delivery.source,
            month=str(Month.of(delivery.billing_period_start)),
            billing_period_start=delivery.billing_period_start,
            billing_period_end=delivery.billing_period_end,
            status=status,
            files=list(delivery.files),
            manifest=delivery.manifest,
            focus_version=delivery.focus_version,
            billing_accounts=list(delivery.billing_accounts or []),
            row_count=delivery.row_count,
            totals={
                currency: {
                    "billed": _exact_total(t, "billed"),
                    "effective": _exact_total(t, "effective"),
                }
                for currency, t in sorted((delivery.totals or {}).items())
            },
            delivered_at=delivery.delivered_at,
            ingested_at=delivery.ingested_at,
            superseded_at=delivery.superseded_at,
            superseded_by=delivery.superseded_by,
            removed_at=delivery.removed_at,
        )


class DeliveryRemove(Schema):
    restate: bool = False
    """Required for a delivery of a closed month: its removal is then booked as a
    restatement (adjustments in the first open month when that month is allocated)."""


class DeliveryRemoved(Schema):
    delivery: DeliveryRead
    restated: bool
    """The month was closed: the difference is booked as adjustments in ``booked_in``."""
    booked_in: str | None
    """The open month whose allocation books the adjustments (``specledger allocate``)."""
