"""Idle GPU waste is reported whether or not idle was shared to the requests: with
``share_idle`` the ledger has no idle line, and the finding is priced from the unused GPU
capacity of each compute pool instead, to the same amount (SQLite and PostgreSQL)."""

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.conftest import Keys, at, event
from tests.ingest.helpers import focus_row, write_focus_csv


def _ok(response: Any, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


@pytest.fixture
def mostly_idle(client: TestClient, keys: Keys, tmp_path: Path) -> dict[str, str]:
    """d1 on 2 GPUs billed 7.20 an hour for two hours; orchid used 720 and 300 of the
    7,200 GPU-seconds each hour holds."""
    admin = keys.header("admin")
    bill = write_focus_csv(tmp_path / "oct.csv", [focus_row(hour=h, cost="7.20") for h in (0, 1)])
    _ok(client.post("/v1/billing/ingest", json={"location": str(bill)}, headers=admin))
    _ok(client.post("/v1/deployments", json={"name": "d1"}, headers=admin), 201)
    replica = {"name": "r1", "gpus": 2}
    _ok(client.post("/v1/deployments/d1/replicas", json=replica, headers=admin), 201)
    events = [
        event("orchid", "s1", at(0, 1), gpu_s=720),
        event("orchid", "s2", at(1, 5), gpu_s=300),
    ]
    _ok(client.post("/v1/usage/events", json={"events": events}, headers=admin))
    return admin


def _idle_finding(client: TestClient, admin: dict[str, str], *, share_idle: bool) -> Any:
    run = {"month": "2026-10", "share_idle": share_idle}
    _ok(client.post("/v1/allocation/runs", json=run, headers=admin), 201)
    waste = _ok(client.get("/v1/waste", params={"window": "2026-10"}, headers=admin))
    found = [f for f in waste["findings"] if f["kind"] == "idle_gpu"]
    assert len(found) == 1, waste["findings"]
    return found[0]


def test_idle_waste_survives_sharing_idle(client: TestClient, mostly_idle: dict[str, str]) -> None:
    separate = _idle_finding(client, mostly_idle, share_idle=False)
    expected = Decimal("7.20") * (7200 - 720) / 7200 + Decimal("7.20") * (7200 - 300) / 7200
    assert Decimal(separate["window_cost"]) == expected
    shared = _idle_finding(client, mostly_idle, share_idle=True)
    assert shared["key"] == separate["key"] == "d1"
    assert Decimal(shared["window_cost"]) == Decimal(separate["window_cost"])
    assert shared["metrics"]["idle_share"] == separate["metrics"]["idle_share"]
