"""The FOCUS 1.3 export against the 1.3 text's rules for data generator-calculated split cost
allocation (attribute DataGeneratorCalculatedSplitCostAllocationHandling, columns
AllocatedMethodId / AllocatedMethodDetails / AllocatedResourceId / AllocatedTags), on a month
allocated from the 1.3 fixture through the CLI.

Each source billing row is an *origin charge*, its shares are the *allocated charges*."""

import json
import re
from collections import defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from app.domain.focus import BY_NAME, SUMMABLE_DECIMALS, Kind
from app.domain.periods import Month
from app.ledger.focus_export import focus_allocation_table
from app.models import BillingRow
from tests.focus.exported import AWS_1_3, allocate_october, export_october

SUMMABLE = ("BilledCost", "EffectiveCost", "ListCost", "ContractedCost")
QUANTITIES = ("PricingQuantity", "ConsumedQuantity")  # and PricingCurrencyEffectiveCost
NON_SUMMABLE = ("ListUnitPrice", "ContractedUnitPrice")
ISO_Z = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
CUSTOM_KEY = re.compile(r"^x_[A-Z][A-Za-z0-9]*$")


@pytest.fixture
def exported(engine: Engine, cli_env: str, tmp_path: Path) -> list[dict[str, Any]]:
    allocate_october(engine, AWS_1_3)
    rows: list[dict[str, Any]] = export_october(tmp_path / "focus.parquet").to_pylist()
    return rows


@pytest.fixture
def origins(engine: Engine, exported: list[dict[str, Any]]) -> dict[int, BillingRow]:
    with Session(engine) as session:
        return {row.id: row for row in session.scalars(select(BillingRow))}


