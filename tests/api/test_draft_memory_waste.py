"""The waste report prices a deployment's measured draft memory (issue 16), on both
databases: the real CPU logs recorded for d1, its October GPU cost from the ledger."""

from datetime import UTC, datetime
from decimal import Decimal

from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from app.domain.ledger import EntryKind
from app.engine_health.draft_memory import record_draft_memory
from app.models import LedgerEntry
from app.storage.run_repository import current_run_ids
from tests.api.conftest import Seeded
from tests.conftest import FIXTURES

LOGS = FIXTURES / "vllm_logs"


def test_the_draft_memory_of_d1_is_priced_as_its_share_of_the_gpu_cost(
    client: TestClient, seeded: Seeded, engine: Engine
) -> None:
    with Session(engine) as session, session.begin():
        memory = record_draft_memory(
            session,
            deployment="d1",
            log=LOGS / "cpu_draft_l6.log",
            baseline_log=LOGS / "cpu_baseline.log",
            now=datetime(2026, 10, 31, tzinfo=UTC),
        ).memory
    with Session(engine) as session:
        gpu_cost = session.scalar(
            select(func.sum(LedgerEntry.effective_cost_micros)).where(
                LedgerEntry.run_id.in_(current_run_ids()),
                LedgerEntry.deployment == "d1",
                LedgerEntry.kind.in_((EntryKind.request, EntryKind.idle)),
            )
        )
    assert gpu_cost == 14_400_000  # two GPU hours at 7.20
    response = client.get(
        "/v1/waste", params={"window": "2026-10"}, headers=seeded.keys.header("admin")
    )
    assert response.status_code == 200, response.text
    [finding] = [f for f in response.json()["findings"] if f["kind"] == "draft_memory"]
    assert (finding["scope"], finding["key"]) == ("deployment", "d1")
    price = round(14_400_000 * memory.draft_bytes / memory.pool_bytes)
    assert Decimal(finding["window_cost"]) == Decimal(price) / 1_000_000
    # d1's traffic: ngram-like counts (k = 4) judged with the L6 draft's c = 0.36.
    assert finding["metrics"]["speedup"] < finding["metrics"]["capacity_ratio"]
    team = client.get(
        "/v1/waste",
        params={"window": "2026-10", "team": "orchid"},
        headers=seeded.keys.header("orchid"),
    )
    assert not any(f["kind"] == "draft_memory" for f in team.json()["findings"])
