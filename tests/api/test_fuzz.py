"""The cost API fuzzed from its own OpenAPI document (schemathesis): every operation, with an
admin key and with a team key, over a seeded month, on SQLite and PostgreSQL. Nothing may
answer a 5xx or carry a traceback: a value the database cannot hold (an id beyond BIGINT, a
name longer than its column, a NUL) is a 422 naming the parameter.

Each operation gets schemathesis' boundary cases (each bound, one past it, wrong types,
missing parameters, other methods) and ``FUZZ_EXAMPLES`` random cases; then a stateful run
follows the links schemathesis infers between operations (a listed sweep to its fit, a
created deployment to its replicas, a listed session to its page)."""

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from hypothesis.errors import FlakyStrategyDefinition
from schemathesis import Case
from schemathesis.python.asgi import shutdown_lifespans
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from app import migrate
from app.auth.service import create_key
from app.db import Base
from app.main import create_app
from app.settings import Settings
from ingest.service import IngestOptions, ingest_billing
from tests.api.conftest import _ok, at, event, store_sweep
from tests.ingest.helpers import focus_row, write_focus_csv

# One worker runs the module in order, so the seeded database is built once per backend.
pytestmark = pytest.mark.xdist_group("api-fuzz")

FUZZ_EXAMPLES = 15
"""Random cases per operation and key, beyond its boundary cases (60 on average). Both
backends: 24 operations, about 7,800 requests, a minute on two cores."""
STATEFUL_SCENARIOS = 20
BILLING_INGEST = "/v1/billing/ingest"
FIT = "/v1/breakeven/sweeps/{sweep_id}/fit"
QUICK_BOOTSTRAP = 20
"""Refits use at most this many bootstrap replicates: more cost time, never another path."""

FUZZ_SETTINGS = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    # The seeded app and the key holder are fixtures; the bodies are large by design.
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
)

# The document only: building the app starts nothing (the engine comes with its lifespan).
schema = schemathesis.openapi.from_dict(
    create_app(Settings(_env_file=None, env="test", database_url="sqlite://")).openapi()
)


@dataclass(frozen=True)
class Target:
    app: FastAPI
    headers: dict[str, dict[str, str]]
    """Authorization headers by whose key: ``admin`` or ``team``."""
    sandbox: Path
    """The only folder the fuzzer's billing locations may name."""


def _seed(app: FastAPI, admin: dict[str, str], engine: Engine, sandbox: Path) -> None:
    """October 2026 billed, two teams' usage, deployment d1 with a replica, the month
    allocated, a fitted sweep: the fuzzer's ids and names find rows, not only 404s."""
    bill = write_focus_csv(sandbox / "oct.csv", [focus_row(hour=h, cost="7.20") for h in range(2)])
    events = [event("orchid", "sess-orchid-1", at(0, 1)), event("walrus", "sess-walrus-1", at(1))]
    ingest_billing(engine, str(bill), IngestOptions())
    with TestClient(app, raise_server_exceptions=False) as client:
        _ok(client.post("/v1/deployments", json={"name": "d1"}, headers=admin), 201)
        replica = {"name": "r1", "gpus": 2}
        _ok(client.post("/v1/deployments/d1/replicas", json=replica, headers=admin), 201)
        _ok(client.post("/v1/usage/events", json={"events": events}, headers=admin))
        _ok(client.post("/v1/allocation/runs", json={"month": "2026-10"}, headers=admin), 201)
    store_sweep(engine)


def _empty(engine: Engine, db_url: str) -> None:
    """Remove what the fuzzer wrote; a closed month's entries refuse deletes, so a closure
    means rebuilding the schema."""
    with engine.connect() as conn:
        closed = conn.execute(text("SELECT count(*) FROM ledger_closures")).scalar()
    if closed:
        engine.dispose()
        migrate.downgrade(db_url, "base")
        migrate.upgrade(db_url)
        return
    with engine.begin() as conn:
        for table in reversed(Base.metadata.sorted_tables):
            conn.execute(table.delete())