def _by_origin(rows: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    shares: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        shares[row["x_SourceBillingRowId"]].append(row)
    return shares


def _details(row: dict[str, Any]) -> Any:
    return json.loads(row["AllocatedMethodDetails"], parse_float=Decimal)


def test_every_origin_charge_is_exported(
    exported: list[dict[str, Any]], origins: dict[int, BillingRow]
) -> None:
    assert set(_by_origin(exported)) == set(origins)
    assert len(origins) == 4
    assert len(exported) > len(origins)  # the GPU hours were split into several shares


def test_summable_metrics_of_the_allocated_charges_sum_to_the_origin(
    exported: list[dict[str, Any]], origins: dict[int, BillingRow]
) -> None:
    for row_id, shares in _by_origin(exported).items():
        origin = origins[row_id]
        micros = {
            "BilledCost": origin.billed_cost_micros,
            "EffectiveCost": origin.effective_cost_micros,
            "ListCost": origin.list_cost_micros,
            "ContractedCost": origin.contracted_cost_micros,
        }
        for column in SUMMABLE:
            assert sum(s[column] for s in shares) * 10**6 == micros[column], (row_id, column)
        for column, total in zip(
            QUANTITIES, (origin.pricing_quantity, origin.consumed_quantity), strict=True
        ):
            assert sum(Decimal(s[column]) for s in shares) == Decimal(str(total)), column
        assert sum(Decimal(s["PricingCurrencyEffectiveCost"]) for s in shares) * 10**6 == (
            origin.effective_cost_micros
        )


def test_quantities_are_split_with_the_costs(exported: list[dict[str, Any]]) -> None:
    gpu_hours = [r for r in exported if r["ServiceName"] == "Amazon Elastic Compute Cloud"]
    for share in gpu_hours:
        ratio = sum(e["AllocatedRatio"] for e in _details(share)["Elements"])
        assert abs(Decimal(share["PricingQuantity"]) - ratio) < Decimal("1e-9")
        assert abs(share["EffectiveCost"] - ratio * Decimal("29.49534")) <= Decimal("0.000001")


def test_allocated_ratios_of_one_origin_sum_to_exactly_one(
    exported: list[dict[str, Any]],
) -> None:
    split = {k: v for k, v in _by_origin(exported).items() if v[0]["AllocatedMethodId"]}
    assert len(split) == 3  # the storage row matched no deployment: not split
    for shares in split.values():
        ratios = [e["AllocatedRatio"] for s in shares for e in _details(s)["Elements"]]
        assert all(isinstance(r, Decimal) and 0 <= r <= 1 for r in ratios)
        assert sum(ratios) == 1


def test_allocated_method_details_follow_the_object_schema(
    exported: list[dict[str, Any]],
) -> None:
    for row in exported:
        if row["AllocatedMethodId"] is None:
            assert row["AllocatedMethodDetails"] is None
            continue
        details = _details(row)
        assert isinstance(details, dict)
        assert isinstance(details["Elements"], list)
        assert details["Elements"]
        for key in details.keys() - {"Elements"}:
            assert CUSTOM_KEY.match(key), key
        for element in details["Elements"]:
            assert "AllocatedRatio" in element
            assert "UsageUnit" in element or "UsageQuantity" not in element
            for key in element.keys() - {"AllocatedRatio", "UsageUnit", "UsageQuantity"}:
                assert CUSTOM_KEY.match(key), key


def test_dimensions_and_unit_prices_equal_the_origin(exported: list[dict[str, Any]]) -> None:
    own = {*SUMMABLE, *SUMMABLE_DECIMALS, "x_SourceBillingRowId"}
    for shares in _by_origin(exported).values():
        for column in shares[0]:
            if column in own or column.startswith("Allocated"):
                continue
            assert len({json.dumps(s[column], default=str) for s in shares}) == 1, column
    assert all(r["ListUnitPrice"] == "32.7726" for r in exported if r["SkuId"] == "SKUP4D24XL")


def test_allocated_charges_keep_the_origin_tags(exported: list[dict[str, Any]]) -> None:
    for row in exported:
        if row["AllocatedMethodId"] is not None:
            assert json.loads(row["Tags"]) == {"specledger-deployment": "d1"}
            assert json.loads(row["AllocatedTags"])["deployment"] == "d1"


def test_unsplit_rows_have_no_allocated_columns(exported: list[dict[str, Any]]) -> None:
    storage = [r for r in exported if r["ServiceCategory"] == "Storage"]
    assert len(storage) == 1
    assert all(
        storage[0][c] is None
        for c in (
            "AllocatedMethodId",
            "AllocatedMethodDetails",
            "AllocatedResourceId",
            "AllocatedResourceName",
            "AllocatedTags",
        )
    )
    assert storage[0]["PricingQuantity"] == "3.000000000"


def test_general_1_3_rules_hold(exported: list[dict[str, Any]]) -> None:
    """Mandatory 1.3 providers, ISO-8601 Z times, no empty strings for nulls, FOCUS columns
    before ``x_`` ones, JSON columns are objects."""
    names = list(exported[0])
    first_custom = next(i for i, n in enumerate(names) if n.startswith("x_"))
    assert all(n.startswith("x_") for n in names[first_custom:])
    assert all(n in BY_NAME for n in names[:first_custom])
    for row in exported:
        assert row["HostProviderName"] == row["ServiceProviderName"] == "AWS"
        for column in ("BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart"):
            assert ISO_Z.match(row[column]), row[column]
        for name, value in row.items():
            assert value != "", name
            if (
                name in BY_NAME
                and BY_NAME[name].kind in (Kind.json, Kind.json_object)
                and value is not None
            ):
                assert isinstance(json.loads(value), dict), name


def test_a_teams_export_is_the_whole_exports_rows_of_the_team(
    engine: Engine, exported: list[dict[str, Any]]
) -> None:
    """A team's rows are split with every share of their source row (ratios, quantities,
    largest remainder) and only then kept: the same rows, values and order as the whole
    export's rows tagged with the team, pooled rows and rows split alone alike."""
    with Session(engine) as session:
        for team in ("search", "ads"):
            mine = focus_allocation_table(session, Month(2026, 10), team=team).to_pylist()
            theirs = [
                r for r in exported if json.loads(r["AllocatedTags"] or "{}").get("team") == team
            ]
            assert mine
            assert mine == theirs
