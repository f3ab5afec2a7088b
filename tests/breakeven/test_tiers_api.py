"""`/v1/tiers` and `/v1/tiers/recommendation`: the brief's figures beside the computed ones,
flagged, on both databases; a sweep that cannot be used names the parameter."""

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from app.auth.service import create_key
from app.main import create_app
from app.settings import Settings


@pytest.fixture
def admin(engine: Engine, db_url: str) -> Iterator[tuple[TestClient, dict[str, str]]]:
    with Session(engine) as session, session.begin():
        secret = create_key(session, team=None, admin=True).secret
    app = create_app(Settings(env="test", database_url=db_url))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client, {"Authorization": f"Bearer {secret}"}


def _get(admin: tuple[TestClient, dict[str, str]], path: str, **params: Any) -> Any:
    client, headers = admin
    response = client.get(path, params=params, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


def test_tiers_carry_the_quotes_their_source_and_the_flags(
    admin: tuple[TestClient, dict[str, str]],
) -> None:
    body = _get(admin, "/v1/tiers")
    assert body["claims"]["speedup"]["value"] == 2.5
    tiers = {t["name"]: t for t in body["tiers"]}
    verdicts = {
        (name, check["claim"]): check["verdict"]
        for name, tier in tiers.items()
        for check in tier["claim_checks"]
    }
    assert verdicts == {
        ("prototype", "usd_per_month"): "above",
        ("prototype", "usd_per_1k_session_seconds"): "within",
        ("prototype", "speedup"): "below",
        ("scaled", "usd_per_month"): "above",
        ("scaled", "usd_per_1k_session_seconds"): "within",
        ("scaled", "speedup"): "below",
        ("enterprise", "usd_per_month"): "above",
        ("enterprise", "usd_per_1k_session_seconds"): "within",
        ("enterprise", "speedup"): "below",
    }
    enterprise = tiers["enterprise"]
    assert enterprise["quoted"]["usd_per_month"] == {"min": "22000.000000", "max": "95000.000000"}
    assert "reference/product-brief.txt" in enterprise["quoted"]["source"]
    (month,) = [c for c in enterprise["claim_checks"] if c["claim"] == "usd_per_month"]
    assert month["computed"]["min"] == "321433.600000"  # money as decimal strings
    assert "2.36 instances running all month" in month["reason"]


def test_recommendation_checks_the_quotes_at_the_asked_load(
    admin: tuple[TestClient, dict[str, str]],
) -> None:
    body = _get(admin, "/v1/tiers/recommendation", concurrency=12, tpot_p90=0.01)
    assert body["recommended"] == "prototype"
    (prototype,) = [o for o in body["options"] if o["tier"] == "prototype"]
    checks = {c["claim"]: c for c in prototype["claim_checks"]}
    assert checks["usd_per_1k_session_seconds"]["computed"]["min"] == "0.131296"
    assert checks["usd_per_1k_session_seconds"]["verdict"] == "above"
    assert "the brief quotes" in body["reasoning"][0]


def test_an_unknown_sweep_is_an_invalid_parameter(
    admin: tuple[TestClient, dict[str, str]],
) -> None:
    client, headers = admin
    for path, params in (
        ("/v1/tiers", {"sweep": 999}),
        ("/v1/tiers/recommendation", {"sweep": 999, "concurrency": 12, "tpot_p90": 0.01}),
    ):
        response = client.get(path, params=params, headers=headers)
        assert response.status_code == 422
        error = response.json()["error"]
        assert error["code"] == "invalid_parameter"
        assert error["fields"] == [{"field": "query.sweep", "message": "no sweep 999"}]
