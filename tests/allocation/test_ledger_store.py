"""The ledger in a Parquet store (a folder, or S3 over HTTP against moto's server): the same
entries, rollups and reconciliation as the database, files proven unchanged after a close.

Each example writes a generated month into the database, allocates it there, copies its
usage to a fresh store and allocates it again from the store (the run replaces the first),
all inside a savepoint rolled back afterwards."""

import json
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.allocation import service as allocation_service
from app.allocation.engine import usage_sql
from app.allocation.plan import ENTRY_COLUMNS
from app.allocation.query import AllocationQuery, IdlePolicy, query_allocation
from app.allocation.service import run_allocation
from app.allocation.windowing import Window
from app.deployments.service import add_deployment, add_replica
from app.domain.findings import Thresholds
from app.domain.periods import Month
from app.domain.usage import UsageEvent
from app.domain.windows import Step, TimeWindow
from app.ledger.costs import unit_costs
from app.ledger.focus_export import focus_allocation_table
from app.ledger.reconcile import reconcile
from app.ledger.service import close_month, verify_closed_month
from app.models import LedgerEntry, LedgerRollup
from app.storage.dataset_store import DatasetStore, StoreError
from app.storage.run_repository import store_entries_prefix
from app.storage.usage_store import (
    copy_from_database,
    event_ord,
    events_table,
    plan_usage,
    write_usage,
)
from app.usage.service import get_session, list_sessions
from app.waste.service import find_waste
from tests.allocation.scenarios import MONTH_START, TAG, months
from tests.allocation.scenarios import Month as GeneratedMonth
from tests.allocation.scenarios import store as put_in_database
from tests.allocation.test_ledger_close import _ingest
from tests.factories import at, insert_usage, usage_record
from tests.ingest.helpers import focus_row

OCTOBER = Month.parse("2026-10")


def _window() -> Window:
    return Window.of_month(OCTOBER)


def _copy_usage(session: Session, parquet: DatasetStore) -> int:
    return copy_from_database(
        session, parquet, MONTH_START - timedelta(days=31), MONTH_START + timedelta(days=62)
    )


def _rollups(session: Session, run_id: int) -> list[dict[str, Any]]:
    columns = [c for c in LedgerRollup.__table__.columns if c.name not in ("id", "run_id")]
    rows = session.execute(select(*columns).where(LedgerRollup.run_id == run_id)).all()
    return sorted((dict(r._mapping) for r in rows), key=repr)


def _store_entries(parquet: DatasetStore, run_id: int) -> list[dict[str, Any]]:
    table = parquet.dataset(store_entries_prefix("2026-10", run_id), {}).to_table()
    return _sorted(table.select(list(ENTRY_COLUMNS)))


def _database_entries(session: Session, run_id: int) -> list[dict[str, Any]]:
    columns = [LedgerEntry.__table__.c[c] for c in ENTRY_COLUMNS if c not in ("start_us", "end_us")]
    rows = session.execute(
        select(*columns, LedgerEntry.charge_period_start, LedgerEntry.charge_period_end).where(
            LedgerEntry.run_id == run_id
        )
    ).all()
    records = []
    for row in rows:
        record = dict(row._mapping)
        start, end = record.pop("charge_period_start"), record.pop("charge_period_end")
        record["start_us"] = int(start.timestamp() * 1_000_000) if start else None
        record["end_us"] = int(end.timestamp() * 1_000_000) if end else None
        records.append({c: _plain(record[c]) for c in ENTRY_COLUMNS})
    return sorted(records, key=repr)


def _plain(value: Any) -> Any:
    return str(value) if isinstance(value, str) else value


def _sorted(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=repr)


COST_DIMENSIONS = ["team", "session", "deployment", "model", "method", "cost_center", "tag:app"]


def _costs(session: Session) -> list[dict[str, Any]]:
    """Unit costs by every dimension at once, and per team as a team's key sees them."""
    lines = unit_costs(session, month=OCTOBER, by=COST_DIMENSIONS)
    teams = unit_costs(session, month=OCTOBER, by=["team"], team="a")
    return [line.to_json(COST_DIMENSIONS) for line in lines] + [
        line.to_json(["team"]) for line in teams
    ]


