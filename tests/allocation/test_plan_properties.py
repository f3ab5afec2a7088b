"""Property tests of the allocation plan on DuckDB: money sums to the bill, exactly, for any
bill and usage, and each share is what the rules say (checked against a Python oracle)."""

from collections import defaultdict
from fractions import Fraction
from typing import Any

import pyarrow as pa
from hypothesis import given, settings

from app.allocation.engine import PlanEngine, PlanResult
from app.allocation.plan import BASES
from app.domain.allocation import split_by_weight
from app.domain.ledger import AllocationMethod, EntryKind, SharedPolicy
from app.domain.money import exact_picos, residual_column
from tests.allocation.scenarios import Fleet, Month, Request, Row, months

DUCKDB = PlanEngine()
TWO_LEVEL = {AllocationMethod.gpu_seconds_two_level, AllocationMethod.proportional_two_level}


def _records(table: pa.Table) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = table.to_pylist()
    return records


def _pool_members(result: PlanResult) -> dict[int, list[int]]:
    members: dict[int, list[int]] = defaultdict(list)
    for m in _records(result.pool_rows):
        members[m["pool_id"]].append(m["billing_row_id"])
    for e in _records(result.entries):
        if e["billing_row_id"] is not None and e["pool_id"] not in members:
            members[e["pool_id"]] = [e["billing_row_id"]]
    return members


@settings(max_examples=25, deadline=None)
@given(months(), months())
def test_every_pool_sums_exactly_to_its_rows_and_every_row_is_in_one_pool(
    month: Month, other: Month
) -> None:
    for share_idle, sample in ((False, month), (True, other)):
        inputs = sample.inputs()
        result = DUCKDB.allocate(inputs, share_idle=share_idle)
        rows = {r["row_id"]: r for r in _records(inputs["rows"])}
        members = _pool_members(result)
        pooled = [row for rows_of in members.values() for row in rows_of]
        assert sorted(pooled) == sorted(rows)
        sums: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for e in _records(result.entries):
            for _, out in BASES:
                sums[e["pool_id"]][out] += e[out]
        for pool, rows_of in members.items():
            for source, out in BASES:
                assert sums[pool][out] == sum(rows[r][source] for r in rows_of), (pool, out)


@settings(max_examples=25, deadline=None)
@given(months())
def test_each_share_is_the_rule_applied_to_the_oracle_weights(month: Month) -> None:
    inputs = month.inputs()
    result = DUCKDB.allocate(inputs, share_idle=False)
    rows = {r["row_id"]: r for r in _records(inputs["rows"])}
    requests = {q["event_id"]: q for q in _records(inputs["usage"])}
    deployments = {d["deployment"]: d for d in _records(inputs["deployments"])}
    by_resource = {r["resource_id"]: r for r in _records(inputs["replicas"])}
    members = _pool_members(result)
    by_pool: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in _records(result.entries):
        by_pool[e["pool_id"]].append(e)

    for pool, entries in by_pool.items():
        lead = rows[pool]
        replica = by_resource.get(lead["resource_id"])
        deployment = replica["deployment"] if replica else lead["tag_value"]
        if deployment not in deployments:
            assert [e["kind"] for e in entries] == [EntryKind.unallocated]
            continue
        method = AllocationMethod(entries[0]["method"])
        if method not in {AllocationMethod.gpu_seconds, AllocationMethod.proportional, *TWO_LEVEL}:
            continue  # split by team: weights of one each, checked below
        expected = _oracle_weights(lead, replica, deployment, requests.values())
        got = {e["event_id"]: e["gpu_ns"] for e in entries if e["event_id"] is not None}
        assert got == {k: v for k, v in expected.items() if v > 0}
        cost = sum(rows[r]["effective"] for r in members[pool])
        exact = sum(
            exact_picos(rows[r]["effective"], rows[r]["effective_residual_picos"])
            for r in members[pool]
        )
        weights = {_key(e, requests): e["gpu_ns"] for e in entries}
        total = sum(weights.values())
        # The micros: each the floor or the ceiling of its share, summing to the pool's.
        for e in entries:
            share = Fraction(cost * e["gpu_ns"], total)
            bound = 2 if method in TWO_LEVEL else 1
            assert abs(e["effective_cost_micros"] - share) < bound
        assert sum(e["effective_cost_micros"] for e in entries) == cost
        if method in TWO_LEVEL:
            continue
        # The exact amounts (micros and residual): the rule applied at the pico.
        split = split_by_weight(exact, weights)
        got = {
            _key(e, requests): exact_picos(
                e["effective_cost_micros"], e["effective_cost_residual_picos"]
            )
            for e in entries
        }
        assert got == {k: split.get(k, 0) for k in weights}


