"""Allocation, unit costs, sessions, chargeback and waste through the API, on both databases."""

import csv
import io
from decimal import Decimal
from typing import Any

from fastapi.testclient import TestClient

from tests.api.conftest import Seeded

BILL = Decimal("15.95")
"""Two GPU hours at 7.20, networking 1.00 and an untagged storage row 0.55."""


def _get(
    client: TestClient,
    seeded: Seeded,
    path: str,
    who: str = "admin",
    **params: str | int | float | bool,
) -> Any:
    response = client.get(path, params=params, headers=seeded.keys.header(who))
    assert response.status_code == 200, response.text
    return response.json()


def _total(items: list[dict[str, Any]]) -> Decimal:
    return sum((Decimal(item["cost"]) for item in items), Decimal(0))


def test_allocation_adds_up_to_the_bill_with_either_idle_policy(
    client: TestClient, seeded: Seeded
) -> None:
    separate = _get(client, seeded, "/v1/allocation", window="2026-10", aggregate="team")
    shared = _get(
        client, seeded, "/v1/allocation", window="2026-10", aggregate="team", idle="share"
    )
    for body in (separate, shared):
        assert _total(body["items"]) == BILL
        assert body["totals"] == {"USD": "15.950000"}
    teams = {item["properties"]["team"]: item for item in separate["items"]}
    assert set(teams) == {"orchid", "walrus", "(idle)", "(unallocated)"}
    shared_teams = {item["properties"]["team"]: item for item in shared["items"]}
    assert "(idle)" not in shared_teams  # every GPU hour had requests to share it with
    idle = Decimal(teams["(idle)"]["cost"])
    moved = sum(Decimal(shared_teams[t]["idle_cost"]) for t in ("orchid", "walrus"))
    assert moved == idle


def test_a_team_sees_exactly_its_share_of_shared_idle(client: TestClient, seeded: Seeded) -> None:
    admin = _get(
        client,
        seeded,
        "/v1/allocation",
        window="2026-10",
        aggregate="team",
        idle="share",
        step="hour",
    )
    orchid = _get(
        client,
        seeded,
        "/v1/allocation",
        "orchid",
        window="2026-10",
        aggregate="team",
        idle="share",
        step="hour",
    )
    mine = {
        (i["start"], i["properties"]["team"]): i
        for i in admin["items"]
        if i["properties"]["team"] == "orchid"
    }
    assert {(i["start"], i["properties"]["team"]): i for i in orchid["items"]} == mine


def test_allocation_steps_aggregates_metric_and_csv(client: TestClient, seeded: Seeded) -> None:
    hourly = _get(
        client, seeded, "/v1/allocation", window="2026-10-01", aggregate="deployment", step="hour"
    )
    starts = sorted({item["start"] for item in hourly["items"]})
    assert starts == ["2026-10-01T00:00:00Z", "2026-10-01T01:00:00Z"]
    assert all(item["end"] <= "2026-10-02T00:00:00Z" for item in hourly["items"])
    billed = _get(
        client,
        seeded,
        "/v1/allocation",
        window="2026-10",
        aggregate="tag:app,model",
        cost_metric="billed",
    )
    assert {tuple(i["properties"].values()) for i in billed["items"]} >= {
        ("orchid-app", "smollm2-135m"),
        ("walrus-app", "smollm2-135m"),
    }
    assert _total(billed["items"]) == BILL
    page = _get(
        client, seeded, "/v1/allocation", window="2026-10", aggregate="session", limit=2, offset=0
    )
    assert len(page["items"]) == 2
    assert page["next_offset"] == 2
    assert page["total"] > 2
    response = client.get(
        "/v1/allocation",
        params={"window": "2026-10", "aggregate": "team", "format": "csv"},
        headers=seeded.keys.header("admin"),
    )
    assert response.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert sum(Decimal(r["cost"]) for r in rows) == BILL
    empty = _get(client, seeded, "/v1/allocation", window="2026-09", aggregate="team")
    assert empty["items"] == []


