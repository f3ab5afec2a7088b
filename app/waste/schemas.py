"""Wire schemas of waste findings."""

from app.domain.findings import FindingKind, Scope, Thresholds, monthly_total
from app.domain.windows import TimeWindow
from app.kit.schemas import Amount, Schema, WindowRead, money
from app.waste.service import WasteReport


class FindingRead(Schema):
    kind: FindingKind
    scope: Scope
    key: str
    """The deployment, team or session the finding is about."""
    window_cost: Amount
    """What the waste cost in the window."""
    estimated_monthly_cost: Amount
    """The window's rate over an average month."""
    action: str
    """The recommended action."""
    detail: str
    metrics: dict[str, float | int | str | None]


class WasteRead(Schema):
    window: WindowRead
    observed_seconds: float
    """The part of the window that has passed, the basis of the monthly estimates."""
    currency: str
    acceptance_threshold: float
    confidence: float
    idle_share_threshold: float
    estimated_monthly_total: Amount
    """Sum of the deployment-level findings (team and session findings break the same
    waste down, so they are not added again)."""
    findings: list[FindingRead]


def waste_read(report: WasteReport, window: TimeWindow, thresholds: Thresholds) -> WasteRead:
    """The one wire form of a waste report: GET /v1/waste and `specledger waste --json`."""
    return WasteRead(
        window=WindowRead.of(window),
        observed_seconds=report.observed_seconds,
        currency=report.currency,
        acceptance_threshold=thresholds.acceptance,
        confidence=thresholds.confidence,
        idle_share_threshold=thresholds.idle_share,
        estimated_monthly_total=money(monthly_total(report.findings)),
        findings=[
            FindingRead(
                kind=f.kind,
                scope=f.scope,
                key=f.key,
                window_cost=money(f.window_cost_micros),
                estimated_monthly_cost=money(f.monthly_cost_micros),
                action=f.action,
                detail=f.detail,
                metrics=dict(f.metrics),
            )
            for f in report.findings
        ],
    )
