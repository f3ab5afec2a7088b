"""Every tool answers what the REST API answers for the same query and key (SQLite and
PostgreSQL), through the SDK's in-memory client: the same body where the route answers 200,
and a tool error carrying the route's error code and message where it refuses."""

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mcp import Client
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from app.auth.service import create_key
from app.deps import get_now
from app.mcp.server import build_server, presenting
from app.settings import Settings
from tests.budgets.test_anomalies_db import DAYS, FIRST, INCIDENT
from tests.budgets.test_anomalies_db import _six_weeks as six_weeks
from tests.mcp.conftest import Seeded, body, error_text, run_with

NOW = datetime(2026, 10, 20, 12, tzinfo=UTC)


def cases(sweep_id: int) -> list[tuple[str, dict[str, Any], str]]:
    """(tool, arguments, the REST request for the same query)."""
    return [
        ("whoami", {}, "/v1/whoami"),
        ("unit_costs", {"month": "2026-10"}, "/v1/costs?month=2026-10"),
        (
            "unit_costs",
            {"month": "2026-10", "by": "team,deployment,session", "limit": 3, "offset": 1},
            "/v1/costs?month=2026-10&by=team,deployment,session&limit=3&offset=1",
        ),
        (
            "unit_costs",
            {"month": "2026-10", "team": "walrus"},
            "/v1/costs?month=2026-10&team=walrus",
        ),
        ("unit_costs", {"month": "2026-13"}, "/v1/costs?month=2026-13"),
        ("sessions", {"window": "2026-10"}, "/v1/sessions?window=2026-10"),
        ("sessions", {}, "/v1/sessions?window=month"),
        (
            "allocation",
            {"window": "2026-10", "aggregate": "team,model", "step": "hour", "idle": "share"},
            "/v1/allocation?window=2026-10&aggregate=team,model&step=hour&idle=share",
        ),
        (
            "allocation",
            {"window": "2026-10", "cost_metric": "billed", "team": "orchid"},
            "/v1/allocation?window=2026-10&cost_metric=billed&team=orchid",
        ),
        (
            "allocation",
            {"window": "2026-10", "aggregate": "colour"},
            "/v1/allocation?window=2026-10&aggregate=colour",
        ),
        ("reconciliation", {"month": "2026-10"}, "/v1/reconciliation?month=2026-10"),
        ("budgets", {}, "/v1/budgets"),
        ("budgets", {"budget": "budget-orchid"}, "/v1/budgets/budget-orchid"),
        ("budgets", {"budget": "budget-walrus"}, "/v1/budgets/budget-walrus"),
        ("anomalies", {}, "/v1/anomalies"),
        (
            "anomalies",
            {"granularity": "hour", "buckets": 48},
            "/v1/anomalies?granularity=hour&buckets=48",
        ),
        ("waste", {"window": "2026-10"}, "/v1/waste?window=2026-10"),
        (
            "waste",
            {"window": "2026-10", "acceptance_threshold": 0.9, "min_requests": 2, "team": "walrus"},
            "/v1/waste?window=2026-10&acceptance_threshold=0.9&min_requests=2&team=walrus",
        ),
        ("breakeven", {"deployment": "d1"}, f"/v1/breakeven/sweeps/{sweep_id}/fit"),
        ("breakeven", {"sweep_id": sweep_id}, f"/v1/breakeven/sweeps/{sweep_id}/fit"),
    ]


def _calls(server: Any, todo: list[tuple[str, dict[str, Any], str]]) -> list[Any]:
    async def calls(session: Client) -> list[Any]:
        return [await session.call_tool(name, arguments) for name, arguments, _ in todo]

    return list(run_with(server, calls))