def _allocation(session: Session) -> list[Any]:
    """/v1/allocation's lines per team and deployment, hourly and for the month, idle apart
    and shared back."""
    window = TimeWindow(OCTOBER.start, OCTOBER.end)
    results = []
    for step, idle in ((None, IdlePolicy.separate), (Step.hour, IdlePolicy.share)):
        query = AllocationQuery(
            window=window, aggregate=("team", "deployment"), step=step, idle=idle
        )
        results.append(query_allocation(session, query))
    return [(r.lines, r.totals) for r in results]


AROUND_OCTOBER = TimeWindow(OCTOBER.start - timedelta(days=30), OCTOBER.end + timedelta(days=30))
"""September to November: October kept in a store, the months around it in the database."""


def _sessions(session: Session) -> list[Any]:
    """The session list of October alone (one place) and of the months around it (three
    parts merged), paged, as a team's key and an admin see it; and a few sessions' pages."""
    pages: list[Any] = []
    for window in (TimeWindow(OCTOBER.start, OCTOBER.end), AROUND_OCTOBER):
        for team, limit, offset in ((None, 1000, 0), (None, 2, 1), ("a", 1000, 0)):
            found = list_sessions(session, window=window, team=team, limit=limit, offset=offset)
            pages.append((found.total, found.items))
    for listed in found.items[:3]:
        pages.append(get_session(session, listed.session_id, team=None, limit=5, offset=1))
    return pages


def _waste(session: Session) -> list[Any]:
    """Waste findings of October and of the months around it, admin and team views, with
    thresholds low enough that every group is judged."""
    thresholds = Thresholds(acceptance=0.99, min_requests=1, idle_share=0.01)
    reports = []
    for window in (TimeWindow(OCTOBER.start, OCTOBER.end), AROUND_OCTOBER):
        for team in (None, "a"):
            report = find_waste(
                session,
                window=window,
                team=team,
                thresholds=thresholds,
                now=window.end,
                default_currency="EUR",
            )
            reports.append((report.currency, report.findings))
    return reports


def _focus_rows(table: pa.Table) -> list[dict[str, Any]]:
    """The export's rows as written, but the run id each names (the runs differ)."""
    rows: list[dict[str, Any]] = table.to_pylist()
    for row in rows:
        details = json.loads(row["AllocatedMethodDetails"] or "{}")
        details.pop("x_AllocationRunId", None)
        row["AllocatedMethodDetails"] = details
    return rows


def _without_run(report: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in report.items() if k != "run_id"}


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(month=months(max_scenarios=6), share_idle=st.booleans())
def test_a_store_allocates_as_the_database_does(
    session: Session, tmp_path: Path, month: GeneratedMonth, share_idle: bool
) -> None:
    folder = tmp_path / uuid.uuid4().hex
    folder.mkdir()
    with session.begin_nested() as savepoint:
        put_in_database(session, month, folder)
        in_database = run_allocation(session, _window(), share_idle=share_idle, tag_key=TAG)
        database_entries = _database_entries(session, in_database.run_id)
        database_rollups = _rollups(session, in_database.run_id)
        database_report = reconcile(session, OCTOBER).to_json()
        database_costs = _costs(session)
        database_focus = focus_allocation_table(session, OCTOBER)
        database_allocation = _allocation(session)
        database_sessions = _sessions(session)
        database_waste = _waste(session)
        parquet = DatasetStore.at(str(folder / "store"))
        assert _copy_usage(session, parquet) == len(month.requests)
        in_store = run_allocation(
            session, _window(), share_idle=share_idle, tag_key=TAG, store=parquet
        )
        assert in_store.replaced_run_id == in_database.run_id
        assert session.scalar(select(LedgerEntry.id).limit(1)) is None
        assert _store_entries(parquet, in_store.run_id) == database_entries
        assert _rollups(session, in_store.run_id) == database_rollups
        assert _without_run(reconcile(session, OCTOBER).to_json()) == _without_run(database_report)
        assert (in_store.entries, in_store.totals) == (in_database.entries, in_database.totals)
        assert _costs(session) == database_costs
        assert _focus_rows(focus_allocation_table(session, OCTOBER)) == _focus_rows(database_focus)
        assert _allocation(session) == database_allocation
        assert _sessions(session) == database_sessions
        assert _waste(session) == database_waste
        savepoint.rollback()


