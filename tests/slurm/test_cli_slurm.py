"""The Slurm commands end to end on the test database: register the nodes from the cost
model, write and ingest the derived bill, read accounting from a file of sacct output,
allocate, and read GPU-hours and cost by account and partition; bad input exits 2 with the
file, line and field named."""

import json
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import Engine
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from app.cli import app
from app.domain.ledger import EntryKind
from tests.breakeven.test_partition_load import WEEK, _rollup, _run, _store_sweep
from tests.factories import insert_usage, usage_record
from tests.slurm.test_ingest_sacct import ENDED, HEADER, JOBS, line

runner = CliRunner()

COST_MODEL = """
cluster = "specledger"
currency = "USD"

[classes.fake]
gpus = 2
purchase_price = "24000.00"
amortization_years = 2
in_service = 2026-01-01
power_kw = "1.5"
pue = "1.2"
price_per_kwh = "0.10"
colocation_per_month = "300.00"
fabric_per_month = "50.00"
support_per_year = "1200.00"
staff_per_month = "100.00"

[nodes.localhost]
class = "fake"
"""


def _ok(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_a_month_on_a_slurm_cluster_from_the_command_line(cli_env: str, tmp_path: Path) -> None:
    model = tmp_path / "cluster.toml"
    model.write_text(COST_MODEL)
    assert "1 nodes added (localhost)" in _ok("slurm", "setup", str(model))
    assert "0 nodes added, 1 already registered" in _ok("slurm", "setup", str(model))
    billed = _ok("slurm", "bill", str(model), "--month", "2026-10", "--ingest")
    assert "wrote 4464 derived FOCUS rows" in billed  # 744 hours x 6 components
    sacct = tmp_path / "sacct.txt"
    sacct.write_text("\n".join([HEADER, *JOBS, ENDED]) + "\n")
    window = ["--since", "2026-10-01", "--until", "2026-11-01"]
    ingested = _ok(
        "ingest", "slurm", "--cluster", "specledger", "--from-file", str(sacct), *window, "--json"
    )
    assert json.loads(ingested)["usage_records"] == 6
    _ok("allocate", "--month", "2026-10")
    lines = json.loads(_ok("slurm", "usage", "--month", "2026-10", "--json"))
    search = next(x for x in lines if (x["account"], x["partition"]) == ("search", "debug"))
    assert (search["jobs"], search["gpu_seconds"]) == (2, 4 * 3600)
    assert search["cost_micros"] > 0
    text = _ok("slurm", "usage", "--month", "2026-10", "--team", "ads")
    assert "ads" in text
    assert "search" not in text


def test_bad_accounting_is_refused_naming_the_line_and_field(cli_env: str, tmp_path: Path) -> None:
    sacct = tmp_path / "sacct.txt"
    bad = line(
        "5",
        "ads",
        "COMPLETED",
        "2026-10-01T00:00:00",
        "2026-10-01T01:00:00",
        3600,
        "cpu=1,gres/gpu=2,mem=lots",
    )
    sacct.write_text("\n".join([HEADER, JOBS[0], bad]) + "\n")
    result = runner.invoke(
        app,
        [
            "ingest",
            "slurm",
            "--cluster",
            "specledger",
            "--from-file",
            str(sacct),
            "--since",
            "2026-10-01",
            "--until",
            "2026-11-01",
        ],
    )
    assert result.exit_code == 2
    assert f"{sacct}, line 3, field AllocTRES" in result.output
    missing = runner.invoke(
        app, ["ingest", "slurm", "--cluster", "c", "--command", "no-such-sacct"]
    )
    assert missing.exit_code == 2
    assert "cannot run 'no-such-sacct': not found" in missing.output


def test_the_partition_schedule_from_the_command_line(
    cli_env: str, engine: Engine, tmp_path: Path
) -> None:
    """A deployment with a fitted sweep, a week of load (40 sessions at the current hour of
    the week, none otherwise) and a ledger price of 5.00 per GPU-hour: the schedule, its
    JSON and the power-saving settings, as an operator gets them."""
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    sessions = [
        usage_record(session_id=f"s{i}", arrived=now - WEEK, seconds=3600) for i in range(40)
    ]
    with Session(engine) as session, session.begin():
        insert_usage(session.connection(), sessions)
        run = _run(session, "2026-09")
        _rollup(session, run, "2026-09", kind=EntryKind.request, cost=40_000_000, gpu_hours=8)
        _store_sweep(session, tmp_path, "d1")
    args = [
        "slurm",
        "schedule",
        "--deployment",
        "d1",
        "--nodes",
        "gpu[01-04]",
        "--tpot-p90-ms",
        "1000",
        "--partition",
        "infer",
        "--weeks",
        "1",
    ]
    plan = json.loads(_ok(*args, "--output", "json"))
    assert plan["partition"] == "infer"
    assert plan["nodes"] == ["gpu01", "gpu02", "gpu03", "gpu04"]
    lines = _ok(*args)
    assert "scontrol update PartitionName=infer Nodes=gpu01" in lines
    power = _ok(*args, "--output", "power-saving")
    assert "SuspendExcNodes=gpu01" in power
    assert "ResumeProgram=/etc/slurm/resume.sh" in power
    bad = runner.invoke(app, [*args[:4], "--nodes", "gpu[01-", *args[6:]])
    assert bad.exit_code == 2
    assert "--nodes" in bad.output
