"""Admin writes (usage, allocation runs, registry) and the operations endpoints."""

from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select

from app.main import create_app
from app.models import UsageRecord
from app.settings import Settings
from tests.api.conftest import Keys, _ok, at, event


def test_usage_events_are_idempotent_on_event_id(
    client: TestClient, keys: Keys, engine: Engine
) -> None:
    admin = keys.header("admin")
    batch = [event("orchid", "s1", at(0, i)) for i in range(5)]
    assert _ok(client.post("/v1/usage/events", json={"events": batch}, headers=admin)) == {
        "received": 5,
        "inserted": 5,
        "duplicates": 0,
    }
    again = [*batch[3:], event("orchid", "s1", at(0, 9)), batch[4]]
    assert _ok(client.post("/v1/usage/events", json={"events": again}, headers=admin)) == {
        "received": 4,
        "inserted": 1,
        "duplicates": 3,
    }
    with engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(UsageRecord)) == 6
        stored = conn.execute(
            select(UsageRecord).where(UsageRecord.event_id == batch[0]["event_id"])
        ).one()
    assert stored.tags == {"app": "orchid-app"}
    assert stored.arrived_at == at(0, 0)


def test_adhoc_allocation_and_registry(client: TestClient, keys: Keys) -> None:
    admin = keys.header("admin")
    _ok(
        client.post("/v1/deployments", json={"name": "d1", "tier": "prototype"}, headers=admin), 201
    )
    replica = _ok(
        client.post(
            "/v1/deployments/d1/replicas",
            json={"name": "r1", "gpus": 4, "resource_id": "i-123"},
            headers=admin,
        ),
        201,
    )
    assert replica == {"name": "r1", "gpus": 4, "resource_id": "i-123", "base_url": None}
    listed = _ok(client.get("/v1/deployments", headers=keys.header("orchid")))
    assert listed[0]["replicas"][0]["gpus"] == 4
    run = _ok(
        client.post(
            "/v1/allocation/runs",
            json={
                "start": "2026-10-01T00:00:00Z",
                "end": "2026-10-02T00:00:00+00:00",
                "share_idle": True,
            },
            headers=admin,
        ),
        201,
    )
    assert run["month"] is None
    assert run["share_idle"] is True
    assert run["window"] == {"start": "2026-10-01T00:00:00Z", "end": "2026-10-02T00:00:00Z"}


def test_health_readiness_and_metrics(client: TestClient, keys: Keys) -> None:
    assert _ok(client.get("/healthz"))["status"] == "ok"
    ready = _ok(client.get("/readyz"))
    assert ready["migration"] == ready["expected_migration"]
    client.get("/v1/sessions/sess-secret-42", headers=keys.header("orchid"))
    text = client.get("/metrics").text
    assert 'route="/v1/sessions/{session_id}"' in text
    assert "sess-secret-42" not in text
    assert 'specledger_http_requests_total{method="GET",route="/healthz",status="200"}' in text


def test_readyz_fails_on_an_unmigrated_database(tmp_path: Path) -> None:
    app = create_app(Settings(env="test", database_url=f"sqlite+pysqlite:///{tmp_path}/x.db"))
    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "not_ready"
    assert "specledger db upgrade" in response.json()["error"]["message"]


def test_openapi_documents_auth_and_errors(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    schemes = spec["components"]["securitySchemes"]
    assert {"HTTPBearer", "APIKeyHeader"} <= set(schemes)
    for path, operations in spec["paths"].items():
        if not path.startswith("/v1/"):
            continue
        for method, operation in operations.items():
            assert operation.get("security"), (method, path)
            assert "401" in operation["responses"], (method, path)
            assert operation.get("description") or operation.get("summary"), (method, path)


def test_database_outage_is_503_not_a_traceback(tmp_path: Path) -> None:
    url = f"sqlite+pysqlite:///{tmp_path}/gone/x.db"
    app = create_app(Settings(env="test", database_url=url))
    with TestClient(app, raise_server_exceptions=False) as client:
        (tmp_path / "gone").rename(tmp_path / "moved")  # the file's folder disappears
        (tmp_path / "gone").mkdir()
        (tmp_path / "gone" / "x.db").mkdir()  # and a folder sits where the file was
        response = client.get("/v1/whoami", headers={"X-API-Key": "slk_" + "a" * 43})
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "database_unavailable"
    assert response.headers["retry-after"] == "5"
