"""What a deployment's tokens and GPU-hours cost, from a month's ledger: prices a gateway in
front of SpecLedger can charge or enforce budgets with, where gateways price self-hosted
models at nothing.

A deployment's cost is everything the month's ledger books to it: its requests' shares, its
shared rows and its idle GPUs (what it costs to run, not only what its busy hours cost). Its
input and output prices split that cost by where its GPU time went: each streamed request's
GPU time is split between its prefill (arrival to first token) and its decode (first token to
finish) in proportion to their wall time, and the deployment's cost is split in the ratio of
the sums. That is an estimate (prefill and decode share batches on the GPU); a deployment
with no streamed request has no input price and its output price carries the whole cost.
"""

import math
import threading
from collections import OrderedDict
from dataclasses import dataclass
from fractions import Fraction

from sqlalchemy import Float, case, cast, func, select
from sqlalchemy.orm import Session

from app.db import epoch_us
from app.domain import measures
from app.domain.ledger import CostLabel
from app.domain.money import format_micros
from app.domain.periods import Month
from app.ledger.costs import unit_costs
from app.ledger.service import check_allocated
from app.models import UsageRecord
from app.storage.run_repository import allocated_months, current_run_id, month_currency

_NOT_DEPLOYMENTS = {label.value for label in CostLabel}
"""The cost lines by deployment that are not a deployment (unallocated, shared ...)."""


@dataclass(frozen=True, slots=True)
class DeploymentPrice:
    deployment: str
    cost_micros: int
    """Everything the month's ledger books to the deployment (EffectiveCost)."""
    requests: int
    prompt_tokens: int
    completion_tokens: int
    gpu_ns: int
    prefill_share: float | None
    """The part of the streamed requests' GPU time spent before their first token; None
    when no request was streamed."""
    currency: str | None = None
    """The ledger's currency for the month (the bill's); None only for a month whose
    ledger books nothing."""

    @property
    def input_cost_micros(self) -> int:
        return round(self.cost_micros * (self.prefill_share or 0.0))

    def cost_of(self, prompt_tokens: int, completion_tokens: int) -> int:
        """Micros that a request of ``prompt_tokens`` in and ``completion_tokens`` out costs
        at these prices (input at the input price, output at the output price, as a gateway
        would charge from :meth:`to_json`), rounded half up from the exact ratio."""
        exact = Fraction(0)
        if self.prompt_tokens:
            exact += Fraction(self.input_cost_micros * prompt_tokens, self.prompt_tokens)
        if self.completion_tokens:
            output_cost = self.cost_micros - self.input_cost_micros
            exact += Fraction(output_cost * completion_tokens, self.completion_tokens)
        return math.floor(exact + Fraction(1, 2))

    def to_json(self) -> dict[str, object]:
        output_cost = self.cost_micros - self.input_cost_micros
        total_tokens = measures.total_tokens(self.prompt_tokens, self.completion_tokens)

        def per(amount: int, units: float, scale: float) -> str | None:
            cost = measures.unit_cost_micros(amount, units, scale)
            return None if cost is None else format_micros(cost)

        return {
            "deployment": self.deployment,
            "cost_per_1m_input_tokens": None
            if self.prefill_share is None
            else per(self.input_cost_micros, self.prompt_tokens, 1e6),
            "cost_per_1m_output_tokens": per(output_cost, self.completion_tokens, 1e6),
            "cost_per_1m_tokens": per(self.cost_micros, total_tokens, 1e6),
            "cost_per_gpu_hour": per(self.cost_micros, self.gpu_ns / 3.6e12, 1),
            "prefill_share": None if self.prefill_share is None else round(self.prefill_share, 4),
            "currency": self.currency,
        }


def price_month(session: Session, month: Month | None) -> Month | None:
    """``month``, else the newest allocated month; None when nothing is allocated.

    Raises:
        NothingAllocated: ``month`` has no allocation (its prices would be zero, not
            unknown).
    """
    if month is not None:
        check_allocated(session, month)
        return month
    allocated = allocated_months(session)
    return Month.parse(allocated[-1]) if allocated else None


def deployment_prices(
    session: Session, month: Month, *, s3_endpoint_url: str | None = None
) -> list[DeploymentPrice]:
    """Each deployment's prices from ``month``'s ledger and the requests that arrived in
    it, by deployment name; deployments with no request in the month are left out."""
    lines = unit_costs(session, month=month, by=["deployment"], s3_endpoint_url=s3_endpoint_url)
    prefill = _prefill_shares(session, month)
    currency = month_currency(session, month)
    return [
        DeploymentPrice(
            deployment=line.key[0],
            cost_micros=line.effective_micros,
            requests=line.requests,
            prompt_tokens=line.prompt_tokens,
            completion_tokens=line.completion_tokens,
            gpu_ns=line.gpu_ns,
            prefill_share=prefill.get(line.key[0]),
            currency=currency,
        )
        for line in lines
        if line.requests and line.key[0] not in _NOT_DEPLOYMENTS
    ]


def _prefill_shares(session: Session, month: Month) -> dict[str, float]:
    """Per deployment: the streamed requests' prefill GPU time over their GPU time."""
    arrived, first, finished = (
        epoch_us(UsageRecord.arrived_at),
        epoch_us(UsageRecord.first_token_at),
        epoch_us(UsageRecord.finished_at),
    )
    timed = UsageRecord.first_token_at.is_not(None) & (finished > arrived) & (first >= arrived)
    prefill = case(
        (
            timed,
            cast(UsageRecord.gpu_ns, Float)
            * cast(case((first < finished, first), else_=finished) - arrived, Float)
            / cast(finished - arrived, Float),
        ),
        else_=0.0,
    )
    rows = session.execute(
        select(
            UsageRecord.deployment,
            func.sum(prefill),
            func.sum(case((timed, UsageRecord.gpu_ns), else_=0)),
        )
        .where(UsageRecord.arrived_at >= month.start, UsageRecord.arrived_at < month.end)
        .group_by(UsageRecord.deployment)
    ).all()
    return {
        deployment: max(0.0, min(1.0, float(spent) / float(total)))
        for deployment, spent, total in rows
        if total
    }


class PriceBook:
    """Each month's prices, computed once per allocation run and kept for the process.

    Prices read the whole month (every deployment's requests), the same answer for any key,
    so without a book any key could make the server read a 10M-request month on each call.
    A run's ledger never changes; a month allocated again gets a new run and new prices.
    Usage ingested after a run is unpriced until the month is allocated again (reconcile
    lists it), so a run's prices stand until then."""

    def __init__(self, runs: int = 24) -> None:
        self._runs = runs
        self._by_run: OrderedDict[tuple[str, int], list[DeploymentPrice]] = OrderedDict()
        self._lock = threading.Lock()

    def prices(
        self, session: Session, month: Month, *, s3_endpoint_url: str | None = None
    ) -> list[DeploymentPrice]:
        run = current_run_id(session, month)
        if run is None:
            return deployment_prices(session, month, s3_endpoint_url=s3_endpoint_url)
        key = (str(month), run)
        with self._lock:
            known = self._by_run.get(key)
            if known is not None:
                self._by_run.move_to_end(key)
                return known
        prices = deployment_prices(session, month, s3_endpoint_url=s3_endpoint_url)
        with self._lock:
            self._by_run[key] = prices
            while len(self._by_run) > self._runs:
                self._by_run.popitem(last=False)
        return prices
