"""GET /v1/prices and `specledger prices`: each deployment's cost per 1M input and output
tokens and per GPU-hour from a month's ledger (SQLite and PostgreSQL)."""

import json
from decimal import Decimal
from typing import Any

from fastapi.testclient import TestClient
from typer.testing import CliRunner

from app.cli import app as cli
from app.ledger.prices import DeploymentPrice
from tests.api.conftest import Keys, Seeded
from tests.api.test_query_plans import captured


def _get(client: TestClient, url: str, headers: dict[str, str], status: int = 200) -> Any:
    response = client.get(url, headers=headers)
    assert response.status_code == status, response.text
    return response.json()


def test_prices_carry_the_deployments_whole_cost_and_agree_with_the_costs_report(
    client: TestClient, seeded: Seeded, cli_env: str
) -> None:
    admin = seeded.keys.header("admin")
    body = _get(client, "/v1/prices", admin)
    assert body["month"] == "2026-10"
    assert [item["deployment"] for item in body["items"]] == ["d1"]  # d2 served nothing
    price = body["items"][0]
    page = _get(client, "/v1/costs?month=2026-10&by=deployment", admin)
    assert page["currency"] == price["currency"] == "USD"  # the bill's, on costs and prices
    costs = page["items"]
    d1 = next(line for line in costs if line["properties"]["deployment"] == "d1")
    assert price["cost_per_1m_tokens"] == d1["cost_per_1m_tokens"]
    assert price["cost_per_gpu_hour"] == d1["cost_per_gpu_hour"]
    assert price["currency"] == "USD"  # the bill's
    # Prefill is 0.2 s of each request: 10 s for orchid's 1,380 GPU-s, 15 s for walrus's 1,600.
    prefill = (Decimal(1380) * Decimal("0.02") + Decimal(1600) * Decimal("0.2") / 15) / 2980
    assert price["prefill_share"] == round(float(prefill), 4)
    # Input and output prices together charge the deployment's whole cost back.
    requests = len(seeded.events)
    charged = (
        Decimal(price["cost_per_1m_input_tokens"]) * 100 * requests
        + Decimal(price["cost_per_1m_output_tokens"]) * 50 * requests
    ) / 10**6
    assert abs(charged - Decimal(d1["effective_cost"])) < Decimal("0.00001")
    # A team key gets the same rate card (prices only, no volumes).
    assert _get(client, "/v1/prices", seeded.keys.header("walrus")) == body
    assert _get(client, "/v1/prices?month=2026-10", admin) == body
    result = CliRunner().invoke(cli, ["prices", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == body
    table = CliRunner().invoke(cli, ["prices"], env={"COLUMNS": "160"})
    assert "d1" in table.stdout
    assert price["cost_per_gpu_hour"] in table.stdout


def test_prices_of_a_month_never_allocated_are_refused(
    client: TestClient, seeded: Seeded, cli_env: str
) -> None:
    error = _get(client, "/v1/prices?month=2026-09", seeded.keys.header("admin"), 404)
    assert "allocated months: 2026-10" in json.dumps(error)
    result = CliRunner().invoke(cli, ["prices", "--month", "2026-09"])
    assert result.exit_code == 2
    assert "allocated months: 2026-10" in result.output


def test_no_allocation_yet_gives_no_prices(client: TestClient, keys: Keys) -> None:
    assert _get(client, "/v1/prices", keys.header("admin")) == {"month": None, "items": []}


def test_without_streamed_requests_the_output_price_carries_the_whole_cost() -> None:
    price = DeploymentPrice(
        deployment="d",
        cost_micros=3_000_000,
        requests=2,
        prompt_tokens=1_000,
        completion_tokens=500,
        gpu_ns=3_600 * 10**9,
        prefill_share=None,
    ).to_json()
    assert price["cost_per_1m_input_tokens"] is None
    assert price["cost_per_1m_output_tokens"] == "6000.000000"  # 3.00 over 500 tokens
    assert price["cost_per_gpu_hour"] == "3.000000"
    split = DeploymentPrice("d", 3_000_000, 2, 1_000, 500, 3_600 * 10**9, 0.25).to_json()
    assert split["cost_per_1m_input_tokens"] == "750.000000"  # 0.75 over 1,000 tokens
    assert split["cost_per_1m_output_tokens"] == "4500.000000"  # 2.25 over 500 tokens


def test_a_months_prices_are_read_once_per_allocation_run(
    client: TestClient, seeded: Seeded
) -> None:
    admin = seeded.keys.header("admin")
    first = _get(client, "/v1/prices", admin)
    with captured() as statements:
        assert _get(client, "/v1/prices", seeded.keys.header("orchid")) == first
    assert not [sql for sql, _ in statements if "usage_records" in sql]
    response = client.post("/v1/allocation/runs", json={"month": "2026-10"}, headers=admin)
    assert response.status_code < 300, response.text
    with captured() as statements:
        assert _get(client, "/v1/prices", admin) == first  # same ledger, a new run
    assert [sql for sql, _ in statements if "usage_records" in sql]
