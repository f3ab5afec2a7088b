"""Admission with a reservation (pure): what fits is reserved, what ends is settled, a refresh
takes back what the database has counted, and several processes together stay within the
hard limit."""

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.budgets.rules.admission import Admission, Reservation, Standing

T0 = datetime(2026, 12, 7, 12, tzinfo=UTC)
LIMIT = 1_000


def test_a_request_that_does_not_fit_is_refused_and_reserves_nothing() -> None:
    admission = Admission()
    admission.rebase({1: Standing(LIMIT, 700), 2: Standing(LIMIT, 0)}, cut=T0)
    first = admission.admit([1, 2], 200)
    assert first == Reservation((1, 2), 200)
    assert admission.admit([2, 1], 101) == 1  # 700 + 200 + 101 > 1,000
    assert (admission.used(1), admission.used(2)) == (200, 200)
    assert isinstance(admission.admit([1], 100), Reservation)  # exactly the limit fits
    assert admission.admit([1], 1) == 1


def test_settling_replaces_the_reservation_with_the_cost() -> None:
    admission = Admission()
    admission.rebase({1: Standing(LIMIT, 0)}, cut=T0)
    held = admission.admit([1], 600)
    assert isinstance(held, Reservation)
    assert admission.admit([1], 500) == 1
    admission.settle(held, 250, ended=T0 + timedelta(seconds=1))
    assert admission.used(1) == 250
    assert isinstance(admission.admit([1], 500), Reservation)


def test_a_refresh_drops_only_what_ended_before_its_cut() -> None:
    admission = Admission()
    admission.rebase({1: Standing(LIMIT, 0)}, cut=T0)
    early, late, _running = (admission.admit([1], 100) for _ in range(3))
    assert isinstance(early, Reservation)
    assert isinstance(late, Reservation)
    admission.settle(early, 80, ended=T0 + timedelta(seconds=1))
    admission.settle(late, 90, ended=T0 + timedelta(seconds=3))
    # The database now holds the early request (it ended before the cut), not the late one.
    admission.rebase({1: Standing(LIMIT, 80)}, cut=T0 + timedelta(seconds=2))
    assert admission.used(1) == 90 + 100  # the late one settled, the running one reserved
    assert admission.allowance(1) == LIMIT - 80


def test_budgets_it_does_not_know_do_not_bind_and_shares_split_the_headroom() -> None:
    admission = Admission(shares=3)
    admission.rebase({1: Standing(LIMIT, 400)}, cut=T0)
    assert admission.allowance(1) == 200
    assert isinstance(admission.admit([7], 10**9), Reservation)
    with pytest.raises(ValueError, match="at least 1"):
        Admission(shares=0)


operations = st.lists(
    st.one_of(
        st.tuples(st.just("admit"), st.integers(0, 2), st.integers(0, 400)),
        st.tuples(st.just("end"), st.integers(0, 50), st.integers(0, 100)),
        st.tuples(st.just("refresh"), st.just(0), st.just(0)),
    ),
    max_size=80,
)


@settings(max_examples=200, deadline=None)
@given(
    ops=operations,
    processes=st.integers(1, 3),
    spent=st.integers(0, LIMIT),
    limit_shift=st.integers(-50, 50),
)
def test_processes_refreshing_together_never_pass_the_hard_limit(
    ops: list[tuple[str, int, int]], processes: int, spent: int, limit_shift: int
) -> None:
    """Requests cost at most their estimate: then what the scope has spent, plus what is in
    flight at its estimate, never passes the limit, however requests interleave with the
    refreshes, when every process takes the same refreshes (the proxy's wall-clock ticks)."""
    limit = max(spent, LIMIT + limit_shift)
    fleet = [Admission(shares=processes) for _ in range(processes)]
    ended: list[tuple[datetime, int]] = []  # what the database will count
    flight: list[tuple[int, Reservation]] = []
    now = T0

    def database_spend(cut: datetime) -> int:
        return spent + sum(cost for at, cost in ended if at < cut)

    for admission in fleet:
        admission.rebase({1: Standing(limit, spent)}, cut=now)
    for op, number, amount in ops:
        now += timedelta(seconds=1)
        if op == "admit":
            process = number % processes
            held = fleet[process].admit([1], amount)
            if isinstance(held, Reservation):
                flight.append((process, held))
        elif op == "end" and flight:
            process, held = flight.pop(number % len(flight))
            cost = held.estimate_micros * amount // 100
            fleet[process].settle(held, cost, ended=now)
            ended.append((now, cost))
        elif op == "refresh":
            cut = now - timedelta(microseconds=1)
            for admission in fleet:
                admission.rebase({1: Standing(limit, database_spend(cut))}, cut=cut)
        spend = spent + sum(cost for _, cost in ended)
        assert spend + sum(held.estimate_micros for _, held in flight) <= limit
