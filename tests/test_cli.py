"""The command line: every command explains itself; the synthetic bill is conformant."""

import json
from pathlib import Path
from typing import Annotated, Any

import pyarrow.parquet as pq
import pytest
import typer
from sqlalchemy import Engine, select
from typer.main import get_command
from typer.testing import CliRunner

from app.cli import app
from app.models import BillingRow

runner = CliRunner()


def _walk(command: Any, prefix: list[str]) -> list[tuple[list[str], Any]]:
    """Every (path, command) below ``command``, groups included, in definition order."""
    found = [(prefix, command)]
    for name, sub in getattr(command, "commands", {}).items():
        found += _walk(sub, [*prefix, name])
    return found


def _command_paths() -> list[list[str]]:
    return [path for path, _ in _walk(get_command(app), [])]


def missing_help(root: Any) -> list[str]:
    """Commands, groups, options and arguments without help text, as
    ``"specledger db upgrade"`` or ``"specledger db upgrade REVISION"``.

    Typer's Click objects (its own copy of Click) are read by duck typing: every command and
    parameter has ``help``; ``param_type_name`` tells options from arguments.
    """
    problems: list[str] = []
    for path, command in _walk(root, []):
        name = " ".join(["specledger", *path])
        if command.hidden:
            continue
        if not (command.help or "").strip():
            problems.append(name)
        for param in command.params:
            if getattr(param, "hidden", False):
                continue
            if not (getattr(param, "help", None) or "").strip():
                label = (
                    "/".join(param.opts)
                    if param.param_type_name == "option"
                    else (param.name or "?").upper()
                )
                problems.append(f"{name} {label}")
    return problems


def test_every_command_has_help() -> None:
    assert missing_help(get_command(app)) == []


def test_the_help_check_reports_what_lacks_help() -> None:
    root = get_command(app)
    commands = {tuple(path): command for path, command in _walk(root, [])}
    upgrade = commands[("db", "upgrade")]
    synth = commands[("billing", "synth")]
    month = next(p for p in synth.params if p.name == "month")
    revision = next(p for p in upgrade.params if p.name == "revision")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(commands[("billing",)], "help", None)
        patch.setattr(upgrade, "help", "  ")
        patch.setattr(month, "help", None)
        patch.setattr(revision, "help", "")
        assert missing_help(root) == [
            "specledger db upgrade",
            "specledger db upgrade REVISION",
            "specledger billing",
            "specledger billing synth --month",
        ]
    assert missing_help(root) == []


def test_the_help_check_reports_an_undocumented_typer_app() -> None:
    bare = typer.Typer()
    group = typer.Typer()

    @bare.command()
    def first(
        path: Annotated[str, typer.Argument()],
        count: Annotated[int, typer.Option()] = 1,
        quiet: Annotated[bool, typer.Option(help="Say less.")] = False,
    ) -> None:
        pass

    @group.command()
    def second() -> None:
        """Documented."""

    bare.add_typer(group, name="group")
    assert missing_help(get_command(bare)) == [
        "specledger",
        "specledger first",
        "specledger first PATH",
        "specledger first --count",
        "specledger group",
    ]


@pytest.mark.parametrize("path", _command_paths(), ids=lambda p: " ".join(p) or "specledger")
def test_every_help_page_renders_with_its_help(path: list[str]) -> None:
    command = {tuple(p): c for p, c in _walk(get_command(app), [])}[tuple(path)]
    result = runner.invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output
    first_words = " ".join(command.help.split()[:3])
    assert first_words in " ".join(result.output.split()), (first_words, result.output)


LABEL = "SYNTHETIC (specledger billing synth): "
"""What ingest/synth.py puts at the start of every row's ChargeDescription."""


def test_synthetic_bill_is_conformant_and_labelled(
    cli_env: str, engine: Engine, tmp_path: Path
) -> None:
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

    # Labelled: every row of the file, and every row as stored, says SYNTHETIC, and names
    # the demo account (all-zero ids), not a real one.
    rows = pq.read_table(out).to_pylist()
    assert len(rows) == 6
    assert [r["ChargeDescription"].startswith(LABEL) for r in rows] == [True] * 6
    assert sorted(r["ChargeDescription"].removeprefix(LABEL) for r in rows) == [
        "data transfer out to the internet",
        *["p5.48xlarge on-demand instance-hour"] * 5,
    ]
    assert {r["BillingAccountName"] for r in rows} == {"SpecLedger demo"}
    assert {(r["BillingAccountId"], r["SubAccountId"]) for r in rows} == {
        ("000000000000", "000000000000")
    }
    assert {r["Tags"] for r in rows} == {json.dumps({"specledger-deployment": "demo"})}
    with engine.connect() as conn:
        stored = conn.execute(
            select(BillingRow.charge_description, BillingRow.billing_account_name)
        ).all()
    assert len(stored) == 6
    assert all(d is not None and d.startswith(LABEL) for d, _ in stored), stored
    assert {name for _, name in stored} == {"SpecLedger demo"}


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
