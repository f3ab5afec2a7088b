"""`specledger waste` prints the report GET /v1/waste serves, and refuses an unknown team."""

import json

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from app.cli import app
from app.settings import get_settings
from tests.api.conftest import Seeded

runner = CliRunner()


@pytest.fixture
def cli_db(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECLEDGER_DATABASE_URL", db_url)
    get_settings.cache_clear()


def _api(client: TestClient, seeded: Seeded, **params: str) -> object:
    response = client.get("/v1/waste", params=params, headers=seeded.keys.header("admin"))
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize("team", [None, "walrus"])
def test_the_json_is_the_apis(
    client: TestClient, seeded: Seeded, cli_db: None, team: str | None
) -> None:
    by_team = ["--team", team] if team else []
    result = runner.invoke(app, ["waste", "--window", "2026-10", "--json", *by_team])
    assert result.exit_code == 0, result.output
    cli = json.loads(result.stdout)
    assert cli["findings"], "the seeded month has waste"
    assert cli == _api(client, seeded, window="2026-10", **({"team": team} if team else {}))


def test_the_table_names_each_finding_and_the_monthly_total(
    client: TestClient, seeded: Seeded, cli_db: None
) -> None:
    body = _api(client, seeded, window="2026-10")
    assert isinstance(body, dict)
    result = runner.invoke(app, ["waste", "--window", "2026-10"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for finding in body["findings"]:
        assert finding["key"] in result.stdout
    total = f"{float(body['estimated_monthly_total']):,.2f}"
    assert f"estimated monthly total: {total}" in result.stdout


def test_an_unknown_team_is_an_error_with_suggestions(seeded: Seeded, cli_db: None) -> None:
    result = runner.invoke(app, ["waste", "--window", "2026-10", "--team", "walrsu"])
    assert result.exit_code == 2
    assert "unknown team 'walrsu'" in result.stderr
    assert "did you mean 'walrus'" in result.stderr


def test_a_bad_window_names_the_option(cli_db: None) -> None:
    result = runner.invoke(app, ["waste", "--window", "2026-13"])
    assert result.exit_code == 2
    assert "--window" in result.output
