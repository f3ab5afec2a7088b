"""`specledger ingest usage`: the proxy's JSONL logs, loaded idempotently; bad lines named."""

import gzip
import json
from pathlib import Path

import pytest
import typer
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from app.cli.usage import register
from app.deployments.service import add_deployment
from app.domain.usage import ReplicaIdleEvent, UsageEvent
from app.models import ReplicaIdle, UsageRecord
from ingest.usage import UsageInputError, load_usage, read_usage_file
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


def _register(engine, name: str = "smol") -> None:
    with Session(engine) as session, session.begin():
        add_deployment(session, name=name)


def test_cli_prints_the_summary(cli_env, engine, tmp_path: Path):
    _register(engine)
    path = _write(tmp_path / "usage.jsonl", [make_event(n) for n in range(3)] + [IDLE])
    result = runner.invoke(_cli(), ["ingest", "usage", str(path)])
    assert result.exit_code == 0, result.output
    assert "read 4 records from 1 file(s)" in result.output
    assert "usage records: 3 inserted, 0 already present" in result.output
    result = runner.invoke(_cli(), ["ingest", "usage", str(path), "--json"])
    summary = json.loads(result.output)
    assert summary["usage"] == {"read": 3, "inserted": 0, "already_present": 3}


def test_usage_of_an_unregistered_deployment_is_refused_unless_allowed(
    cli_env, engine, tmp_path: Path
):
    _register(engine, "smol-chat")
    events = [make_event(0, deployment="smol-chat"), make_event(1, deployment="smol-chta")]
    path = _write(tmp_path / "usage.jsonl", events)
    result = runner.invoke(_cli(), ["ingest", "usage", str(path)])
    assert result.exit_code == 2
    assert f"{path}, line 2, field deployment: unknown deployment 'smol-chta'" in result.output
    assert "did you mean 'smol-chat'" in result.output
    assert "--allow-unknown-deployments" in result.output
    assert _counts(engine) == (0, 0)

    result = runner.invoke(
        _cli(), ["ingest", "usage", str(path), "--allow-unknown-deployments", "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["usage"]["inserted"] == 2


def test_cli_reports_bad_lines_with_exit_status_2(cli_env, tmp_path: Path):
    path = tmp_path / "usage.jsonl"
    path.write_text('{"record": "usage"}\n')
    result = runner.invoke(_cli(), ["ingest", "usage", str(path)])
    assert result.exit_code == 2
    assert "line 1: field 'event_id' is missing" in result.output


def _stored_rows(engine) -> list[dict[str, object]]:
    """Every stored usage record, by event id (ids may differ: the per-record path placed a
    repeated event id at its last occurrence within a batch of 2,000, the columnar path at
    its first; the values kept are the first occurrence's in both)."""
    columns = [c for c in UsageRecord.__table__.columns if c.name != "id"]
    with engine.connect() as conn:
        rows = conn.execute(select(*columns).order_by(UsageRecord.event_id)).mappings().all()
    return [dict(row) for row in rows]


def _varied_events() -> list[UsageEvent]:
    """Records that take every path: plain, unusual values, ones the columns cannot prove
    (non-ASCII tags, an offset instant), repeated ids."""
    events = [make_event(n) for n in range(30)]
    events += [
        make_event(30, team=None, cost_center=None, tags={}, spec_k=None, first_token_at=None),
        make_event(31, tags={"é": "ü", "b": 'q"'}, error="boom\n", status="error"),
        make_event(32, accepted_hist=(1, 0, 3), http_status=None, streamed=True),
        make_event(3, prompt_tokens=999),  # a repeated id: the first is kept
    ]
    return events


def test_columnar_load_stores_what_the_per_record_path_stores(engine, tmp_path: Path):
    from app.usage.repository import insert_usage

    events = _varied_events()
    lines = [json.dumps(e.to_json()) for e in events]
    lines[5] = json.dumps({**events[5].to_json(), "arrived_at": "2026-12-01T10:00:05+01:00"})
    path = tmp_path / "usage.jsonl"
    path.write_text("\n".join(lines[:10]) + "\n\n" + "\n".join(lines[10:]) + "\n")
    report = load_usage(engine, [path], block_bytes=2000)
    assert (report.usage_read, report.usage_inserted, report.usage_already_present) == (
        34, 33, 1)  # fmt: skip
    got = _stored_rows(engine)
    with engine.begin() as conn:
        conn.execute(delete(UsageRecord))
        insert_usage(conn, events)
    assert got == _stored_rows(engine)


@pytest.mark.parametrize("line", [2, 7])
def test_one_bad_field_names_its_line_and_writes_nothing(engine, tmp_path: Path, line: int):
    lines = [json.dumps(make_event(n).to_json()) for n in range(8)]
    lines[line - 1] = json.dumps({**make_event(50).to_json(), "concurrency": 0})
    path = tmp_path / "usage.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(UsageInputError) as caught:
        load_usage(engine, [path], block_bytes=300)  # the bad line after blocks written
    reason = "field 'concurrency': Input should be greater than or equal to 1"
    assert f"{path}, line {line}: {reason}" in str(caught.value)
    assert _counts(engine) == (0, 0)


def test_a_file_read_line_by_line_is_not_loaded_twice(engine, tmp_path: Path):
    """A lone carriage return (a line end to Python's text mode) sends the file back to the
    line-by-line reader after blocks were written: they are undone first."""
    lines = [json.dumps(make_event(n).to_json()) for n in range(6)]
    path = tmp_path / "usage.jsonl"
    path.write_bytes(("\n".join(lines[:4]) + "\n" + lines[4] + "\r" + lines[5] + "\n").encode())
    report = load_usage(engine, [path], block_bytes=300)
    assert (report.lines, report.usage_inserted, report.usage_already_present) == (6, 6, 0)
    assert _counts(engine) == (6, 0)


def test_store_load_writes_parquet_only_when_every_file_is_good(engine, tmp_path: Path):
    from app.storage.dataset_store import DatasetStore
    from app.storage.usage_store import events_table, usage_dataset

    store = DatasetStore.at(str(tmp_path / "store"))
    events = _varied_events()
    good = _write(tmp_path / "good.jsonl", [*events, IDLE])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"record": "usage"}\n')
    with pytest.raises(UsageInputError):
        load_usage(engine, [good, bad], store=store)
    assert store.files("usage") == []
    assert _counts(engine) == (0, 0)
    report = load_usage(engine, [good], store=store, block_bytes=3000)
    assert (report.usage_inserted, report.idle_inserted) == (34, 1)
    stored = usage_dataset(store).to_table().drop_columns(["month", "hour"])
    order = ["event_id", "prompt_tokens"]
    want = events_table(events).sort_by([(c, "ascending") for c in order])
    got = stored.select(want.column_names).sort_by([(c, "ascending") for c in order])
    assert got.to_pylist() == want.to_pylist()


def test_progress_reaches_the_total(engine, tmp_path: Path):
    path = _write(tmp_path / "usage.jsonl", [make_event(n) for n in range(40)])
    seen: list[tuple[int, int]] = []
    load_usage(engine, [path], progress=lambda done, total: seen.append((done, total)),
               block_bytes=1000)  # fmt: skip
    size = path.stat().st_size
    assert len(seen) > 2
    assert seen[-1] == (size, size)
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)


