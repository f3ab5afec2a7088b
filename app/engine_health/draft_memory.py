"""Draft-model memory per deployment: measured from two vLLM start-up logs, stored, listed,
and priced into the waste report (:class:`DraftMemorySource`)."""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.breakeven.rules.curve import BreakevenCurve
from app.breakeven.service import breakeven_curves
from app.deployments.service import get_deployment
from app.domain.findings import AcceptanceGroup, Finding, FindingInputs, FindingKind, Scope
from app.engine_health.rules.engine_memory import (
    GIB,
    MODEL_FREE_METHODS,
    DraftMemory,
    DraftMemoryExposure,
    SpeculationEvidence,
    StartupLogError,
    draft_memory,
    draft_memory_finding,
    parse_startup_log,
)
from app.models import Deployment, EngineMemory, SweepPointRecord
from app.storage.entry_reader import LedgerReaders


@dataclass(frozen=True, slots=True)
class Measurement:
    id: int
    deployment: str
    measured_at: datetime
    memory: DraftMemory
    sources: Mapping[str, str]

    def to_json(self) -> dict[str, Any]:
        memory = self.memory
        return {
            "id": self.id,
            "deployment": self.deployment,
            "measured_at": self.measured_at.isoformat(),
            "device": memory.device,
            "method": memory.method,
            "draft_model": memory.draft_model,
            "kv_tokens_without": memory.tokens_without,
            "kv_tokens_with": memory.tokens_with,
            "capacity_ratio": round(memory.capacity_ratio, 4),
            "draft_gib": round(memory.draft_bytes / GIB, 3),
            "out_of_budget_gib": round(memory.out_of_budget_bytes / GIB, 3),
            "draft_kv_gib": round(memory.draft_kv_bytes / GIB, 3),
            "draft_weights_gib": None
            if memory.draft_weights_bytes is None
            else round(memory.draft_weights_bytes / GIB, 3),
            "pool_gib": round(memory.pool_bytes / GIB, 3),
            "pool_basis": memory.pool_basis,
            "memory_share": round(memory.share, 4),
            "draft_cost_ratio": None
            if memory.draft_cost_ratio is None
            else round(memory.draft_cost_ratio, 4),
            "sources": dict(self.sources),
        }


def read_log(path: Path) -> list[str]:
    """A log's lines; undecodable bytes replaced (vLLM logs carry progress-bar glyphs).

    Raises:
        StartupLogError: If the file cannot be read.
    """
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as exc:
        raise StartupLogError(f"cannot read {path}: {exc.strerror}") from None


def record_draft_memory(
    session: Session,
    *,
    deployment: str,
    log: Path,
    baseline_log: Path,
    now: datetime,
    pool_bytes: int | None = None,
) -> Measurement:
    """Measure the drafter's memory from a start-up with it (``log``) and one without it
    (``baseline_log``) and store it for the deployment.

    Raises:
        UnknownDeployment: If the deployment is not registered.
        StartupLogError: If a log lacks the figures, or the two do not compare.
    """
    owner = get_deployment(session, deployment)
    baseline = parse_startup_log(read_log(baseline_log), source=str(baseline_log))
    drafted = parse_startup_log(read_log(log), source=str(log))
    memory = draft_memory(baseline=baseline, drafted=drafted, pool_bytes=pool_bytes)
    sources = {"log": str(log), "baseline_log": str(baseline_log)}
    row = EngineMemory(
        deployment_id=owner.id,
        measured_at=now,
        device=memory.device,
        method=memory.method,
        draft_model=memory.draft_model,
        kv_tokens_without=memory.tokens_without,
        kv_tokens_with=memory.tokens_with,
        kv_bytes_without=memory.kv_bytes_without,
        kv_bytes_with=memory.kv_bytes_with,
        draft_bytes=memory.draft_bytes,
        pool_bytes=memory.pool_bytes,
        pool_basis=memory.pool_basis,
        draft_weights_bytes=memory.draft_weights_bytes,
        target_weights_bytes=memory.target_weights_bytes,
        max_model_len=memory.max_model_len,
        figures={
            "sources": sources,
            "baseline": baseline.as_dict(),
            "drafted": drafted.as_dict(),
        },
    )
    session.add(row)
    session.flush()
    return Measurement(row.id, owner.name, now, memory, sources)


def _memory(row: EngineMemory) -> DraftMemory:
    t0, kv0 = row.kv_tokens_without, row.kv_bytes_without
    out_of_budget = kv0 - row.kv_bytes_with
    return DraftMemory(
        device=row.device,
        method=row.method,
        draft_model=row.draft_model,
        tokens_without=t0,
        tokens_with=row.kv_tokens_with,
        kv_bytes_without=kv0,
        kv_bytes_with=row.kv_bytes_with,
        bytes_per_token=kv0 / t0,
        draft_bytes=row.draft_bytes,
        out_of_budget_bytes=out_of_budget,
        draft_kv_bytes=row.draft_bytes - out_of_budget,
        draft_weights_bytes=row.draft_weights_bytes,
        target_weights_bytes=row.target_weights_bytes,
        pool_bytes=row.pool_bytes,
        pool_basis=row.pool_basis,
        max_model_len=row.max_model_len,
    )


