"""The documented "your own data" path (docs/own-data.md), run as a user would: its own
commands, in its order, on a bill and a usage log of one month."""

import re
import shlex
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import app
from app.cli import ledger as ledger_cli
from app.domain.usage import UsageEvent
from serving.proxy.sink import write_jsonl
from tests.conftest import ROOT
from tests.factories import usage_record

PAGE = ROOT / "docs" / "own-data.md"
runner = CliRunner()

# Commands of the page that need something a test does not start: a server in front of
# real model servers (its log is written below instead) or a PostgreSQL URL of the user's.
NOT_HERE = ("specledger proxy", "specledger db upgrade", "specledger db downgrade")


def page_commands(text: str) -> list[list[str]]:
    """The ``specledger`` commands of the page's shell blocks, in order, without comments."""
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" # ")[0].strip()
            if line.startswith("specledger ") and not line.startswith(NOT_HERE):
                commands.append(shlex.split(line)[1:])
    return commands


def _usage_log(path: Path) -> None:
    """What `specledger proxy ... --jsonl usage.jsonl` writes for two teams' requests."""
    start = datetime(2026, 11, 3, 9, tzinfo=UTC)
    events = [
        UsageEvent(
            **usage_record(
                deployment="llama-8b",
                team=team,
                session_id=f"{team}-{n % 3}",
                arrived=start + timedelta(minutes=7 * n),
                gpu_ns=(3 if team == "search" else 1) * 60 * 10**9,
            )
        )
        for n in range(20)
        for team in ("search", "ads")
    ]
    with path.open("w") as stream:
        write_jsonl(stream, events)


def test_the_page_names_the_path_from_bill_to_chargeback() -> None:
    verbs = [" ".join(command[:2]) for command in page_commands(PAGE.read_text())]
    for step in (
        "ingest billing", "deployments add", "ingest usage", "allocate --month",
        "reconcile --month", "costs --month", "waste --window", "export chargeback",
        "ledger close",
    ):  # fmt: skip
        assert step in verbs, step


def test_the_documented_path_runs_as_written(
    cli_env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(ledger_cli, "_interactive", lambda: True)  # a user at a terminal
    text = PAGE.read_text()
    synth = re.search(r"`(specledger billing synth [^`]+)`", text)
    assert synth is not None, "the page says how to make a bill without one"
    result = runner.invoke(app, shlex.split(synth.group(1))[1:])
    assert result.exit_code == 0, result.output
    _usage_log(tmp_path / "usage.jsonl")

    outputs = {}
    for command in page_commands(text):
        args = ["bill.csv" if a == "path/to/export.csv.gz" else a for a in command]
        result = runner.invoke(app, args, input="y\n")
        assert result.exit_code == 0, (args, result.output)
        outputs[" ".join(args[:2])] = result.stdout

    assert "BALANCED" in outputs["reconcile --month"]
    for team in ("search", "ads"):
        assert team in outputs["costs --month"]
    chargeback = (tmp_path / "chargeback-2026-11.csv").read_text()
    assert "search" in chargeback
    assert "ads" in chargeback
    assert "idle_gpu" in outputs["waste --window"]  # 40 requests cannot fill a month of GPUs