@pytest.mark.parametrize("staged", [False, True])
def test_insert_new_keeps_the_first_of_each_key_and_skips_stored_ones(engine, staged: bool):
    """Both PostgreSQL paths (COPY straight in, and the temporary table another writer's
    conflict falls back to) and SQLite's keep the same rows."""
    from app.kit import bulk
    from app.usage.columns import events_columns
    from app.usage.repository import insert_usage, insert_usage_columns

    if staged and engine.dialect.name != "postgresql":
        pytest.skip("the staged path is PostgreSQL's")
    with engine.begin() as conn:
        insert_usage(conn, [make_event(1, prompt_tokens=111)])
    events = [make_event(0), make_event(1), make_event(2), make_event(0, prompt_tokens=7)]
    original = bulk.bulk_insert
    if staged:  # as if another writer had stored a key between the lookup and the COPY
        import psycopg

        def conflicting(conn, table_name, rows):
            if table_name == "usage_records":
                raise psycopg.errors.UniqueViolation("stored meanwhile")
            return original(conn, table_name, rows)

        bulk.bulk_insert = conflicting
    try:
        with engine.begin() as conn:
            assert insert_usage_columns(conn, events_columns(events)) == 2
    finally:
        bulk.bulk_insert = original
    tokens = {row["event_id"]: row["prompt_tokens"] for row in _stored_rows(engine)}
    assert tokens == {"event-0": 10, "event-1": 111, "event-2": 10}


@pytest.mark.parametrize("stored", [0, 1, 2])
def test_insert_new_skips_a_stored_key_first_in_the_middle_or_last(engine, stored: int):
    """PostgreSQL looks every key up only when an end key is stored or the COPY met one."""
    from app.usage.columns import events_columns
    from app.usage.repository import insert_usage, insert_usage_columns

    with engine.begin() as conn:
        insert_usage(conn, [make_event(stored, prompt_tokens=111)])
    with engine.begin() as conn:
        events = events_columns([make_event(n) for n in range(3)])
        assert insert_usage_columns(conn, events) == 2
    tokens = {row["event_id"]: row["prompt_tokens"] for row in _stored_rows(engine)}
    assert tokens == {f"event-{n}": 111 if n == stored else 10 for n in range(3)}


@pytest.mark.parametrize(
    "content",
    [b'{"record": "usage"}\n\xff\xfe\n', b"\x1f\x8b not gzip", b'{"a": 1}\r{"b": 2}\n'],
    ids=["not-utf8", "bad-gzip", "lone-cr"],
)
def test_files_arrow_cannot_number_are_reported_as_before(engine, tmp_path: Path, content):
    path = tmp_path / ("usage.jsonl.gz" if b"gzip" in content else "usage.jsonl")
    path.write_bytes(content)
    with pytest.raises(UsageInputError) as before:
        read_usage_file(path)
    with pytest.raises(UsageInputError) as now:
        load_usage(engine, [path])
    assert now.value.problems == before.value.problems
    assert _counts(engine) == (0, 0)
