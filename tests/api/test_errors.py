"""Every error is JSON with a stable code; validation errors name the field; no traceback."""

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from app.main import create_app
from app.settings import Settings
from tests.api.conftest import Keys, _ok


def _error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == code
    assert body["error"]["message"]
    assert "Traceback" not in response.text
    return body["error"]  # type: ignore[no-any-return]


def _fields(error: dict[str, Any]) -> set[str]:
    return {f["field"] for f in error.get("fields", [])}


def test_unknown_route_and_method(client: TestClient, keys: Keys) -> None:
    _error(client.get("/v1/nothing-here", headers=keys.header("admin")), 404, "not_found")
    _error(
        client.delete("/v1/deployments", headers=keys.header("admin")), 405, "method_not_allowed"
    )


@pytest.mark.parametrize(
    ("path", "params", "field"),
    [
        ("/v1/allocation", {}, "query.window"),
        ("/v1/allocation", {"window": "2026-10", "step": "minute"}, "query.step"),
        ("/v1/allocation", {"window": "2026-10", "limit": 0}, "query.limit"),
        ("/v1/allocation", {"window": "2026-10", "cost_metric": "list"}, "query.cost_metric"),
        ("/v1/costs", {"month": "2026-10", "limit": "many"}, "query.limit"),
        ("/v1/waste", {"window": "7d", "acceptance_threshold": 2}, "query.acceptance_threshold"),
        ("/v1/tiers/recommendation", {"concurrency": 10}, "query.tpot_p90"),
    ],
)
def test_validation_errors_name_the_field(
    client: TestClient, keys: Keys, path: str, params: dict[str, Any], field: str
) -> None:
    error = _error(
        client.get(path, params=params, headers=keys.header("admin")), 422, "validation_error"
    )
    assert field in _fields(error)
    assert field in error["message"]


@pytest.mark.parametrize(
    ("path", "params", "field"),
    [
        ("/v1/allocation", {"window": "next tuesday"}, "query.window"),
        ("/v1/allocation", {"window": "2026-10", "aggregate": "colour"}, "query.aggregate"),
        ("/v1/allocation", {"window": "2026-10", "aggregate": "tag:"}, "query.aggregate"),
        ("/v1/costs", {"month": "2026-13"}, "query.month"),
        ("/v1/costs", {"month": "2026-10", "by": ","}, "query.by"),
        ("/v1/sessions", {"window": "2026-11-05T00:00:00,2026-11-06T00:00:00Z"}, "query.window"),
    ],
)
def test_bad_parameters_name_the_field(
    client: TestClient, keys: Keys, path: str, params: dict[str, Any], field: str
) -> None:
    error = _error(
        client.get(path, params=params, headers=keys.header("admin")), 422, "invalid_parameter"
    )
    assert _fields(error) == {field}


def test_body_validation(client: TestClient, keys: Keys) -> None:
    admin = keys.header("admin")
    error = _error(
        client.post("/v1/deployments", json={"name": ""}, headers=admin), 422, "validation_error"
    )
    assert "body.name" in _fields(error)
    error = _error(
        client.post("/v1/deployments", json={"name": "d1", "colour": "red"}, headers=admin),
        422,
        "validation_error",
    )
    assert "body.colour" in _fields(error)
    error = _error(
        client.post("/v1/allocation/runs", json={}, headers=admin), 422, "validation_error"
    )
    assert "month" in error["message"]
    _error(
        client.post(
            "/v1/deployments",
            content=b"{not json",
            headers={**admin, "content-type": "application/json"},
        ),
        422,
        "validation_error",
    )
    event = {
        "event_id": "e1",
        "session_id": "s",
        "deployment": "d",
        "replica": "r",
        "model": "m",
        "arrived_at": "2026-10-01T00:00:10Z",
        "finished_at": "2026-10-01T00:00:00Z",
    }
    error = _error(
        client.post("/v1/usage/events", json={"events": [event]}, headers=admin),
        422,
        "validation_error",
    )
    assert "body.events.0" in _fields(error)
    naive = {**event, "arrived_at": "2026-10-01T00:00:00", "finished_at": "2026-10-01T00:00:01Z"}
    error = _error(
        client.post("/v1/usage/events", json={"events": [naive]}, headers=admin),
        422,
        "validation_error",
    )
    assert "body.events.0.arrived_at" in _fields(error)


