"""The command line: every command explains itself; the synthetic bill is conformant."""

import json
from pathlib import Path

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from app.cli import app

runner = CliRunner()


def _command_paths() -> list[list[str]]:
    paths: list[list[str]] = []

    def walk(command, prefix: list[str]) -> None:  # type: ignore[no-untyped-def]
        paths.append(prefix)
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*prefix, name])

    walk(get_command(app), [])
    return paths


@pytest.mark.parametrize("path", _command_paths(), ids=lambda p: " ".join(p) or "specledger")
def test_every_command_has_help(path: list[str]) -> None:
    result = runner.invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output
    assert len(result.output) > 200


def test_synthetic_bill_is_conformant_and_labelled(cli_env: str, tmp_path: Path) -> None:
    out = tmp_path / "bill.parquet"
    result = runner.invoke(
        app,
        [
            "billing",
            "synth",
            "--out",
            str(out),
            "--month",
            "2026-11",
            "--tag",
            "specledger-deployment=demo",
            "--instance-type",
            "p5.48xlarge",
            "--start",
            "2026-11-03T00:00:00",
            "--end",
            "2026-11-03T05:00:00",
        ],
    )
    assert result.exit_code == 0, result.output

    ingested = runner.invoke(
        app, ["ingest", "billing", str(out), "--json", "--focus-version", "1.2"]
    )
    assert ingested.exit_code == 0, ingested.output
    report = json.loads(ingested.stdout)
    assert report["rows"] == 5 + 1  # five instance-hours and one networking line
    assert report["repairs"] == {}
    # 5 h x 55.04 USD (catalog) + 50 GB/day x 5/24 day x 0.09 USD
    assert report["totals"]["USD"]["BilledCost"] == "276.137500"


def test_unknown_instance_type_is_a_clear_error(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "billing",
            "synth",
            "--out",
            str(tmp_path / "x.csv"),
            "--month",
            "2026-11",
            "--tag",
            "a=b",
            "--instance-type",
            "z9",
        ],
    )
    assert result.exit_code == 2
    assert "unknown --instance-type 'z9'" in result.stderr
