"""32 writers on one database at once (30 API clients and two proxies' usage sinks), a
third of the event ids shared: every distinct event is stored exactly once and no client
sees a 5xx, on SQLite as on PostgreSQL."""

import sqlite3
import threading
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from app.db import make_engine
from bench.concurrent_writers import run_writers

pytestmark = pytest.mark.xdist_group("concurrent-writers")


def test_concurrent_writers_store_every_event_once_without_a_5xx(
    engine: Engine, db_url: str
) -> None:
    run = run_writers(db_url, writers=32, proxies=2, events=120)
    assert run.stored == run.distinct
    assert run.stored_rows == len(run.distinct) == 32 * 80 + 40
    assert not [status for status in run.statuses if status >= 500], run.statuses
    assert run.statuses[200] == 30 * 120 // 20


def test_a_sqlite_writer_waits_for_the_lock_instead_of_failing(tmp_path: Path) -> None:
    """The failure mode this fixes: a transaction that reads, then writes after another
    writer committed, is refused at once under a deferred BEGIN. Under BEGIN IMMEDIATE
    the second writer waits for the first and both commit."""
    url = f"sqlite+pysqlite:///{tmp_path / 'lock.db'}"
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (n INTEGER)"))
    raw = sqlite3.connect(tmp_path / "lock.db", isolation_level=None, check_same_thread=False)
    raw.execute("BEGIN DEFERRED")
    raw.execute("SELECT count(*) FROM t").fetchall()  # a read snapshot, then...
    with engine.begin() as conn:  # ... another writer commits
        conn.execute(text("INSERT INTO t VALUES (1)"))
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        raw.execute("INSERT INTO t VALUES (2)")  # at once, whatever the busy timeout
    raw.execute("ROLLBACK")

    raw.execute("BEGIN IMMEDIATE")  # holds the write lock for a moment
    released = threading.Timer(0.5, lambda: raw.execute("COMMIT"))
    released.start()
    with engine.begin() as conn:  # SpecLedger's transaction waits for it, then writes
        conn.execute(text("SELECT count(*) FROM t")).scalar()
        conn.execute(text("INSERT INTO t VALUES (3)"))
    released.join()
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM t")).scalar() == 2
    engine.dispose()
