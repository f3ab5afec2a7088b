"""Property tests of the allocation core: money sums to the bill, for any bill and usage."""

from fractions import Fraction
from typing import TypedDict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.allocation.compute import BillingRows, DeploymentPolicy, Usage, allocate
from app.domain.ledger import AllocationMethod, CostLabel, EntryKind, SharedPolicy

HOUR = 3_600 * 10**9
money = st.integers(min_value=-(10**12), max_value=10**12)


class _Row(TypedDict):
    """One billing row of a scenario, in nanoseconds and micros."""

    start: int
    end: int
    effective: int
    billed: int
    deployment: str | None
    replica: str | None
    compute: bool


class _Request(TypedDict):
    """One request of a scenario."""

    deployment: str
    replica: str
    team: str | None
    arrived: int
    finished: int
    gpu: int


_Scenario = tuple[list[_Row], list[_Request], dict[str, DeploymentPolicy], bool]


@st.composite
def scenarios(draw: st.DrawFn) -> _Scenario:
    n_rows = draw(st.integers(1, 12))
    deployments = ["d1", "d2"]
    rows: list[_Row] = []
    for _ in range(n_rows):
        hour = draw(st.integers(0, 5))
        rows.append(
            {
                "start": hour * HOUR,
                "end": (hour + draw(st.integers(1, 3))) * HOUR,
                "effective": draw(money),
                "billed": draw(money),
                "deployment": draw(st.sampled_from([*deployments, None])),
                "replica": draw(st.sampled_from([None, None, "r1", "r2"])),
                "compute": draw(st.booleans()),
            }
        )
    n_usage = draw(st.integers(0, 25))
    usage: list[_Request] = []
    for _ in range(n_usage):
        arrived = draw(st.integers(0, 7 * HOUR))
        usage.append(
            {
                "deployment": draw(st.sampled_from(deployments)),
                "replica": draw(st.sampled_from(["r1", "r2"])),
                "team": draw(st.sampled_from(["a", "b", None])),
                "arrived": arrived,
                "finished": arrived + draw(st.integers(0, 2 * HOUR)),
                "gpu": draw(st.integers(0, 8 * HOUR)),
            }
        )
    policies = {
        name: DeploymentPolicy(
            name,
            gpus_total=draw(st.integers(0, 8)),
            shared_policy=draw(st.sampled_from(list(SharedPolicy))),
            shared_team="platform",
            replica_gpus={"r1": 4, "r2": 2},
        )
        for name in deployments
    }
    return rows, usage, policies, draw(st.booleans())


def _arrays(rows: list[_Row], usage: list[_Request]) -> tuple[BillingRows, Usage]:
    billing = BillingRows(
        row_id=np.arange(len(rows), dtype=np.int64),
        start_ns=np.array([r["start"] for r in rows], np.int64),
        end_ns=np.array([r["end"] for r in rows], np.int64),
        effective_micros=np.array([r["effective"] for r in rows], np.int64),
        billed_micros=np.array([r["billed"] for r in rows], np.int64),
        deployment=[r["deployment"] for r in rows],
        replica=[r["replica"] if r["deployment"] else None for r in rows],
        is_compute=np.array([r["compute"] for r in rows], bool),
    )
    use = Usage(
        deployment=[u["deployment"] for u in usage],
        replica=[u["replica"] for u in usage],
        team=[u["team"] for u in usage],
        arrived_ns=np.array([u["arrived"] for u in usage], np.int64),
        finished_ns=np.array([u["finished"] for u in usage], np.int64),
        gpu_ns=np.array([u["gpu"] for u in usage], np.int64),
    )
    return billing, use


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_each_row_sums_exactly_to_its_cost(scenario: _Scenario) -> None:
    rows, usage, policies, share_idle = scenario
    billing, use = _arrays(rows, usage)

    entries = allocate(billing, use, policies, share_idle=share_idle)

    for index, row in enumerate(rows):
        mine = entries["row_index"] == index
        assert mine.any()
        assert int(entries["effective_micros"][mine].sum()) == row["effective"]
        assert int(entries["billed_micros"][mine].sum()) == row["billed"]
        if row["deployment"] is None:
            assert set(entries["kind"][mine]) == {"unallocated"}
    assert int(entries["effective_micros"].sum()) == sum(r["effective"] for r in rows)


@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_requests_get_their_gpu_share_within_one_micro(scenario: _Scenario) -> None:
    rows, usage, policies, _ = scenario
    billing, use = _arrays(rows, usage)

    entries = allocate(billing, use, policies, share_idle=False)

    for index, row in enumerate(rows):
        mine = (entries["row_index"] == index) & (entries["method"] == "gpu_seconds")
        if not mine.any():
            continue
        basis = int(entries["gpu_ns"][mine].sum())
        for weight, amount in zip(
            entries["gpu_ns"][mine], entries["effective_micros"][mine], strict=True
        ):
            exact = Fraction(row["effective"] * int(weight), basis)
            assert abs(amount - exact) < 1
        requests = entries["usage_index"][mine & (entries["kind"] == "request")]
        assert all(usage[u]["deployment"] == row["deployment"] for u in requests)


def test_every_method_the_allocation_writes_is_a_ledger_method() -> None:
    """The methods and kinds the core writes fit the typed ledger columns; an adjustment's
    method names the kind it restates."""
    assert {AllocationMethod.of_policy(policy) for policy in SharedPolicy} <= set(AllocationMethod)
    for kind in EntryKind:
        if kind is EntryKind.adjustment:
            with pytest.raises(ValueError, match="restatement:adjustment"):
                AllocationMethod.restating(kind)
            continue
        assert AllocationMethod.restating(kind).restated_kind is kind
    assert AllocationMethod.gpu_seconds.restated_kind is None
    assert CostLabel.of(EntryKind.idle) == "(idle)"
    with pytest.raises(KeyError):
        CostLabel.of(EntryKind.request)