@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(month=months(max_scenarios=6), share_idle=st.booleans())
def test_a_large_month_in_the_database_is_allocated_through_spill_files_alike(
    session: Session,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    month: GeneratedMonth,
    share_idle: bool,
) -> None:
    folder = tmp_path / uuid.uuid4().hex
    folder.mkdir()
    with session.begin_nested() as savepoint:
        put_in_database(session, month, folder)
        in_memory = run_allocation(session, _window(), share_idle=share_idle, tag_key=TAG)
        entries = _database_entries(session, in_memory.run_id)
        rollups = _rollups(session, in_memory.run_id)
        with monkeypatch.context() as patch:  # every month is "large"
            patch.setattr(allocation_service, "IN_MEMORY_REQUESTS", -1)
            spilled = run_allocation(session, _window(), share_idle=share_idle, tag_key=TAG)
        assert _database_entries(session, spilled.run_id) == entries
        assert _rollups(session, spilled.run_id) == rollups
        assert (spilled.entries, spilled.totals) == (in_memory.entries, in_memory.totals)
        savepoint.rollback()


def test_a_record_in_the_store_twice_is_allocated_once(tmp_path: Path) -> None:
    parquet = DatasetStore.at(str(tmp_path / "store"))
    event = _event()
    write_usage(parquet, events_table([event]))
    write_usage(parquet, events_table([event]))
    start_us = int(at(0).timestamp() * 1e6)
    dataset = plan_usage(parquet, start_us, start_us + 3_600_000_000)
    assert dataset.count_rows() == 2
    con = duckdb.connect()
    assert con.sql(usage_sql(con, dataset)).fetchall() == [
        (
            event_ord(event.event_id),
            event.event_id,
            "a",
            "search",
            "d1",
            "r1",
            start_us + 300_000_000,
            start_us + 302_000_000,
            10**9,
        )
    ]


def _event() -> UsageEvent:
    return UsageEvent(**usage_record(arrived=at(0, 5), gpu_ns=10**9, session_id="a"))


def test_a_closed_month_in_a_store_is_proven_unchanged_and_tampering_is_found(
    session: Session, tmp_path: Path
) -> None:
    parquet = _allocated_october_in_store(session, tmp_path)
    closure = close_month(session, OCTOBER)
    assert closure.store_files
    assert verify_closed_month(session, OCTOBER).ok
    first = sorted(closure.store_files)[0]
    table = pq.read_table(parquet.path(first))
    pq.write_table(table.slice(0, max(table.num_rows - 1, 0)), parquet.path(first))
    changed = verify_closed_month(session, OCTOBER)
    assert (changed.ok, changed.changed, changed.missing) == (False, [first], [])
    Path(parquet.path(first)).unlink()
    assert verify_closed_month(session, OCTOBER).missing == [first]


def test_a_restatement_of_a_month_in_a_store_books_what_the_database_books(
    session: Session, tmp_path: Path
) -> None:
    booked = []
    for in_store in (False, True):
        folder = tmp_path / ("store" if in_store else "database")
        folder.mkdir()
        with session.begin_nested() as savepoint:
            parquet = DatasetStore.at(str(folder / "store")) if in_store else None
            _ingest(
                session,
                folder / "oct.csv",
                [focus_row(hour=h, cost="10.00") for h in range(2)],
                age_s=3600,
            )
            add_deployment(session, name="d1")
            add_replica(session, deployment="d1", name="r1", gpus=1)
            insert_usage(
                session.connection(),
                [
                    usage_record(arrived=at(0, 5), gpu_ns=1_800 * 10**9, team="search"),
                    usage_record(arrived=at(1, 5), gpu_ns=900 * 10**9, team="ads"),
                ],
            )
            if parquet is not None:
                _copy_usage(session, parquet)
            run_allocation(session, _window(), share_idle=False, tag_key=TAG, store=parquet)
            close_month(session, OCTOBER)
            # AWS restates October (hour 1: 16.00, not 10.00), then November is allocated.
            _ingest(
                session,
                folder / "oct-restated.csv",
                [focus_row(hour=0, cost="10.00"), focus_row(hour=1, cost="16.00")],
            )
            _ingest(session, folder / "nov.csv", [focus_row("2026-11", hour=0, cost="3.00")])
            november = Window.of_month(Month.parse("2026-11"))
            first = run_allocation(session, november, share_idle=False, tag_key=TAG, store=parquet)
            again = run_allocation(session, november, share_idle=False, tag_key=TAG, store=parquet)
            report = reconcile(session, Month.parse("2026-11")).to_json()
            booked.append((first.adjusted_months, again.totals, report["adjustments"]))
            assert _rollups(session, first.run_id) == []  # replaced by the re-run
            savepoint.rollback()
    assert booked[0] == booked[1]
    # hour 1: ads used 900 of 3600 GPU-s: +1.50 to ads, +4.50 to idle, and no more on a re-run
    assert booked[1][2] == [
        {
            "currency": "USD",
            "corrects_month": "2026-10",
            "effective": "6.000000",
            "billed": "6.000000",
        }
    ]


