"""Hard budget limits at the proxy: which scopes are over their limit, checked in memory.

The list of budgets over their hard limit is recomputed from the database every
``budget_refresh_s`` (spend = the ledger, plus metered usage since it, priced at each
deployment's latest unit cost: :func:`app.budgets.service.over_hard_limits`). A request in
an over-limit scope gets 429; requests already in flight finish. Between two refreshes spend
can pass the limit by what the scope spends in one interval, plus what is in flight.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import Engine

from app.budgets.service import OverLimit, over_hard_limits
from app.db import read_session
from serving.proxy.attribution import Attribution


class BudgetGuard:
    """Budgets over their hard limit; :meth:`refresh` is blocking (run it in a thread)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._over: tuple[OverLimit, ...] = ()

    def refresh(self) -> None:
        now = datetime.now(UTC)
        with read_session(self._engine) as session:
            self._over = tuple(over_hard_limits(session, now=now))

    def limit_for(self, attribution: Attribution, deployment: str) -> OverLimit | None:
        """The first over-limit budget whose scope holds this request, if any."""
        now = datetime.now(UTC)
        for over in self._over:
            if now < over.period_end and over.scope.matches(
                team=attribution.team,
                cost_center=attribution.cost_center,
                deployment=deployment,
                tags=attribution.tags,
            ):
                return over
        return None