@pytest.mark.parametrize("who", ["admin", "orchid"])
def test_each_tool_answers_the_rest_body(
    who: str, client: TestClient, seeded: Seeded, engine: Engine, db_url: str
) -> None:
    client.app.dependency_overrides[get_now] = lambda: NOW  # type: ignore[attr-defined]
    key = getattr(seeded.keys, who)
    server = build_server(
        engine, Settings(env="test", database_url=db_url), presenting(key), clock=lambda: NOW
    )
    todo = cases(seeded.sweep_id)
    results = _calls(server, todo)
    answered, refused = set(), set()
    for (name, arguments, path), result in zip(todo, results, strict=True):
        rest = client.get(path, headers=seeded.keys.header(who))
        if rest.status_code == 200:
            assert body(result) == rest.json(), (name, arguments)
            answered.add(name)
        else:
            error = rest.json()["error"]
            text = error_text(result)
            assert error["code"] in text, (name, text)
            assert error["message"].split(": ")[-1] in text, (name, text)
            refused.add((name, error["code"]))
    tools = {name for name, _, _ in todo}
    if who == "admin":
        assert answered == tools
        assert refused == {("unit_costs", "invalid_parameter"), ("allocation", "invalid_parameter")}
    else:
        assert answered == tools - {"reconciliation"}
        assert refused == {
            ("unit_costs", "invalid_parameter"),
            ("unit_costs", "forbidden"),
            ("allocation", "invalid_parameter"),
            ("reconciliation", "forbidden"),
            ("budgets", "budget_not_found"),
            ("waste", "forbidden"),
        }


def test_the_bodies_are_not_empty(client: TestClient, seeded: Seeded, engine: Engine,
                                  db_url: str) -> None:  # fmt: skip
    """The parity above compares figures, not empty lists: the seeded month has costs,
    sessions, allocation, budgets, waste and a breakeven for both keys to read."""
    server = build_server(
        engine,
        Settings(env="test", database_url=db_url),
        presenting(seeded.keys.admin),
        clock=lambda: NOW,
    )
    todo = [case for case in cases(seeded.sweep_id) if case[0] != "anomalies"]
    found: dict[str, Any] = {}
    for (name, _arguments, _), result in zip(todo, _calls(server, todo), strict=True):
        if not result.is_error:
            found.setdefault(name, body(result))
    teams = {item["properties"]["team"] for item in found["unit_costs"]["items"]}
    assert teams == {"orchid", "walrus", "(idle)", "(unallocated)"}
    assert found["sessions"]["total"] == 3
    assert found["allocation"]["items"]
    assert found["reconciliation"]["balanced"] is True
    assert [b["name"] for b in found["budgets"]] == ["budget-orchid", "budget-walrus"]
    assert {f["kind"] for f in found["waste"]["findings"]} >= {"idle_gpu", "low_acceptance"}
    assert 2 <= found["breakeven"]["breakeven_concurrency"] <= 4


def test_anomalies_with_their_drivers_equal_the_rest_body(
    client: TestClient, engine: Engine, db_url: str, tmp_path: Path
) -> None:
    """Six weeks of team search on d1, acceptance falling from 70% to 20% on one day: the
    anomaly and its drivers, for an admin key and the team's key (another team's key sees
    none)."""
    with Session(engine) as session:
        six_weeks(session, tmp_path)
        keys = {
            "admin": create_key(session, team=None, admin=True).secret,
            "search": create_key(session, team="search", admin=False).secret,
            "other": create_key(session, team="other", admin=False).secret,
        }
        session.commit()
    now = FIRST + timedelta(days=DAYS)
    client.app.dependency_overrides[get_now] = lambda: now  # type: ignore[attr-defined]
    settings = Settings(env="test", database_url=db_url)
    query: dict[str, Any] = {"granularity": "day", "buckets": 7}
    seen: dict[str, Any] = {}
    for who, key in keys.items():
        server = build_server(engine, settings, presenting(key), clock=lambda: now)

        async def calls(session: Client) -> Any:
            return await session.call_tool("anomalies", query)

        rest = client.get("/v1/anomalies", params=query, headers={"Authorization": f"Bearer {key}"})
        assert rest.status_code == 200, rest.text
        seen[who] = body(run_with(server, calls))
        assert seen[who] == rest.json(), who
    assert [a["bucket_start"] for a in seen["admin"] if a["subject"] == "team=search"] == [
        f"{INCIDENT:%Y-%m-%dT%H:%M:%SZ}"
    ]
    assert seen["search"][0]["drivers"][0]["dimension"] == "acceptance"
    assert {a["subject"] for a in seen["search"]} == {"team=search"}
    assert seen["other"] == []