def _allocated_october_in_store(session: Session, tmp_path: Path) -> DatasetStore:
    _ingest(
        session,
        tmp_path / "oct.csv",
        [focus_row(hour=h, cost="10.00") for h in range(2)],
        age_s=3600,
    )
    add_deployment(session, name="d1")
    add_replica(session, deployment="d1", name="r1", gpus=1)
    insert_usage(
        session.connection(),
        [usage_record(arrived=at(h, 5), gpu_ns=900 * 10**9, team="search") for h in range(2)],
    )
    parquet = DatasetStore.at(str(tmp_path / "store"))
    assert _copy_usage(session, parquet) == 2
    run_allocation(session, _window(), share_idle=False, tag_key=TAG, store=parquet)
    return parquet


def test_a_store_address_that_cannot_be_used_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="s3:// store needs a bucket"):
        DatasetStore.at("s3://")
    with pytest.raises(StoreError, match="use a folder or an s3:// URI"):
        DatasetStore.at("gs://bucket/ledger")
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    parquet = DatasetStore(str(blocker), DatasetStore.at(str(tmp_path)).fs, blocker.as_posix())
    with pytest.raises(StoreError, match=f"store {blocker}: cannot write usage"):
        write_usage(parquet, events_table([_event()]))


def test_a_request_across_two_months_kept_in_different_places_is_listed_and_priced_once(
    session: Session, tmp_path: Path
) -> None:
    """September allocated in the database, October in a store, and one request from
    September 30 23:30 to October 1 00:30: its session and its waste finding carry both
    halves of its cost, as when both months are in the database."""
    seen = []
    for in_store in (False, True):
        folder = tmp_path / ("store" if in_store else "database")
        folder.mkdir()
        with session.begin_nested() as savepoint:
            last_hour = focus_row(
                "2026-09",
                cost="6.00",
                ChargePeriodStart="2026-09-30T23:00:00Z",
                ChargePeriodEnd="2026-10-01T00:00:00Z",
            )
            _ingest(session, folder / "sep.csv", [last_hour])
            _ingest(session, folder / "oct.csv", [focus_row(hour=0, cost="10.00")])
            add_deployment(session, name="d1")
            add_replica(session, deployment="d1", name="r1", gpus=1)
            insert_usage(
                session.connection(),
                [
                    usage_record(
                        arrived=at(0) - timedelta(minutes=30),
                        seconds=3600,
                        gpu_ns=3600 * 10**9,
                        event_id="across",
                    ),
                    usage_record(
                        arrived=at(0, 40),
                        seconds=60,
                        session_id="s2",
                        gpu_ns=60 * 10**9,
                        event_id="within",
                    ),
                ],
            )
            september = Window.of_month(Month.parse("2026-09"))
            run_allocation(session, september, share_idle=False, tag_key=TAG)
            parquet = DatasetStore.at(str(folder / "store")) if in_store else None
            if parquet is not None:
                _copy_usage(session, parquet)
            run_allocation(session, _window(), share_idle=False, tag_key=TAG, store=parquet)
            listed = list_sessions(session, window=AROUND_OCTOBER, team=None, limit=10, offset=0)
            detail = get_session(session, "s1", team="search", limit=10, offset=0)
            seen.append((listed.total, listed.items, detail, _waste(session)))
            savepoint.rollback()
    assert seen[0] == seen[1]
    first = seen[1][1][0]
    # s1 used half of each hour's GPU: 3.00 of September's 6.00 and 5.00 of October's 10.00
    assert (first.session_id, first.requests) == ("s1", 1)
    assert first.effective_micros == 8_000_000


def test_reconciliation_of_a_month_in_a_store_reads_the_rollups(
    session: Session, tmp_path: Path
) -> None:
    _allocated_october_in_store(session, tmp_path)
    # Reconciliation and the dashboards' hourly ledger read the rollups: the month is there.
    assert reconcile(session, OCTOBER).balanced
