"""A team's reads find its rows through indexes: no GET route scans the ledger for a team key.

Every GET route of the access table (:data:`tests.api.test_access.CASES`) is called with a
team key, in each of its variants, and the SQL the database receives is captured (a
``before_cursor_execute`` listener on every engine), so the plans checked are those of the
queries the routes really run. Each statement that reads ``ledger_entries`` or
``usage_records`` is explained (``EXPLAIN QUERY PLAN`` on SQLite, ``EXPLAIN (FORMAT JSON)``
on PostgreSQL) with the parameters it ran with:

- neither table may be scanned whole (SQLite ``SCAN``, PostgreSQL ``Seq Scan``);
- ``ledger_entries`` must be reached by the team (``(team, run_id)``) or by the team's
  requests (``(event_id, run_id)``): an index search on the run alone reads every team's
  entries of the month, and inside a join once per request (issue 28: 200 s for a team's
  waste report on a month of 40,000 requests).

On PostgreSQL the plans are those of the real planner over a month with other teams in
it: before explaining, 20,000 requests of 40 other teams and their entries are added to the
seeded month and the tables ANALYZEd. On the seeded rows alone (a dozen) the planner rightly
prefers a sequential scan, or the run's index and a hash join, to any team index, whatever
the indexes; ``enable_seqscan = off`` would only show that an index plan exists, not that
the planner takes it (it kept the run's index and a hash join here). 20,000 rows take a
second to add and give the statistics a team's share of the month, as in production.
SQLite's planner does not use statistics unless ANALYZE ran, and none has: its plans are the
ones it makes for a table of any size. ``bench/reads.py`` times both at 1M and 10M entries.
"""

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import Connection, Engine, event

from tests.api.conftest import Seeded
from tests.api.test_access import CASES, _call

_TABLES = ("ledger_entries", "usage_records")

WHOLE_SOURCE_ROWS = {("/v1/chargeback", "focus-csv"), ("/v1/chargeback", "focus-parquet")}
"""Reads allowed to take a run's entries without the team: the FOCUS export splits each
billing row's quantities across all of the row's shares (largest remainder), so it reads
every share of a row and keeps the team's; it reads by run and row, never per request."""

NOT_TEAM_READS = {"/v1/prices"}
"""Routes that read no team's rows for a team key: a deployment's prices are the whole
month's cost over the whole month's tokens, the same answer for every key, so they read the
month whole, once per allocation run (:class:`app.ledger.prices.PriceBook`;
``tests/api/test_prices.py`` checks that a second call reads nothing)."""

MUST_READ_LEDGER = {
    "/v1/allocation",
    "/v1/costs",
    "/v1/chargeback",
    "/v1/sessions",
    "/v1/waste",
    "/dashboards/tiers",
}
"""Routes whose team view joins the ledger: each must have had a statement checked, so the
test cannot pass by capturing nothing."""


@dataclass(frozen=True)
class Statement:
    route: str
    fmt: str
    sql: str
    parameters: Any


@contextmanager
def captured() -> Iterator[list[tuple[str, Any]]]:
    """The statements every engine runs while the context is open."""
    statements: list[tuple[str, Any]] = []

    def listen(
        conn: Connection, cursor: Any, sql: str, parameters: Any, context: Any, many: bool
    ) -> None:
        if not many:
            statements.append((sql, parameters))

    event.listen(Engine, "before_cursor_execute", listen)
    try:
        yield statements
    finally:
        event.remove(Engine, "before_cursor_execute", listen)


def team_reads(client: TestClient, seeded: Seeded) -> list[Statement]:
    """The reads of ledger entries and usage that the GET routes run for team orchid."""
    found: list[Statement] = []
    for (method, template), case in sorted(CASES.items()):
        if method != "GET" or case.static or template in NOT_TEAM_READS:
            continue
        for variant in ({}, *case.variants):
            with captured() as statements:
                response = _call(
                    client, method, template, case, seeded, seeded.keys.header("orchid"), **variant
                )
            assert response.status_code < 500, f"{template} {variant}: {response.text[:300]}"
            fmt = str({**case.query, **variant}.get("format", ""))
            found += [
                Statement(template, fmt, sql, parameters)
                for sql, parameters in statements
                if sql.lstrip().upper().startswith(("SELECT", "WITH"))
                and any(table in sql for table in _TABLES)
            ]
    return found


def _aliases(sql: str) -> dict[str, str]:
    """Name in the plan -> table, for the two tables and their aliases in the statement."""
    names = {table: table for table in _TABLES}
    for table, alias in re.findall(rf"\b({'|'.join(_TABLES)}) AS (\w+)", sql):
        names[alias] = table
    return names


def sqlite_problems(conn: Connection, sql: str, parameters: Any, *, by_run: bool) -> list[str]:
    """What is wrong with the statement's SQLite plan (nothing: an empty list)."""
    names = _aliases(sql)
    problems = []
    for *_, detail in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql, parameters):
        match = re.match(r"(SCAN|SEARCH) (\w+)\b(.*)", str(detail))
        if match is None or match[2] not in names:
            continue
        verb, table, how = match[1], names[match[2]], match[3]
        if verb == "SCAN":
            problems.append(f"full scan: {detail}")
        elif table == "ledger_entries" and not by_run and not re.search(r"\b(team|event_id)=", how):
            problems.append(f"ledger entries not found by team or request: {detail}")
    return problems


