"""Hard budget limits at the proxy: which scopes are over their limit, checked in memory.

Where every budget with a hard limit stands is recomputed from the database every
``budget_refresh_s`` (spend = the ledger, plus metered usage since it, priced at each
deployment's latest unit cost: :func:`app.budgets.service.hard_limit_standings`). A request
in an over-limit scope gets 429; requests already in flight finish. Between two refreshes
spend can pass the limit by what the scope spends in one interval, plus what is in flight.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import Engine

from app.budgets.rules.budget import BudgetScope, ScopeKind
from app.budgets.service import HardLimitStanding, hard_limit_standings
from app.db import read_session
from serving.proxy.attribution import Attribution


class BudgetGuard:
    """Budgets with a hard limit and their spend; :meth:`refresh` is blocking (run it in a
    thread)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._standings: tuple[HardLimitStanding, ...] = ()

    def refresh(self) -> None:
        now = datetime.now(UTC)
        with read_session(self._engine) as session:
            self._standings = tuple(hard_limit_standings(session, now=now))

    def limit_for(self, attribution: Attribution, deployment: str) -> HardLimitStanding | None:
        """The first over-limit budget whose scope holds this request, if any."""
        now = datetime.now(UTC)
        for standing in self._standings:
            if (
                standing.reached
                and now < standing.period_end
                and standing.scope.matches(
                    team=attribution.team,
                    cost_center=attribution.cost_center,
                    deployment=deployment,
                    tags=attribution.tags,
                )
            ):
                return standing
        return None

    def team_headroom(self, attribution: Attribution) -> HardLimitStanding | None:
        """Of the budgets of the team the request's key bills (or a trusted gateway's key
        names), the one with the least left before its hard limit; None when there is none,
        and for a request without a key (a team header alone does not show a budget)."""
        grant = attribution.grant
        if attribution.team is None or grant is None:
            return None
        if not grant.gateway and grant.team != attribution.team:
            return None
        own = BudgetScope(ScopeKind.team, attribution.team)
        now = datetime.now(UTC)
        found = [s for s in self._standings if s.scope == own and now < s.period_end]
        return min(found, key=lambda s: s.remaining_micros, default=None)