def test_a_pool_longer_than_an_hour_is_split_in_two_levels_and_sums_exactly() -> None:
    picos = 1_000_000_007_123_456  # 1,000.000007123456
    fee = Row(0, 30, picos, picos, 0, 0, "d1", None, True)
    requests = [
        Request("d1", "r1", team, "s", hour * 3600 + 60 * k, 10, 10**9 + k, 0)
        for hour in range(30)
        for k, team in enumerate(["a", "b", None])
    ]
    month = Month([fee], requests, [Fleet({"d1": (SharedPolicy.proportional, None)})])
    result = DUCKDB.allocate(month.inputs(), share_idle=False)
    entries = _records(result.entries)
    assert {e["method"] for e in entries} == {AllocationMethod.gpu_seconds_two_level}
    assert sum(e["effective_cost_micros"] for e in entries) == 1_000_000_007
    exact = sum(
        exact_picos(e["effective_cost_micros"], e["effective_cost_residual_picos"]) for e in entries
    )
    assert exact == picos
    assert len([e for e in entries if e["kind"] == EntryKind.request]) == 90


def _key(entry: dict[str, Any], requests: dict[str, dict[str, Any]]) -> tuple[bool, int, int]:
    """The plan's tie-break order: requests before idle, then arrival, then insertion."""
    q = requests.get(entry["event_id"])
    return (True, 0, 0) if q is None else (False, q["arrived_us"], q["usage_ord"])


def _oracle_weights(
    row: dict[str, Any], replica: dict[str, Any] | None, deployment: str, requests: Any
) -> dict[str, int]:
    """GPU-ns of each request inside the row's charge period (pro rata of its wall time)."""
    start, end = row["start_us"], row["end_us"]
    out = {}
    for q in requests:
        if q["deployment"] != deployment or (replica and q["replica"] != replica["replica"]):
            continue
        a, f = q["arrived_us"], q["finished_us"]
        if not (a < end and (f > start or (f == a and a >= start))):
            continue
        if f - a <= 0 or (a >= start and f <= end):
            out[q["event_id"]] = q["gpu_ns"]
        else:
            overlap = min(f, end) - max(a, start)
            out[q["event_id"]] = q["gpu_ns"] * overlap // (f - a)
    return out


@settings(max_examples=25, deadline=None)
@given(months())
def test_every_pool_sums_to_its_rows_exactly_to_the_pico(month: Month) -> None:
    """Amounts with twelve decimal places (credits too): the entries' exact amounts, micros
    and residual, sum to the pool's rows exactly, and each residual keeps its entry within a
    micro of its exact share."""
    for share_idle in (False, True):
        inputs = month.inputs()
        result = DUCKDB.allocate(inputs, share_idle=share_idle)
        rows = {r["row_id"]: r for r in _records(inputs["rows"])}
        members = _pool_members(result)
        exact: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for e in _records(result.entries):
            for _, out in BASES:
                exact[e["pool_id"]][out] += exact_picos(e[out], e[residual_column(out)])
        for pool, rows_of in members.items():
            for source, out in BASES:
                bill = sum(
                    exact_picos(rows[r][source], rows[r][residual_column(source)]) for r in rows_of
                )
                assert exact[pool][out] == bill, (pool, out)
