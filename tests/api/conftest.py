"""API fixtures: an app on the test database, keys for an admin and two teams, and a month
of billing and usage for both teams, loaded through the API itself."""

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from app.auth.service import create_key
from app.breakeven import repository
from app.breakeven.rules.sweep import SweepPoint
from app.breakeven.service import fit_rows
from app.breakeven.sweep_file import SweepRow
from app.main import create_app
from app.settings import Settings
from tests.ingest.helpers import focus_row, write_focus_csv

_ids = itertools.count(1)


@dataclass(frozen=True)
class Keys:
    admin: str
    orchid: str
    walrus: str

    def header(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {getattr(self, who)}"}


@pytest.fixture
def client(engine: Engine, db_url: str) -> Iterator[TestClient]:
    app = create_app(Settings(env="test", database_url=db_url))
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture
def keys(engine: Engine) -> Keys:
    with Session(engine) as session, session.begin():
        return Keys(
            admin=create_key(session, team=None, admin=True).secret,
            orchid=create_key(session, team="orchid", admin=False).secret,
            walrus=create_key(session, team="walrus", admin=False).secret,
        )


def at(hour: int, minute: int = 0, second: float = 0) -> datetime:
    return datetime(2026, 10, 1, hour, minute, tzinfo=UTC) + timedelta(seconds=second)


def event(
    team: str,
    session_id: str,
    arrived: datetime,
    *,
    seconds: float = 10,
    gpu_s: int = 100,
    drafted: int = 80,
    accepted: int = 60,
    concurrency: int = 1,
    **overrides: Any,
) -> dict[str, Any]:
    """A usage event as the proxy would POST it."""
    body: dict[str, Any] = {
        "event_id": f"evt-{team}-{next(_ids)}",
        "session_id": session_id,
        "team": team,
        "cost_center": f"cc-{team}",
        "tags": {"app": f"{team}-app"},
        "deployment": "d1",
        "replica": "r1",
        "model": "smollm2-135m",
        "endpoint": "completions",
        "spec_method": "ngram",
        "spec_k": 4,
        "arrived_at": arrived.isoformat(),
        "first_token_at": (arrived + timedelta(seconds=0.2)).isoformat(),
        "finished_at": (arrived + timedelta(seconds=seconds)).isoformat(),
        "prompt_tokens": 100,
        "completion_tokens": 50,
        "num_drafts": 20,
        "draft_tokens": drafted,
        "accepted_tokens": accepted,
        "gpu_ns": gpu_s * 10**9,
        "concurrency": concurrency,
        "status": "ok",
        "http_status": 200,
    }
    body.update(overrides)
    return body


def _ok(response: Any, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


@dataclass(frozen=True)
class Seeded:
    keys: Keys
    sweep_id: int
    events: list[dict[str, Any]]


SWEEP = {1: (28.8, 49.4), 2: (52.5, 68.0), 4: (110.1, 86.3), 8: (159.6, 109.0), 16: (204.5, 134.7)}
"""Output tokens/s without and with ngram k=4, measured on this project's CPU machines."""


def store_sweep(engine: Engine, *, deployment: str = "d1") -> int:
    rows = []
    for concurrency, (plain, spec) in SWEEP.items():
        rows.append(
            SweepRow(
                point=SweepPoint(
                    config="none",
                    method="none",
                    k=0,
                    concurrency=concurrency,
                    output_tokens_per_s=plain,
                )
            )
        )
        rows.append(
            SweepRow(
                point=SweepPoint(
                    config="ngram-k4",
                    method="ngram",
                    k=4,
                    concurrency=concurrency,
                    output_tokens_per_s=spec,
                    acceptance_rate=0.5,
                    mean_acceptance_length=3.0,
                )
            )
        )
    _, body = fit_rows(rows, source="test", bootstrap_samples=0, seed=0)
    with Session(engine) as session, session.begin():
        return repository.add_sweep(
            session,
            name="cpu-sweep",
            rows=rows,
            settings={"prompts": "copy-heavy"},
            deployment=deployment,
            fit=body,
        ).id


@pytest.fixture
def seeded(client: TestClient, keys: Keys, engine: Engine, tmp_path: Path) -> Seeded:
    """October 2026 on deployment d1 (2 GPUs): two GPU hours at 7.20, a networking row
    shared evenly, an untagged row; teams orchid (good acceptance) and walrus (poor
    acceptance, high concurrency); a fitted sweep; everything allocated."""
    admin = keys.header("admin")
    rows = [focus_row(hour=h, cost="7.20") for h in range(2)]
    rows.append(
        focus_row(
            hour=0,
            cost="1.00",
            ServiceCategory="Networking",
            ResourceId="",
            ChargePeriodEnd="2026-10-02T00:00:00Z",
        )
    )
    rows.append(focus_row(hour=0, cost="0.55", Tags='{"other": "x"}', ServiceCategory="Storage"))
    bill = write_focus_csv(tmp_path / "oct.csv", rows)
    _ok(client.post("/v1/billing/ingest", json={"location": str(bill)}, headers=admin))
    _ok(
        client.post("/v1/deployments", json={"name": "d1", "shared_policy": "even"}, headers=admin),
        201,
    )
    _ok(
        client.post("/v1/deployments/d1/replicas", json={"name": "r1", "gpus": 2}, headers=admin),
        201,
    )
    _ok(
        client.post(
            "/v1/deployments",
            json={"name": "d2", "shared_policy": "team", "shared_team": "walrus"},
            headers=admin,
        ),
        201,
    )
    events = [
        event("orchid", "sess-orchid-1", at(0, 1), gpu_s=720),
        event("orchid", "sess-orchid-1", at(0, 1, 5), gpu_s=360),
        event("orchid", "sess-orchid-2", at(1, 5), gpu_s=300),
    ]
    events += [
        event(
            "walrus",
            "sess-walrus-1",
            at(1, 10, 20 * i),
            seconds=15,
            gpu_s=200,
            drafted=100,
            accepted=5,
            concurrency=8,
        )
        for i in range(8)
    ]
    result = _ok(client.post("/v1/usage/events", json={"events": events}, headers=admin))
    assert result == {"received": len(events), "inserted": len(events), "duplicates": 0}
    _ok(client.post("/v1/allocation/runs", json={"month": "2026-10"}, headers=admin), 201)
    for team in ("orchid", "walrus"):
        budget = {"name": f"budget-{team}", "scope": f"team={team}", "amount": "50"}
        _ok(client.post("/v1/budgets", json=budget, headers=admin), 201)
    return Seeded(keys=keys, sweep_id=store_sweep(engine), events=events)