@pytest.fixture(scope="module")
def target(
    migrated_engine: Engine, db_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Target]:
    sandbox = tmp_path_factory.mktemp("fuzz-billing")
    data_dir = tmp_path_factory.mktemp("fuzz-data")
    app = create_app(Settings(env="test", database_url=db_url, data_dir=data_dir))
    with Session(migrated_engine) as session, session.begin():
        admin = create_key(session, team=None, admin=True).secret
        team = create_key(session, team="orchid", admin=False).secret
    headers = {
        "admin": {"Authorization": f"Bearer {admin}"},
        "team": {"Authorization": f"Bearer {team}"},
    }
    _seed(app, headers["admin"], migrated_engine, sandbox)
    try:
        yield Target(app, headers, sandbox)
    finally:
        shutdown_lifespans()  # schemathesis keeps an app started until the process exits
        _empty(migrated_engine, db_url)


@pytest.fixture(params=["admin", "team"])
def who(request: pytest.FixtureRequest) -> str:
    """Whose key the requests carry."""
    return str(request.param)


def _confine(case: Case[Any], sandbox: Path) -> None:
    """Keep what the fuzzer asks for inside the sandbox and quick: a billing location is read
    in the sandbox (``/`` would walk the whole disk, ``s3://`` reach the network), and a refit
    bootstraps at most ``QUICK_BOOTSTRAP`` times."""
    body = case.body
    if case.path == BILLING_INGEST and isinstance(body, dict):
        location = body.get("location")
        if isinstance(location, str):
            relative = location.removeprefix("s3://").lstrip("/").replace("..", "__")
            body["location"] = str(sandbox / relative)
    if case.path == FIT:
        query = case.query if isinstance(case.query, dict) else {}
        bootstrap = str(query.get("bootstrap", 200))  # the route's default; sent as text
        if bootstrap.isdecimal() and QUICK_BOOTSTRAP < int(bootstrap) <= 2000:
            case.query = {**query, "bootstrap": QUICK_BOOTSTRAP}


def _problem(case: Case[Any], status: int, content: bytes) -> str | None:
    """What is wrong with an answer: a server error, or a traceback in the body."""
    if status < 500 and b"Traceback" not in content:
        return None
    request = f"{case.method} {case.formatted_path} query={case.query!r} body={case.body!r}"
    return f"{request} -> {status}: {content[:2000]!r}"


BEYOND = 2**63
"""One past the largest id the database holds (BIGINT)."""
LONG_NAME = "n" * 129
"""One character longer than a name column."""


def _batch(**overrides: Any) -> dict[str, Any]:
    return {"events": [{**event("orchid", "sess-orchid-9", at(2)), **overrides}]}


