"""An allocated month built from a FOCUS fixture through the CLI (ingest, deployments, usage,
allocate) and its FOCUS 1.3 export; shared by the tests in this folder."""

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy import Engine
from typer.testing import CliRunner

from app.cli import app
from tests.factories import at, insert_usage, usage_record

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "focus"
AWS_1_1 = FIXTURES / "focus_1_1_aws_gpu.csv"
AWS_1_2 = FIXTURES / "focus_1_2_aws_gpu.csv"
AWS_1_3 = FIXTURES / "focus_1_3_aws_gpu.csv"
runner = CliRunner()


def cli(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def allocate_october(engine: Engine, source: Path) -> None:
    """Ingest ``source`` (October 2026: two p4d GPU hours and a data-transfer row tagged for
    deployment d1, an untagged storage row), register d1 on 8 GPUs, store three requests of
    two teams (GPU-ns that do not divide evenly) and allocate October. The CLI reads the
    database from the environment (the ``cli_env`` fixture)."""
    cli("ingest", "billing", str(source))
    cli("deployments", "add", "d1", "--shared-policy", "even")
    cli("deployments", "add-replica", "d1", "r1", "--gpus", "8")
    insert_usage(
        engine,
        [
            usage_record(arrived=at(0, 1), seconds=10, gpu_ns=7_200 * 10**9, team="search"),
            usage_record(arrived=at(0, 2), seconds=10, gpu_ns=3_601 * 10**9 + 7, team="search"),
            usage_record(
                arrived=at(1, 30), seconds=4, gpu_ns=14_400 * 10**9 + 3, team="ads", session_id="s2"
            ),
        ],
    )
    cli("allocate", "--month", "2026-10")


def export_october(out: Path) -> pa.Table:
    """October's FOCUS 1.3 export through the CLI, as written to ``out`` (Parquet)."""
    cli("export", "chargeback", "--month", "2026-10", "--format", "focus", "--out", str(out))
    return pq.read_table(out)
