"""Reports and exports of a month never allocated or of an unknown team are errors that name
what is known, never an empty table with exit status 0."""

from pathlib import Path

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from app.auth.service import create_key
from app.cli import app
from tests.allocation.test_ledger_close_cli import allocated_october

runner = CliRunner()
__all__ = ["allocated_october"]


@pytest.fixture
def search_team(allocated_october: None, engine: Engine) -> None:
    with Session(engine) as session, session.begin():
        create_key(session, team="search", admin=False)


@pytest.mark.parametrize(
    "command",
    [
        ["costs", "--month", "2026-09"],
        ["export", "chargeback", "--month", "2026-09", "--out", "{tmp}/c.csv"],
    ],
)
def test_a_month_never_allocated_is_an_error(
    search_team: None, tmp_path: Path, command: list[str]
) -> None:
    args = [part.format(tmp=tmp_path) for part in command]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert "2026-09 has no allocation (allocated months: 2026-10)" in result.stderr
    assert not (tmp_path / "c.csv").exists()


@pytest.mark.parametrize(
    "command",
    [
        ["costs", "--month", "2026-10", "--team", "serach"],
        ["export", "chargeback", "--month", "2026-10", "--team", "serach", "--out", "{tmp}/c.csv"],
    ],
)
def test_an_unknown_team_is_an_error_with_suggestions(
    search_team: None, tmp_path: Path, command: list[str]
) -> None:
    args = [part.format(tmp=tmp_path) for part in command]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert "unknown team 'serach' (did you mean 'search'?)" in result.stderr
    assert not (tmp_path / "c.csv").exists()


def test_a_known_team_and_month_still_report(search_team: None, tmp_path: Path) -> None:
    result = runner.invoke(app, ["costs", "--month", "2026-10", "--team", "search", "--json"])
    assert result.exit_code == 0, result.output