CANNOT_HOLD: list[tuple[str, str, dict[str, Any], Any, str]] = [
    ("GET", f"/v1/breakeven/sweeps/{BEYOND}", {}, None, "path.sweep_id"),
    ("GET", f"/v1/breakeven/sweeps/{BEYOND}/fit", {}, None, "path.sweep_id"),
    ("GET", "/v1/breakeven/sweeps/1/fit", {"seed": BEYOND}, None, "query.seed"),
    ("GET", "/v1/breakeven/sweeps", {"deployment": LONG_NAME}, None, "query.deployment"),
    ("GET", "/v1/sessions", {"window": "2026-10", "offset": BEYOND}, None, "query.offset"),
    ("GET", "/v1/sessions", {"window": "2026-10", "team": "or\x00chid"}, None, "query.team"),
    ("GET", f"/v1/sessions/{LONG_NAME}", {}, None, "path.session_id"),
    ("GET", "/v1/tiers", {"sweep": BEYOND}, None, "query.sweep"),
    (
        "GET",
        "/v1/tiers/recommendation",
        {"concurrency": 8, "tpot_p90": 0.05, "sweep": BEYOND},
        None,
        "query.sweep",
    ),
    ("GET", "/v1/costs", {"month": "2026-10", "team": LONG_NAME}, None, "query.team"),
    ("GET", "/v1/waste", {"window": "2026-10", "team": LONG_NAME}, None, "query.team"),
    ("GET", "/v1/allocation", {"window": "2026-10", "team": LONG_NAME}, None, "query.team"),
    (
        "POST",
        f"/v1/deployments/{LONG_NAME}/replicas",
        {},
        {"name": "r", "gpus": 1},
        "path.name",
    ),
    ("GET", "/v1/sessions", {"window": "9999-12"}, None, "query.window"),
    ("GET", "/v1/waste", {"window": "9999-12-31"}, None, "query.window"),
    (
        "POST",
        "/v1/allocation/runs",
        {},
        {"start": "0001-01-01T00:30:00+05:00", "end": "0001-01-02T00:00:00Z"},
        "body",
    ),
    ("POST", "/v1/deployments", {}, {"name": "d\x00"}, "body.name"),
    ("POST", BILLING_INGEST, {}, {"location": "oct.csv", "source": "s\x00"}, "body.source"),
    ("POST", "/v1/usage/events", {}, _batch(team="or\x00chid"), "body.events.0.team"),
    (
        "POST",
        "/v1/usage/events",
        {},
        _batch(prompt_tokens=2**31),
        "body.events.0.prompt_tokens",
    ),
]
"""method, path, query, body, and the field the 422 names."""


@pytest.mark.parametrize(
    ("method", "path", "params", "body", "field"),
    CANNOT_HOLD,
    ids=[f"{method} {field}" for method, _, _, _, field in CANNOT_HOLD],
)
def test_values_the_database_cannot_hold_are_422_naming_the_field(
    target: Target, method: str, path: str, params: dict[str, Any], body: Any, field: str
) -> None:
    """The 500s fuzzing and probing found (OverflowError on SQLite, NumericValueOutOfRange
    and NUL on PostgreSQL, a window past 9999-12-31 in ``datetime``), each now refused
    before it reaches a query."""
    if path == BILLING_INGEST:
        body = {**body, "location": str(target.sandbox / body["location"])}
    with TestClient(target.app, raise_server_exceptions=False) as client:
        response = client.request(
            method, path, params=params, json=body, headers=target.headers["admin"]
        )
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] in {"validation_error", "invalid_parameter"}
    assert field in {f["field"] for f in error["fields"]}, error


@schema.parametrize()
@FUZZ_SETTINGS
def test_no_operation_answers_a_server_error(case: Case[Any], target: Target, who: str) -> None:
    _confine(case, target.sandbox)
    response = case.call(app=target.app, headers=target.headers[who])
    assert response.request.headers["Authorization"] == target.headers[who]["Authorization"]
    problem = _problem(case, response.status_code, response.content)
    assert problem is None, problem


def test_linked_operations_answer_no_server_error(target: Target, who: str) -> None:
    problems: list[str] = []

    class Workflow(schema.as_state_machine()):  # type: ignore[misc]
        def before_call(self, case: Case[Any]) -> None:
            _confine(case, target.sandbox)

        def get_call_kwargs(self, case: Case[Any]) -> dict[str, Any]:
            return {"app": target.app, "headers": target.headers[who]}

        def validate_response(
            self, response: Any, case: Case[Any], *args: Any, **kwargs: Any
        ) -> None:
            problem = _problem(case, response.status_code, response.content)
            if problem:
                problems.append(problem)
            assert problem is None, problem

    # The scenarios share the database (a deployment one creates is a 409 in the next), so a
    # replay may find other links to follow; schemathesis' own runner moves on then too.
    with contextlib.suppress(FlakyStrategyDefinition):
        Workflow.run(
            settings=settings(FUZZ_SETTINGS, max_examples=STATEFUL_SCENARIOS, stateful_step_count=6)
        )
    assert not problems, "\n".join(problems)
