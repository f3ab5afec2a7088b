"""``specledger dashboards export``: static HTML files of every page."""

from pathlib import Path

import typer
from typer.testing import CliRunner

from app.cli.dashboards import register
from dashboards.pages import PAGES, PLOTLY_JS_NAME
from tests.dashboards.seed import TEAMS, Seeded

runner = CliRunner()


def _cli() -> typer.Typer:
    app = typer.Typer()
    app.command("version")(lambda: None)  # a second command keeps `dashboards` a subcommand
    register(app)
    return app


def test_export_writes_every_page_and_plotly_once(
    seeded: Seeded, cli_env: str, tmp_path: Path
) -> None:
    out = tmp_path / "site"
    result = runner.invoke(_cli(), ["dashboards", "export", "--out", str(out)])
    assert result.exit_code == 0, result.output
    names = {path.name for path in out.iterdir()}
    assert names == {f"{page}.html" for page in PAGES} | {"index.html", PLOTLY_JS_NAME}
    cost = (out / "cost.html").read_text()
    assert f'<script src="{PLOTLY_JS_NAME}"></script>' in cost
    assert 'href="breakeven.html"' in cost
    assert all(team in cost for team in TEAMS)
    assert "<form" not in cost  # static pages have no controls


def test_export_for_one_team_holds_no_other_team(
    seeded: Seeded, cli_env: str, tmp_path: Path
) -> None:
    out = tmp_path / "search"
    result = runner.invoke(
        _cli(),
        [
            "dashboards",
            "export",
            "--out",
            str(out),
            "--team",
            "search",
            "--inline",
            "--month",
            "2026-10",
        ],
    )
    assert result.exit_code == 0, result.output
    assert not (out / PLOTLY_JS_NAME).exists()
    for page in PAGES:
        text = (out / f"{page}.html").read_text()
        assert "team search" in text
        assert "ads-platform" not in text
        assert "research-lab" not in text
        assert "<script src=" not in text  # plotly.js is inline


def test_export_rejects_a_bad_month(cli_env: str, tmp_path: Path) -> None:
    result = runner.invoke(
        _cli(), ["dashboards", "export", "--out", str(tmp_path), "--month", "2026-13"]
    )
    assert result.exit_code == 2
    assert "month must be YYYY-MM" in result.output