def list_draft_memory(session: Session, *, latest_only: bool = False) -> list[Measurement]:
    """Measurements, newest first (with ``latest_only``, the newest per deployment)."""
    rows = session.execute(
        select(EngineMemory, Deployment.name)
        .join(Deployment, Deployment.id == EngineMemory.deployment_id)
        .order_by(EngineMemory.measured_at.desc(), EngineMemory.id.desc())
    ).all()
    found: list[Measurement] = []
    seen: set[str] = set()
    for row, name in rows:
        if latest_only and name in seen:
            continue
        seen.add(name)
        sources = row.figures.get("sources", {}) if isinstance(row.figures, dict) else {}
        found.append(Measurement(row.id, name, row.measured_at, _memory(row), sources))
    return found


class DraftMemorySource:
    """The waste report's source of ``draft_memory`` findings: admin views only (a
    deployment's GPU cost includes its idle time, which belongs to no team)."""

    name = "draft memory"
    kinds = frozenset({FindingKind.draft_memory})

    def find(self, inputs: FindingInputs, readers: LedgerReaders) -> list[Finding]:
        if inputs.team is not None:
            return []
        return draft_memory_findings(
            readers.session,
            gpu_cost={name: total for name, (_, total) in inputs.idle.items()},
            acceptance=inputs.acceptance[Scope.deployment],
            curves=breakeven_curves(readers.session),
            window_seconds=inputs.observed_seconds,
        )


def draft_memory_findings(
    session: Session,
    *,
    gpu_cost: Mapping[str, int],
    acceptance: Mapping[str, AcceptanceGroup],
    curves: Mapping[str, BreakevenCurve],
    window_seconds: float,
) -> list[Finding]:
    """``draft_memory`` findings for the deployments with a measurement and GPU cost in the
    window (see :mod:`app.engine_health.rules.engine_memory` for the rule).

    Args:
        session: The registry and the measurements.
        gpu_cost: Per deployment, its GPU cost in the window (request + idle entries).
        acceptance: Per deployment, its speculative requests in the window.
        curves: Per deployment, its fitted breakeven curve; used only when its sweep ran
            the measured drafter's method.
        window_seconds: The observed window, for the monthly estimate.
    """
    findings: list[Finding] = []
    configs: dict[str, Any] = dict(
        session.execute(select(Deployment.name, Deployment.engine_config)).all()
    )
    for measurement in list_draft_memory(session, latest_only=True):
        name, memory = measurement.deployment, measurement.memory
        cost = gpu_cost.get(name, 0)
        if cost <= 0 or not _drafter_configured(configs.get(name), memory):
            continue
        group = acceptance.get(name)
        curve = curves.get(name)
        points: tuple[tuple[float, float], ...] = ()
        if curve is not None and _sweep_ran(session, curve.sweep_id, memory.method):
            points = tuple(curve.speedups)
        evidence = SpeculationEvidence(
            requests=group.requests if group else 0,
            num_drafts=group.num_drafts if group else 0,
            draft_tokens=group.draft_tokens if group else 0,
            accepted_tokens=group.accepted_tokens if group else 0,
            k=group.k if group else None,
            tokens_per_request=_tokens_per_request(group),
            curve=points,
            sweep_id=curve.sweep_id if points and curve is not None else None,
        )
        finding = draft_memory_finding(
            DraftMemoryExposure(
                deployment=name,
                memory=memory,
                gpu_cost_micros=cost,
                evidence=evidence,
                measurement_id=measurement.id,
                metrics={
                    "measurement_id": measurement.id,
                    "measured_at": measurement.measured_at.isoformat(),
                },
            ),
            window_seconds=window_seconds,
        )
        if finding is not None:
            findings.append(finding)
    return findings


def _drafter_configured(config: Any, memory: DraftMemory) -> bool:
    """False when the registry's engine config runs no drafter (the measurement is stale);
    True when it does or when there is no config to tell."""
    if not isinstance(config, dict):
        return True
    speculation = config.get("speculation")
    method = speculation.get("method") if isinstance(speculation, dict) else None
    if method is None:
        return True
    return method != "none" and method not in MODEL_FREE_METHODS


def _sweep_ran(session: Session, sweep_id: int, method: str) -> bool:
    methods = set(
        session.scalars(
            select(SweepPointRecord.method).where(SweepPointRecord.sweep_id == sweep_id).distinct()
        )
    )
    return method in methods


def _tokens_per_request(group: AcceptanceGroup | None) -> float | None:
    """Prompt + completion tokens per request (the scheduled tokens less rejected drafts)."""
    if group is None or group.requests <= 0:
        return None
    rejected = group.draft_tokens - min(group.accepted_tokens, group.draft_tokens)
    tokens = group.scheduled_tokens - rejected
    return tokens / group.requests if tokens > 0 else None
