"""Billing deliveries over the API (admin): list, show, remove; the same charges under another
name are refused through POST /v1/billing/ingest too; errors name what to do."""

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from tests.api.conftest import Keys
from tests.ingest.helpers import focus_row, write_focus_csv


def _ingest(client: TestClient, keys: Keys, path: Path, **extra: Any) -> Any:
    return client.post(
        "/v1/billing/ingest", json={"location": str(path), **extra}, headers=keys.header("admin")
    )


def _bill(path: Path) -> Path:
    return write_focus_csv(path, [focus_row(hour=h, cost="2.50") for h in range(4)])


def test_deliveries_are_listed_shown_and_removed(
    client: TestClient, keys: Keys, tmp_path: Path
) -> None:
    admin = keys.header("admin")
    bill = _bill(tmp_path / "bill.csv")
    assert _ingest(client, keys, bill).status_code == 200

    listed = client.get("/v1/billing/deliveries", headers=admin)
    assert listed.status_code == 200, listed.text
    (delivery,) = listed.json()
    assert delivery["source"] == f"file:{bill.resolve()}"
    assert delivery["month"] == "2026-10"
    assert delivery["status"] == "current"
    assert delivery["billing_accounts"] == ["111"]
    assert delivery["row_count"] == 4
    assert delivery["totals"] == {"USD": {"billed": "10.000000", "effective": "10.000000"}}
    assert delivery["files"] == [str(bill)]
    assert client.get("/v1/billing/deliveries?month=2026-09", headers=admin).json() == []

    shown = client.get(f"/v1/billing/deliveries/{delivery['id']}", headers=admin)
    assert shown.json() == delivery

    removed = client.post(f"/v1/billing/deliveries/{delivery['id']}/remove", json={}, headers=admin)
    assert removed.status_code == 200, removed.text
    body = removed.json()
    assert body["delivery"]["status"] == "removed"
    assert body["restated"] is False
    assert body["booked_in"] is None
    assert client.get("/v1/billing/deliveries", headers=admin).json() == []
    (gone,) = client.get("/v1/billing/deliveries?all=true", headers=admin).json()
    assert gone["id"] == delivery["id"]

    again = client.post(f"/v1/billing/deliveries/{delivery['id']}/remove", json={}, headers=admin)
    assert again.status_code == 409
    assert "already removed" in again.text


def test_the_same_charges_under_another_name_are_refused_or_replaced(
    client: TestClient, keys: Keys, tmp_path: Path
) -> None:
    admin = keys.header("admin")
    assert _ingest(client, keys, _bill(tmp_path / "bill.csv")).status_code == 200
    (first,) = client.get("/v1/billing/deliveries", headers=admin).json()
    copy = _bill(tmp_path / "copy.csv")

    refused = _ingest(client, keys, copy)
    assert refused.status_code == 422
    assert f"already loaded as delivery #{first['id']}" in refused.text

    replaced = _ingest(client, keys, copy, replace=True)
    assert replaced.status_code == 200, replaced.text
    (current,) = client.get("/v1/billing/deliveries", headers=admin).json()
    assert current["source"].endswith("copy.csv")
    old = client.get(f"/v1/billing/deliveries/{first['id']}", headers=admin).json()
    assert old["status"] == "replaced"
    assert old["superseded_by"] == current["id"]


def test_deliveries_are_for_admins_and_errors_name_the_fix(
    client: TestClient, keys: Keys, tmp_path: Path
) -> None:
    team = keys.header("orchid")
    assert client.get("/v1/billing/deliveries", headers=team).status_code == 403
    assert client.get("/v1/billing/deliveries/1", headers=team).status_code == 403
    assert client.post("/v1/billing/deliveries/1/remove", json={}, headers=team).status_code == 403

    admin = keys.header("admin")
    missing = client.get("/v1/billing/deliveries/999", headers=admin)
    assert missing.status_code == 404
    assert "no billing delivery #999" in missing.text
    bad_month = client.get("/v1/billing/deliveries?month=2026-13", headers=admin)
    assert bad_month.status_code == 422
    assert "query.month" in bad_month.text
    too_big = client.get(f"/v1/billing/deliveries/{2**63}", headers=admin)
    assert too_big.status_code == 422
