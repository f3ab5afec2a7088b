"""Draft-memory measurements stored per deployment and judged, on SQLite and PostgreSQL."""

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.breakeven.rules.curve import BreakevenCurve
from app.deployments.service import UnknownDeployment, add_deployment
from app.domain.findings import AcceptanceGroup, FindingKind, Scope
from app.engine_health.draft_memory import (
    draft_memory_findings,
    list_draft_memory,
    record_draft_memory,
)
from app.engine_health.rules.engine_memory import GIB, StartupLogError
from app.models import EngineMemory
from tests.conftest import FIXTURES

LOGS = FIXTURES / "vllm_logs"
NOW = datetime(2026, 12, 5, 2, 0, tzinfo=UTC)


def _record(session: Session, deployment: str = "smol", *, at: datetime = NOW, gpu: bool = False):
    prefix = "gpu" if gpu else "cpu"
    return record_draft_memory(
        session,
        deployment=deployment,
        log=LOGS / (f"{prefix}_draft_1b.log" if gpu else "cpu_draft_l6.log"),
        baseline_log=LOGS / f"{prefix}_baseline.log",
        now=at,
    )


def _group(name: str, *, drafts: int = 100, drafted: int = 400, accepted: int = 12):
    return AcceptanceGroup(
        scope=Scope.deployment,
        key=name,
        method="draft_model",
        k=4,
        requests=50,
        num_drafts=drafts,
        draft_tokens=drafted,
        accepted_tokens=accepted,
        scheduled_tokens=50 * 1000 + drafted - accepted,
        cost_micros=0,
    )


def test_a_measurement_is_stored_and_listed(session: Session) -> None:
    add_deployment(session, name="smol")
    add_deployment(session, name="llama")
    first = _record(session)
    assert first.memory.tokens_without == 278_784
    _record(session, at=NOW + timedelta(hours=1))
    _record(session, "llama", gpu=True)
    rows = list_draft_memory(session)
    assert [(m.deployment, m.measured_at) for m in rows] == [
        ("smol", NOW + timedelta(hours=1)),
        ("llama", NOW),
        ("smol", NOW),
    ]
    latest = list_draft_memory(session, latest_only=True)
    assert [m.deployment for m in latest] == ["smol", "llama"]
    body = latest[0].to_json()
    assert body["kv_tokens_with"] == 224_000
    assert body["draft_gib"] == pytest.approx(1.175, abs=1e-3)
    assert body["memory_share"] == pytest.approx(0.1664, abs=1e-4)
    assert body["sources"]["baseline_log"].endswith("cpu_baseline.log")
    read_back = latest[0].memory
    assert read_back.draft_bytes == first.memory.draft_bytes
    assert read_back.draft_kv_bytes == first.memory.draft_kv_bytes
    assert read_back.draft_cost_ratio == pytest.approx(0.36, rel=1e-6)
    stored = session.scalars(select(EngineMemory).where(EngineMemory.id == first.id)).one()
    assert stored.figures["drafted"]["draft_checkpoint_bytes"] == round(0.09 * GIB)
    assert stored.figures["baseline"]["bound_cpus"] == [[0]]
    assert latest[1].memory.device == "GPU"


def test_bad_input_is_refused_and_nothing_stored(session: Session, tmp_path: Path) -> None:
    with pytest.raises(UnknownDeployment):
        _record(session, "nobody")
    add_deployment(session, name="smol")
    with pytest.raises(StartupLogError, match="baseline log ran with speculation"):
        record_draft_memory(
            session,
            deployment="smol",
            log=LOGS / "cpu_baseline.log",
            baseline_log=LOGS / "cpu_draft_l6.log",
            now=NOW,
        )
    with pytest.raises(StartupLogError, match="cannot read"):
        record_draft_memory(
            session,
            deployment="smol",
            log=tmp_path / "missing.log",
            baseline_log=LOGS / "cpu_baseline.log",
            now=NOW,
        )
    assert list_draft_memory(session) == []


def test_findings_price_the_newest_measurement(session: Session) -> None:
    add_deployment(session, name="smol")
    measurement = _record(session)
    found = draft_memory_findings(
        session,
        gpu_cost={"smol": 14_400_000},
        acceptance={"smol": _group("smol")},
        curves={},
        window_seconds=86_400,
    )
    assert len(found) == 1
    finding = found[0]
    assert (finding.kind, finding.key) == (FindingKind.draft_memory, "smol")
    share = measurement.memory.draft_bytes / measurement.memory.pool_bytes
    assert finding.window_cost_micros == round(14_400_000 * share)
    assert finding.metrics["measurement_id"] == measurement.id
    # L = (scheduled - rejected) / requests = 1,000 tokens a request.
    assert finding.metrics["kv_concurrency"] == 224.0
    good = draft_memory_findings(
        session,
        gpu_cost={"smol": 14_400_000},
        acceptance={"smol": _group("smol", accepted=380)},
        curves={},
        window_seconds=86_400,
    )
    assert good == []
    no_cost = draft_memory_findings(
        session, gpu_cost={}, acceptance={}, curves={}, window_seconds=86_400
    )
    assert no_cost == []


def test_a_drafter_no_longer_configured_or_a_curve_of_another_method_is_not_used(
    session: Session,
) -> None:
    deployment = add_deployment(session, name="smol")
    _record(session)
    unused = draft_memory_findings(
        session, gpu_cost={"smol": 1_000_000}, acceptance={}, curves={}, window_seconds=3_600
    )
    assert [f.detail.endswith("reserved but unused") for f in unused] == [True]
    curve = BreakevenCurve(  # a sweep that does not exist ran no draft_model: ignored
        deployment="smol",
        breakeven_concurrency=4.0,
        speedups=[(1.0, 9.0)],
        schedule=[],
        sweep_id=999,
    )
    judged = draft_memory_findings(
        session,
        gpu_cost={"smol": 1_000_000},
        acceptance={"smol": _group("smol")},
        curves={"smol": curve},
        window_seconds=3_600,
    )
    assert "batch-one bound" in str(judged[0].metrics["speedup_source"])
    deployment.engine_config = {"model": "m", "speculation": {"method": "ngram", "k": 4}}
    session.flush()
    assert (
        draft_memory_findings(
            session, gpu_cost={"smol": 1_000_000}, acceptance={}, curves={}, window_seconds=3_600
        )
        == []
    )