def test_unit_costs_and_sessions(client: TestClient, seeded: Seeded) -> None:
    costs = _get(client, seeded, "/v1/costs", month="2026-10", by="team")
    assert sum(Decimal(i["effective_cost"]) for i in costs["items"]) == BILL
    orchid = next(i for i in costs["items"] if i["properties"]["team"] == "orchid")
    assert orchid["requests"] == 3
    sessions = _get(client, seeded, "/v1/sessions", "orchid", window="2026-10")
    assert [s["session_id"] for s in sessions["items"]] == ["sess-orchid-1", "sess-orchid-2"]
    first = sessions["items"][0]
    assert first["session_seconds"] == 15.0  # 0..10 s and 5..15 s overlap
    assert first["requests"] == 2
    assert Decimal(first["effective_cost"]) > 0
    detail = _get(client, seeded, "/v1/sessions/sess-orchid-1", "orchid")
    assert detail["total_requests"] == 2
    assert sum(Decimal(r["effective_cost"]) for r in detail["requests"]) == Decimal(
        first["effective_cost"]
    )


def test_chargeback_downloads_add_up(client: TestClient, seeded: Seeded) -> None:
    response = client.get(
        "/v1/chargeback", params={"month": "2026-10"}, headers=seeded.keys.header("admin")
    )
    assert response.status_code == 200
    assert "chargeback-2026-10.csv" in response.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert sum(Decimal(r["effective_cost"]) for r in rows) == BILL
    parquet = client.get(
        "/v1/chargeback",
        params={"month": "2026-10", "format": "parquet"},
        headers=seeded.keys.header("orchid"),
    )
    assert parquet.content[:4] == b"PAR1"


def test_waste_flags_poor_acceptance_and_speculation_above_breakeven(
    client: TestClient, seeded: Seeded
) -> None:
    admin = _get(client, seeded, "/v1/waste", window="2026-10")
    kinds = {(f["kind"], f["scope"], f["key"]) for f in admin["findings"]}
    assert ("low_acceptance", "team", "walrus") in kinds
    assert ("low_acceptance", "session", "sess-walrus-1") in kinds
    assert ("above_breakeven", "deployment", "d1") in kinds
    assert not any(key == "orchid" or key.startswith("sess-orchid") for _, _, key in kinds)
    assert admin["observed_seconds"] == 31 * 86_400
    for finding in admin["findings"]:  # October is longer than the average month
        expected = Decimal(finding["window_cost"]) * Decimal("30.4375") / 31
        assert abs(Decimal(finding["estimated_monthly_cost"]) - expected) <= Decimal("0.000001")
        assert finding["action"]
    walrus = _get(client, seeded, "/v1/waste", "walrus", window="2026-10")
    assert {f["kind"] for f in walrus["findings"]} == {"low_acceptance", "above_breakeven"}
    orchid = _get(client, seeded, "/v1/waste", "orchid", window="2026-10")
    assert orchid["findings"] == []
    strict = _get(client, seeded, "/v1/waste", window="2026-10", min_requests=100)
    assert not any(f["kind"] == "low_acceptance" for f in strict["findings"])


def test_breakeven_and_tiers(client: TestClient, seeded: Seeded) -> None:
    sweeps = _get(client, seeded, "/v1/breakeven/sweeps")
    assert sweeps[0]["id"] == seeded.sweep_id
    assert 4 < sweeps[0]["breakeven_concurrency"] < 5
    fit = _get(
        client, seeded, f"/v1/breakeven/sweeps/{seeded.sweep_id}/fit", refit=True, bootstrap=20
    )
    assert fit["computed_now"] is True
    assert fit["breakeven_ci"] is not None
    assert fit["schedule"][-1][2] == 0
    recommendation = _get(
        client,
        seeded,
        "/v1/tiers/recommendation",
        concurrency=10,
        tpot_p90=0.05,
        sweep=seeded.sweep_id,
    )
    assert recommendation["recommended"] in {"prototype", "scaled", "enterprise"}
