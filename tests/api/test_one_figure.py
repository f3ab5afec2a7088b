"""One figure, one definition: one month (bill, usage, allocation) asked of every surface
(GET /v1/costs, GET /v1/allocation, the ``costs`` CLI's JSON, the dashboards' data, the
chargeback export) gives the same GPU-seconds, session-seconds, tokens, costs and acceptance
per team, and the same as the usage that was loaded."""

import csv
import io
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from typer.testing import CliRunner

from app.cli import app as cli
from app.domain import measures
from dashboards import data
from tests.api.conftest import Keys, at, event
from tests.ingest.helpers import focus_row, write_focus_csv

MONTH = "2026-10"
TEAMS = ("orchid", "walrus")


def _ok(response: Any, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


@pytest.fixture
def month(client: TestClient, keys: Keys, tmp_path: Path) -> list[dict[str, Any]]:
    """October 2026 on d1 (2 GPUs, shared rows split proportionally to GPU-seconds): two
    GPU hours, a networking row over both hours, two teams' requests inside the hours."""
    admin = keys.header("admin")
    rows = [focus_row(hour=h, cost="7.20") for h in range(2)]
    rows.append(
        focus_row(
            hour=0,
            cost="1.00",
            ServiceCategory="Networking",
            ResourceId="",
            ChargePeriodEnd="2026-10-01T02:00:00Z",
        )
    )
    bill = write_focus_csv(tmp_path / "oct.csv", rows)
    _ok(client.post("/v1/billing/ingest", json={"location": str(bill)}, headers=admin))
    deployment = {"name": "d1", "shared_policy": "proportional"}
    _ok(client.post("/v1/deployments", json=deployment, headers=admin), 201)
    replica = {"name": "r1", "gpus": 2}
    _ok(client.post("/v1/deployments/d1/replicas", json=replica, headers=admin), 201)
    events = [
        event("orchid", "s-o1", at(0, 1), gpu_s=720),
        event("orchid", "s-o1", at(0, 1, 5), gpu_s=360),
        event("orchid", "s-o2", at(1, 5), gpu_s=300, drafted=0, accepted=0, num_drafts=0),
        *(
            event("walrus", "s-w1", at(1, 10, 20 * i), seconds=15, gpu_s=200, accepted=5)
            for i in range(4)
        ),
    ]
    _ok(client.post("/v1/usage/events", json={"events": events}, headers=admin))
    _ok(client.post("/v1/allocation/runs", json={"month": MONTH}, headers=admin), 201)
    return events


def _expected(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The figures the loaded usage itself gives, per team."""
    out: dict[str, dict[str, Any]] = {}
    for team in TEAMS:
        mine = [e for e in events if e["team"] == team]
        out[team] = {
            "gpu_seconds": measures.seconds(sum(e["gpu_ns"] for e in mine)),
            "prompt_tokens": sum(e["prompt_tokens"] for e in mine),
            "completion_tokens": sum(e["completion_tokens"] for e in mine),
            "acceptance_rate": measures.acceptance_rate(
                sum(e["accepted_tokens"] for e in mine), sum(e["draft_tokens"] for e in mine)
            ),
        }
    return out


def test_every_surface_gives_the_same_figures_for_the_month(
    client: TestClient,
    keys: Keys,
    engine: Engine,
    cli_env: str,
    month: list[dict[str, Any]],
) -> None:
    admin = keys.header("admin")
    expected = _expected(month)

    costs = {
        line["properties"]["team"]: line
        for line in _ok(client.get("/v1/costs", params={"month": MONTH}, headers=admin))["items"]
    }
    allocation = {
        item["properties"]["team"]: item
        for item in _ok(client.get("/v1/allocation", params={"window": MONTH}, headers=admin))[
            "items"
        ]
    }
    result = CliRunner().invoke(cli, ["costs", "--month", MONTH, "--json"])
    assert result.exit_code == 0, result.output
    cli_lines = {line["team"]: line for line in json.loads(result.output)["lines"]}
    chargeback = client.get("/v1/chargeback", params={"month": MONTH}, headers=admin)
    assert chargeback.status_code == 200, chargeback.text
    exported = {r["team"]: r for r in csv.DictReader(io.StringIO(chargeback.text))}

    ledger = data.ledger_by_hour(engine, month=MONTH)
    usage = data.usage_by_hour(engine, month=MONTH)
    sessions = data.session_seconds_by_hour(engine, month=MONTH)

    for team in TEAMS:
        line = costs[team]
        figures = expected[team]
        # GPU-seconds: the usage's, whichever surface reports them (shared rows split by
        # GPU-seconds must not count them a second time).
        assert line["gpu_seconds"] == figures["gpu_seconds"]
        assert allocation[team]["gpu_seconds"] == figures["gpu_seconds"]
        assert cli_lines[team]["gpu_seconds"] == figures["gpu_seconds"]
        assert float(exported[team]["gpu_seconds"]) == figures["gpu_seconds"]
        team_usage = usage[usage["team"] == team]
        assert measures.seconds(int(team_usage["gpu_ns"].sum())) == figures["gpu_seconds"]

        # Costs: effective (and billed) to the micro.
        effective = Decimal(line["effective_cost"])
        assert Decimal(allocation[team]["cost"]) == effective
        assert Decimal(cli_lines[team]["effective_cost"]) == effective
        assert Decimal(exported[team]["effective_cost"]) == effective
        team_ledger = ledger[ledger["team"] == team]
        assert Decimal(int(team_ledger["effective_micros"].sum())).scaleb(-6) == effective
        billed = Decimal(line["billed_cost"])
        assert Decimal(cli_lines[team]["billed_cost"]) == billed
        assert Decimal(exported[team]["billed_cost"]) == billed
        assert Decimal(int(team_ledger["billed_micros"].sum())).scaleb(-6) == billed

        # Tokens and acceptance.
        for name in ("prompt_tokens", "completion_tokens"):
            assert line[name] == figures[name]
            assert cli_lines[team][name] == figures[name]
            assert int(exported[team][name]) == figures[name]
            assert int(team_usage[name].sum()) == figures[name]
        assert line["acceptance_rate"] == figures["acceptance_rate"]
        assert cli_lines[team]["acceptance_rate"] == figures["acceptance_rate"]
        assert float(exported[team]["acceptance_rate"]) == figures["acceptance_rate"]
        assert (
            measures.acceptance_rate(
                int(team_usage["accepted_tokens"].sum()), int(team_usage["draft_tokens"].sum())
            )
            == figures["acceptance_rate"]
        )

        # Session-seconds: the union of each session's requests.
        team_seconds = sessions[sessions["team"] == team]["session_seconds"].sum()
        assert line["session_seconds"] == round(float(team_seconds), measures.SECONDS_PLACES)
        assert cli_lines[team]["session_seconds"] == line["session_seconds"]
        assert float(exported[team]["session_seconds"]) == line["session_seconds"]

    assert costs["orchid"]["session_seconds"] == 15 + 10  # s-o1's two overlap, s-o2's
    assert costs["walrus"]["session_seconds"] == 15 * 4  # no overlap: 20 s apart
    # The whole bill, on each surface.
    bill = Decimal("15.40")
    assert sum(Decimal(v["effective_cost"]) for v in costs.values()) == bill
    assert sum(Decimal(v["cost"]) for v in allocation.values()) == bill
    assert sum(Decimal(v["effective_cost"]) for v in exported.values()) == bill
