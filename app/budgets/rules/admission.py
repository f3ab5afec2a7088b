"""Admission with a reservation against hard budget limits (pure).

The proxy learns where each hard-limited budget stands from the database every refresh: the
spend of usage that finished before a cut a little before the refresh (the ledger, plus
metered usage at the deployment's unit cost). A request is then admitted only if its
expected cost fits in what is left: its estimate is reserved while it runs and replaced by
its metered cost when it ends, and both count until a refresh whose cut is past the end. So
a scope passes its hard limit only by what its requests in flight cost beyond their
estimates, not by what it spends in a refresh interval.

Several proxy processes (workers, hosts) in front of the same budgets each admit against an
equal share of what was left at their last refresh (``shares``), so their admissions
together stay within the limit without talking to each other.
"""

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class Reservation:
    """What one admitted request holds until it ends: its estimate, in each budget it falls
    under."""

    budget_ids: tuple[int, ...]
    estimate_micros: int


@dataclass(frozen=True, slots=True)
class Standing:
    """A budget's hard limit and the spend the database knew before the refresh's cut."""

    hard_limit_micros: int
    spent_micros: int


class Admission:
    """One proxy process's reservations and settled costs against hard limits.

    Not thread-safe: the caller serialises calls.
    """

    def __init__(self, *, shares: int = 1) -> None:
        if shares < 1:
            raise ValueError(f"shares must be at least 1, not {shares}")
        self.shares = shares
        self._allowance: dict[int, int] = {}
        self._reserved: dict[int, int] = {}
        self._settled: dict[int, deque[tuple[datetime, int]]] = {}
        self._settled_sum: dict[int, int] = {}

    def rebase(self, standings: Mapping[int, Standing], *, cut: datetime) -> None:
        """Take a refresh's standings, whose spend holds every request that ended before
        ``cut``: drop those requests' settled costs, keep the rest and every reservation."""
        self._allowance = {
            budget_id: max(0, s.hard_limit_micros - s.spent_micros) // self.shares
            for budget_id, s in standings.items()
        }
        for budget_id, settled in self._settled.items():
            while settled and settled[0][0] < cut:
                self._settled_sum[budget_id] -= settled.popleft()[1]
        for budget_id in [b for b, s in self._settled.items() if not s]:
            del self._settled[budget_id], self._settled_sum[budget_id]

    def used(self, budget_id: int) -> int:
        """Micros this process counts against the budget since its last refresh: reserved
        for requests in flight plus settled for requests that ended after the cut."""
        return self._reserved.get(budget_id, 0) + self._settled_sum.get(budget_id, 0)

    def allowance(self, budget_id: int) -> int | None:
        """This process's share of what the budget had left at the last refresh; None for a
        budget it does not know."""
        return self._allowance.get(budget_id)

    def admit(self, budget_ids: Iterable[int], estimate_micros: int) -> Reservation | int:
        """Reserve ``estimate_micros`` in every budget, or return the first budget where it
        does not fit (nothing reserved then). Budgets unknown since the last refresh do not
        bind."""
        ids = tuple(budget_ids)
        for budget_id in ids:
            allowance = self._allowance.get(budget_id)
            if allowance is not None and self.used(budget_id) + estimate_micros > allowance:
                return budget_id
        for budget_id in ids:
            self._reserved[budget_id] = self._reserved.get(budget_id, 0) + estimate_micros
        return Reservation(ids, estimate_micros)

    def settle(self, reservation: Reservation, cost_micros: int, *, ended: datetime) -> None:
        """Replace a request's reservation with its metered cost, counted until a refresh
        whose cut is after ``ended``."""
        for budget_id in reservation.budget_ids:
            self._reserved[budget_id] -= reservation.estimate_micros
            if not self._reserved[budget_id]:
                del self._reserved[budget_id]
            if cost_micros:
                self._settled.setdefault(budget_id, deque()).append((ended, cost_micros))
                self._settled_sum[budget_id] = self._settled_sum.get(budget_id, 0) + cost_micros
