"""One pass over everything that alerts: budget thresholds and forecasts, cost anomalies
(last day and last hour), waste findings of the month so far, and acceptance drift (of
production traffic, and of the acceptance probes). Each event alerts once
(the alerts channel deduplicates), so the pass can run as often as a scheduler likes."""

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from app.alerts import Alert, AlertKind, Severity, enqueue
from app.anomalies import service as anomalies
from app.anomalies.acceptance import acceptance_drifts, drift_alert
from app.budgets import service as budgets
from app.domain.findings import Finding, Thresholds
from app.domain.money import format_micros
from app.domain.periods import Month
from app.domain.windows import TimeWindow
from app.probe import drift_alert as probe_drift_alert
from app.probe import probe_drifts
from app.settings import Settings
from app.waste.service import find_waste


@dataclass(frozen=True, slots=True)
class WatchSummary:
    budget_alerts: int
    anomaly_alerts: int
    waste_alerts: int
    drift_alerts: int

    @property
    def total(self) -> int:
        return self.budget_alerts + self.anomaly_alerts + self.waste_alerts + self.drift_alerts


def check_everything(session: Session, *, now: datetime, settings: Settings) -> WatchSummary:
    """Queue the alerts every current event calls for; returns the new deliveries."""
    budget_alerts = budgets.raise_alerts(session, now=now)
    anomaly_alerts = anomalies.raise_alerts(session, now=now, currency=settings.default_currency)
    month = Month.of(now)
    report = find_waste(
        session,
        window=TimeWindow(month.start, month.end),
        team=None,
        thresholds=Thresholds(),
        now=now,
        default_currency=settings.default_currency,
        s3_endpoint_url=settings.s3_endpoint_url,
    )
    waste_alerts = sum(
        enqueue(session, waste_alert(finding, str(month), report.currency, now=now), now)
        for finding in report.findings
    )
    drift_alerts = sum(
        enqueue(session, drift_alert(drift, now=now), now)
        for drift in acceptance_drifts(session, now=now, currency=settings.default_currency)
    )
    drift_alerts += sum(
        enqueue(session, probe_drift_alert(drift, now=now), now)
        for drift in probe_drifts(session, now=now, currency=settings.default_currency)
    )
    return WatchSummary(budget_alerts, anomaly_alerts, waste_alerts, drift_alerts)


def waste_alert(finding: Finding, month: str, currency: str, *, now: datetime) -> Alert:
    """One alert per finding and month."""
    return Alert(
        kind=AlertKind.waste_finding,
        dedup_key=f"waste:{month}:{finding.kind}:{finding.scope}:{finding.key}"[:200],
        title=(
            f"Waste: {finding.kind} for {finding.scope} {finding.key}, about "
            f"{format_micros(finding.monthly_cost_micros)} {currency} a month"
        ),
        text=f"{finding.detail} Action: {finding.action}",
        severity=Severity.warning,
        occurred_at=now,
        details={
            "kind": str(finding.kind),
            "scope": str(finding.scope),
            "key": finding.key,
            "month": month,
            "currency": currency,
            "window_cost": format_micros(finding.window_cost_micros),
            "monthly_cost": format_micros(finding.monthly_cost_micros),
        },
    )