def test_conflicts_and_not_found(client: TestClient, keys: Keys) -> None:
    admin = keys.header("admin")
    _ok(client.post("/v1/deployments", json={"name": "d1"}, headers=admin), 201)
    _error(client.post("/v1/deployments", json={"name": "d1"}, headers=admin), 409, "conflict")
    _error(
        client.post("/v1/deployments/nope/replicas", json={"name": "r", "gpus": 1}, headers=admin),
        404,
        "not_found",
    )
    _error(client.get("/v1/breakeven/sweeps/999", headers=admin), 404, "not_found")
    _error(
        client.post("/v1/ledger/closures", json={"month": "2026-10"}, headers=admin),
        409,
        "conflict",
    )  # never allocated


def test_closed_month_refuses_allocation(client: TestClient, keys: Keys) -> None:
    admin = keys.header("admin")
    _ok(client.post("/v1/allocation/runs", json={"month": "2026-09"}, headers=admin), 201)
    closure = _ok(client.post("/v1/ledger/closures", json={"month": "2026-09"}, headers=admin), 201)
    assert closure["month"] == "2026-09"
    assert [c["month"] for c in _ok(client.get("/v1/ledger/closures", headers=admin))] == [
        "2026-09"
    ]
    _error(
        client.post("/v1/allocation/runs", json={"month": "2026-09"}, headers=admin),
        409,
        "month_closed",
    )
    _error(
        client.post("/v1/ledger/closures", json={"month": "2026-09"}, headers=admin),
        409,
        "month_closed",  # one closed-month concept, one code
    )


def test_billing_input_errors_name_the_problem(
    client: TestClient, keys: Keys, tmp_path: Path
) -> None:
    admin = keys.header("admin")
    error = _error(
        client.post("/v1/billing/ingest", json={"location": str(tmp_path / "none")}, headers=admin),
        422,
        "invalid_billing_input",
    )
    assert "body.location" in _fields(error)
    bad = tmp_path / "bad.csv"
    bad.write_text("BilledCost,BillingCurrency\nabc,USD\n")
    error = _error(
        client.post("/v1/billing/ingest", json={"location": str(bad)}, headers=admin),
        422,
        "invalid_billing_input",
    )
    assert "bad.csv" in error["message"]


def test_a_provider_export_breaking_nullability_loads_with_a_warning(
    client: TestClient, keys: Keys
) -> None:
    """Null ContractedCost (an OCI export in the wild) loads; the API names column and rows."""
    oci = Path(__file__).parents[1] / "fixtures" / "focus" / "oci_1_2_null_contracted.csv"
    report = _ok(
        client.post(
            "/v1/billing/ingest",
            json={"location": str(oci), "source": "oci"},
            headers=keys.header("admin"),
        )
    )
    assert report["rows"] > 0
    columns = {w["column"]: w for w in report["conformance_warnings"]}
    assert columns["ContractedCost"]["count"] == report["rows"]
    assert columns["ContractedCost"]["first_rows"][0] == 1


def test_unfittable_sweep_is_invalid_input(client: TestClient, keys: Keys, engine: Engine) -> None:
    from sqlalchemy.orm import Session

    from app.breakeven import repository
    from app.breakeven.rules.sweep import SweepPoint
    from app.breakeven.sweep_file import SweepRow

    with Session(engine) as session, session.begin():
        sweep_id = repository.add_sweep(
            session,
            name="tiny",
            settings={},
            rows=[
                SweepRow(
                    point=SweepPoint(
                        config="none", method="none", k=0, concurrency=1, output_tokens_per_s=10.0
                    )
                )
            ],
        ).id
    _error(
        client.get(f"/v1/breakeven/sweeps/{sweep_id}/fit", headers=keys.header("admin")),
        422,
        "invalid_input",
    )


def test_unexpected_errors_are_500_without_details(engine: Engine, db_url: str, keys: Keys) -> None:
    app = create_app(Settings(env="test", database_url=db_url))

    def boom() -> None:
        raise RuntimeError("secret detail: password=hunter2")

    app.add_api_route("/v1/boom", boom)
    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.get("/v1/boom", headers=keys.header("admin"))
    error = _error(response, 500, "internal_error")
    assert "hunter2" not in response.text
    assert "RuntimeError" not in response.text
    assert error["message"] == "internal error; the server log has the details"