def postgres_problems(conn: Connection, sql: str, parameters: Any, *, by_run: bool) -> list[str]:
    """What is wrong with the statement's PostgreSQL plan (nothing: an empty list)."""
    names = _aliases(sql)
    (plan,) = conn.exec_driver_sql("EXPLAIN (FORMAT JSON) " + sql, parameters).scalar_one()
    plan = json.loads(plan) if isinstance(plan, str) else plan
    problems = []
    for node in _nodes(plan["Plan"]):
        table = names.get(node.get("Relation Name", ""), node.get("Relation Name"))
        if table not in _TABLES:
            continue
        kind = node["Node Type"]
        if kind == "Seq Scan" and not (by_run and table == "ledger_entries"):
            # A read of the whole run may scan a table that holds little else.
            problems.append(f"full scan of {table}: {node.get('Filter', '')}")
        condition = node.get("Index Cond", node.get("Recheck Cond", ""))
        if (
            table == "ledger_entries"
            and not by_run
            and kind != "Seq Scan"
            and not re.search(r"\b(team|event_id)\b", condition)
        ):
            problems.append(f"ledger entries not found by team or request: {kind} {condition}")
    return problems


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _nodes(child)


def plan_problems(conn: Connection, statement: Statement) -> list[str]:
    by_run = (statement.route, statement.fmt) in WHOLE_SOURCE_ROWS
    check = sqlite_problems if conn.dialect.name == "sqlite" else postgres_problems
    return check(conn, statement.sql, statement.parameters, by_run=by_run)


_PADDING = 20_000

_PAD_USAGE = """INSERT INTO usage_records (event_id, session_id, team, tags, deployment, replica,
    model, endpoint, streamed, spec_method, spec_k, arrived_at, finished_at, prompt_tokens,
    cached_tokens, completion_tokens, num_drafts, draft_tokens, accepted_tokens, gpu_ns,
    concurrency, status)
SELECT 'pad-' || i, 'pad-session-' || (i %% 2000), 'pad-team-' || (i %% 40), '{}', 'd1', 'r1',
    'smollm2-135m', 'completions', false, 'ngram', 4,
    TIMESTAMPTZ '2026-10-01 00:00:00+00' + i * INTERVAL '2 minutes',
    TIMESTAMPTZ '2026-10-01 00:00:10+00' + i * INTERVAL '2 minutes',
    100, 0, 50, 20, 80, 60, 1000000000, 1, 'ok'
FROM generate_series(1, %(n)s) AS i"""

_PAD_ENTRIES = """INSERT INTO ledger_entries (run_id, booked_month, kind, method, billing_row_id,
    charge_period_start, charge_period_end, deployment, replica, event_id, session_id, team,
    gpu_ns, effective_cost_micros, billed_cost_micros, currency)
SELECT %(run)s, '2026-10', 'request', 'gpu_seconds', NULL,
    date_trunc('hour', u.arrived_at), date_trunc('hour', u.arrived_at) + INTERVAL '1 hour',
    u.deployment, u.replica, u.event_id, u.session_id, u.team, u.gpu_ns, 1000, 1000, 'USD'
FROM usage_records AS u WHERE u.team LIKE 'pad-team-%%'"""


def pad_month(conn: Connection) -> None:
    """Other teams' requests and entries in the seeded month, and fresh statistics
    (PostgreSQL only: see the module docstring)."""
    run = conn.exec_driver_sql(
        "SELECT id FROM allocation_runs WHERE month = '2026-10' AND status = 'current'"
    ).scalar_one()
    conn.exec_driver_sql(_PAD_USAGE, {"n": _PADDING})
    conn.exec_driver_sql(_PAD_ENTRIES, {"run": run})
    conn.commit()
    for table in (*_TABLES, "ledger_rollups", "allocation_runs"):
        conn.exec_driver_sql(f"ANALYZE {table}")
    conn.commit()


@contextmanager
def explaining(engine: Engine) -> Iterator[Connection]:
    with engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            pad_month(conn)
        yield conn
        conn.rollback()


def test_team_reads_find_rows_by_index(client: TestClient, seeded: Seeded, engine: Engine) -> None:
    statements = team_reads(client, seeded)
    checked = {s.route for s in statements if "ledger_entries" in s.sql}
    assert checked >= MUST_READ_LEDGER, f"no ledger read captured for {MUST_READ_LEDGER - checked}"
    failures = []
    with explaining(engine) as conn:
        for statement in statements:
            for problem in plan_problems(conn, statement):
                failures.append(f"{statement.route} {statement.fmt}: {problem}\n{statement.sql}")
    assert not failures, "\n\n".join(failures)


def test_the_check_finds_the_quadratic_join_and_a_full_scan(seeded: Seeded, engine: Engine) -> None:
    """The checks can fail: issue 28's join without the event_id index searched the run's
    entries once per request; a filter on an unindexed column scans the table."""
    join = Statement(
        "/v1/waste",
        "",
        "SELECT sum(le.effective_cost_micros) FROM usage_records "
        "JOIN ledger_entries AS le INDEXED BY ix_ledger_entries_run_id "
        "ON le.event_id = usage_records.event_id "
        "WHERE usage_records.team = 'orchid' AND le.run_id = 1"
        if engine.dialect.name == "sqlite"
        else "SELECT sum(le.effective_cost_micros) FROM usage_records "
        "JOIN ledger_entries AS le ON le.event_id || '' = usage_records.event_id "
        "WHERE usage_records.team = 'orchid' AND le.run_id = 1",
        (),
    )
    scan = Statement(
        "/v1/costs", "", "SELECT count(*) FROM ledger_entries WHERE currency = 'USD'", ()
    )
    with explaining(engine) as conn:
        assert plan_problems(conn, join)
        assert any("full scan" in p for p in plan_problems(conn, scan))
