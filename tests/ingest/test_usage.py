"""`specledger ingest usage`: the proxy's JSONL logs, loaded idempotently; bad lines named."""

import gzip
import json
from pathlib import Path

import pytest
import typer
from sqlalchemy import func, select
from typer.testing import CliRunner

from app.cli.usage import register
from app.domain.usage import ReplicaIdleEvent
from app.models import ReplicaIdle, UsageRecord
from ingest.usage import UsageInputError, load_usage
from serving.proxy.sink import write_jsonl
from tests.serving.test_usage_sink import T0, make_event

runner = CliRunner()


def _cli() -> typer.Typer:
    app = typer.Typer()
    ingest = typer.Typer()
    register(ingest)
    app.add_typer(ingest, name="ingest")
    return app


def _write(path: Path, records) -> Path:
    with path.open("w", encoding="utf-8") as stream:
        write_jsonl(stream, records)
    return path


def _counts(engine) -> tuple[int, int]:
    with engine.connect() as conn:
        return (
            conn.execute(select(func.count()).select_from(UsageRecord)).scalar_one(),
            conn.execute(select(func.count()).select_from(ReplicaIdle)).scalar_one(),
        )


IDLE = ReplicaIdleEvent(
    deployment="smol", replica="r0", start_at=T0, end_at=T0.replace(hour=10), gpu_ns=5
)


def test_loading_twice_changes_nothing(engine, tmp_path: Path):
    first = _write(tmp_path / "a.jsonl", [make_event(n) for n in range(4)] + [IDLE])
    second = tmp_path / "b.jsonl.gz"
    with gzip.open(second, "wt", encoding="utf-8") as stream:
        write_jsonl(stream, [make_event(n) for n in range(2, 6)])
        stream.write("\n")  # blank lines are fine
    report = load_usage(engine, [first, second])
    assert (report.lines, report.usage_inserted, report.usage_already_present) == (9, 6, 2)
    again = load_usage(engine, [first, second])
    assert (again.usage_inserted, again.usage_already_present) == (0, 8)
    assert (again.idle_inserted, again.idle_already_present) == (0, 1)
    assert _counts(engine) == (6, 1)


def test_a_bad_line_rejects_the_input_naming_file_and_line(engine, tmp_path: Path):
    good = make_event(1).to_json()
    lines = [
        json.dumps(good),
        "{not json",
        json.dumps({**make_event(2).to_json(), "gpu_ns": 1.5}),
        json.dumps({**make_event(3).to_json(), "arrived_at": "2026-12-01 09:00"}),
    ]
    path = tmp_path / "usage.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(UsageInputError) as caught:
        load_usage(engine, [path])
    message = str(caught.value)
    assert message.startswith("usage input rejected, nothing was written:")
    assert f"{path}, line 2: Expecting property name" in message
    assert f"{path}, line 3: field 'gpu_ns': Input should be a valid integer" in message
    assert f"{path}, line 4: field 'arrived_at': Input should have timezone info" in message
    assert _counts(engine) == (0, 0)


def test_cli_prints_the_summary(cli_env, tmp_path: Path):
    path = _write(tmp_path / "usage.jsonl", [make_event(n) for n in range(3)] + [IDLE])
    result = runner.invoke(_cli(), ["ingest", "usage", str(path)])
    assert result.exit_code == 0, result.output
    assert "read 4 records from 1 file(s)" in result.output
    assert "usage records: 3 inserted, 0 already present" in result.output
    result = runner.invoke(_cli(), ["ingest", "usage", str(path), "--json"])
    summary = json.loads(result.output)
    assert summary["usage"] == {"read": 3, "inserted": 0, "already_present": 3}


def test_cli_reports_bad_lines_with_exit_status_2(cli_env, tmp_path: Path):
    path = tmp_path / "usage.jsonl"
    path.write_text('{"record": "usage"}\n')
    result = runner.invoke(_cli(), ["ingest", "usage", str(path)])
    assert result.exit_code == 2
    assert "line 1: field 'event_id' is missing" in result.output
