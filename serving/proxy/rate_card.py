"""Each deployment's prices at the proxy, for the price headers of every response.

The rate card is ``GET /v1/prices`` of the newest allocated month (:mod:`app.ledger.prices`),
reloaded with the budgets every ``budget_refresh_s``; a month's prices are computed once per
allocation run, so a reload that finds the same run costs two small queries.
"""

from __future__ import annotations

from sqlalchemy import Engine

from app.db import read_session
from app.domain.money import format_micros
from app.ledger.prices import DeploymentPrice, PriceBook, price_month

PRICE_INPUT_HEADER = "X-SpecLedger-Price-Input-1M"
PRICE_OUTPUT_HEADER = "X-SpecLedger-Price-Output-1M"
PRICE_MONTH_HEADER = "X-SpecLedger-Price-Month"
PRICE_CURRENCY_HEADER = "X-SpecLedger-Price-Currency"
COST_ESTIMATE_HEADER = "X-SpecLedger-Cost-Estimate"


class RateCard:
    """The deployments' prices; :meth:`refresh` is blocking (run it in a thread)."""

    def __init__(self, engine: Engine, *, s3_endpoint_url: str | None = None) -> None:
        self._engine = engine
        self._s3_endpoint_url = s3_endpoint_url
        self._book = PriceBook(runs=2)
        self._prices: dict[str, DeploymentPrice] = {}
        self._headers: dict[str, list[tuple[bytes, bytes]]] = {}

    def refresh(self) -> None:
        with read_session(self._engine) as session:
            month = price_month(session, None)
            prices = (
                []
                if month is None
                else self._book.prices(session, month, s3_endpoint_url=self._s3_endpoint_url)
            )
        self._headers = {p.deployment: _price_headers(p, str(month)) for p in prices}
        self._prices = {price.deployment: price for price in prices}

    def price_of(self, deployment: str) -> DeploymentPrice | None:
        """The deployment's prices; None before any month that it served is allocated."""
        return self._prices.get(deployment)

    def headers_for(self, deployment: str) -> list[tuple[bytes, bytes]]:
        """The deployment's price headers (raw ASGI); none before it has prices."""
        return self._headers.get(deployment, [])

    def estimate(self, deployment: str, prompt_tokens: int, completion_tokens: int) -> str | None:
        """The cost estimate of a request with these tokens (decimal); None without prices."""
        price = self._prices.get(deployment)
        if price is None:
            return None
        return format_micros(price.cost_of(prompt_tokens, completion_tokens))


def _price_headers(price: DeploymentPrice, month: str) -> list[tuple[bytes, bytes]]:
    card = price.to_json()
    named = [
        (PRICE_INPUT_HEADER, card["cost_per_1m_input_tokens"]),
        (PRICE_OUTPUT_HEADER, card["cost_per_1m_output_tokens"]),
        (PRICE_MONTH_HEADER, month),
        (PRICE_CURRENCY_HEADER, card["currency"]),
    ]
    return [(name.lower().encode(), str(value).encode()) for name, value in named if value]
