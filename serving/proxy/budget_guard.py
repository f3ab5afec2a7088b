"""Hard budget limits at the proxy: admission with a reservation, checked in memory.

Every ``budget_refresh_s`` the proxy reads where each budget with a hard limit stands (spend
= the ledger, plus metered usage at each deployment's latest unit cost:
:func:`app.budgets.service.hard_limit_standings`), counting only usage that finished before
a cut: ``budget_settle_lag_s`` before the start of the refresh's wall-clock tick (a multiple
of ``budget_refresh_s``), so the usage sink has written it by then, and every proxy process
in front of the same budgets takes the same cut.
Between refreshes each admitted request reserves its expected cost (the rate card's price of
its prompt and its ``max_tokens``) and settles its metered cost when it ends
(:mod:`app.budgets.rules.admission`). A request whose expected cost does not fit in what is
left gets 429; requests already in flight finish. So a scope passes its limit by at most
what its requests in flight cost beyond their estimates.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine

from app.budgets.rules.admission import Admission, Reservation, Standing
from app.budgets.rules.budget import BudgetScope, ScopeKind
from app.budgets.rules.steps import BudgetStep, StepAction, step_in_force
from app.budgets.service import HardLimitStanding, hard_limit_standings
from app.db import read_session
from serving.proxy.attribution import Attribution


class BudgetGuard:
    """Budgets with a hard limit, their spend and this process's reservations;
    :meth:`refresh` is blocking (run it in a thread), the rest runs on the event loop."""

    def __init__(
        self, engine: Engine, *, shares: int = 1, settle_lag_s: float = 2.0, tick_s: float = 5.0
    ) -> None:
        self._engine = engine
        self._lag = timedelta(seconds=settle_lag_s)
        self._tick_us = max(1, int(tick_s * 1e6))
        self._standings: tuple[HardLimitStanding, ...] = ()
        self._admission = Admission(shares=shares)
        self._lock = threading.Lock()

    def refresh(self) -> None:
        now = datetime.now(UTC)
        cut = _tick_start(now, self._tick_us) - self._lag
        with read_session(self._engine) as session:
            standings = tuple(hard_limit_standings(session, now=now, metered_before=cut))
        with self._lock:
            self._standings = standings
            self._admission.rebase(
                {s.budget_id: Standing(s.hard_limit_micros, s.spent_micros) for s in standings},
                cut=cut,
            )

    @property
    def has_limits(self) -> bool:
        """Whether any budget with a hard limit is live (else nothing needs reserving)."""
        return bool(self._standings)

    def _binding(self, attribution: Attribution, deployment: str) -> list[HardLimitStanding]:
        now = datetime.now(UTC)
        return [
            standing
            for standing in self._standings
            if now < standing.period_end
            and standing.scope.matches(
                team=attribution.team,
                cost_center=attribution.cost_center,
                deployment=deployment,
                tags=attribution.tags,
            )
        ]

    def limit_for(self, attribution: Attribution, deployment: str) -> HardLimitStanding | None:
        """The first budget whose scope holds this request and whose spend has reached its
        hard limit, if any."""
        with self._lock:
            return next(
                (s for s in self._binding(attribution, deployment) if self._reached(s)), None
            )

    def reserve(
        self, attribution: Attribution, deployment: str, estimate_micros: int
    ) -> Reservation | HardLimitStanding:
        """Reserve a request's expected cost in every budget it falls under, or the first
        budget where it does not fit."""
        with self._lock:
            binding = {s.budget_id: s for s in self._binding(attribution, deployment)}
            admitted = self._admission.admit(binding, estimate_micros)
        return admitted if isinstance(admitted, Reservation) else binding[admitted]

    def settle(self, reservation: Reservation, cost_micros: int) -> None:
        """A request ended: its metered cost replaces its reservation."""
        with self._lock:
            self._admission.settle(reservation, cost_micros, ended=datetime.now(UTC))

    def step_for(
        self, attribution: Attribution, deployment: str
    ) -> tuple[HardLimitStanding, BudgetStep] | None:
        """The brownout step in force for this request: of the budgets it falls under, the
        most severe step their spend has reached (a route before a warning, then the higher
        percentage), by :meth:`_counted` spend."""
        found = []
        with self._lock:
            for standing in self._binding(attribution, deployment):
                if not standing.steps:
                    continue
                step = step_in_force(
                    standing.steps,
                    hard_limit_micros=standing.hard_limit_micros,
                    spent_micros=self._counted(standing),
                )
                if step is not None:
                    found.append((standing, step))
        return max(
            found,
            key=lambda pair: (pair[1].action is StepAction.route, pair[1].at_percent),
            default=None,
        )

    def counted(self, standing: HardLimitStanding) -> int:
        """The spend the proxy counts against the standing's limit (:meth:`_counted`)."""
        with self._lock:
            return self._counted(standing)

    def team_headroom(self, attribution: Attribution) -> tuple[HardLimitStanding, int] | None:
        """Of the budgets of the team the request's key bills (or a trusted gateway's key
        names), the one with the least left before its hard limit, and what is left; None
        when there is none, and for a request without a key (a team header alone does not
        show a budget). What is left is the limit less the spend this process counts
        (:meth:`_counted`, scaled by the shares), so it reaches zero where this process
        starts to refuse."""
        grant = attribution.grant
        if attribution.team is None or grant is None:
            return None
        if not grant.gateway and grant.team != attribution.team:
            return None
        own = BudgetScope(ScopeKind.team, attribution.team)
        now = datetime.now(UTC)
        with self._lock:
            found = [
                (s, max(0, s.hard_limit_micros - self._counted(s)))
                for s in self._standings
                if s.scope == own and now < s.period_end
            ]
        return min(found, key=lambda pair: pair[1], default=None)

    def _reached(self, standing: HardLimitStanding) -> bool:
        return self._counted(standing) >= standing.hard_limit_micros

    def _counted(self, standing: HardLimitStanding) -> int:
        """The refresh's spend plus what this process has reserved and settled since, scaled
        by the shares: each process admits against its share of the headroom, so its share
        used up is the limit reached, and a step acts at the same point of the share."""
        return standing.spent_micros + self._admission.used(standing.budget_id) * (
            self._admission.shares
        )


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _tick_start(at: datetime, tick_us: int) -> datetime:
    """The start of the wall-clock tick holding ``at``: every proxy process refreshing in
    the same tick takes the same cut, so each request ends either before it (the database
    counts it) or after it (the process that relayed it counts it), never both or neither."""
    elapsed = (at - _EPOCH) // timedelta(microseconds=1)
    return _EPOCH + timedelta(microseconds=elapsed - elapsed % tick_us)
