"""Wire schemas of waste findings."""

from app.domain.waste import FindingKind, Scope
from app.kit.schemas import Amount, Schema, WindowRead


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
