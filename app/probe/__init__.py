"""Continuous acceptance benchmarking: a fixed, versioned probe set sent through each
deployment on a schedule (``specledger probe run`` / ``probe schedule``), metered and charged
under the probe's own team, and a CUSUM on each deployment's probe acceptance against its
baseline (``specledger probe drift``; alerts from ``specledger alerts check``)."""

from typing import TYPE_CHECKING, Any

from app.probe.probe_set import ProbePrompt, ProbeSet, load_probe_set
from app.probe.schedule import ScheduleFormat, render_schedule

if TYPE_CHECKING:
    from app.probe.service import (
        DEFAULT_TEAM,
        ProbeDrift,
        ProbeKeyRefused,
        ProbeSeries,
        ProbeUnavailable,
        drift_alert,
        drift_finding,
        list_runs,
        probe_drift,
        probe_drifts,
        run_probe,
    )

_FROM_SERVICE = frozenset(
    {"DEFAULT_TEAM", "ProbeDrift", "ProbeKeyRefused", "ProbeSeries", "ProbeUnavailable",
     "drift_alert", "drift_finding", "list_runs", "probe_drift", "probe_drifts", "run_probe"}
)  # fmt: skip


def __getattr__(name: str) -> Any:
    """The service's names, imported on first use: the probe set and the schedule are light
    and the command line imports them at start-up; the service needs SQLAlchemy and httpx."""
    if name in _FROM_SERVICE:
        from app.probe import service

        return getattr(service, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_TEAM",
    "ProbeDrift",
    "ProbeKeyRefused",
    "ProbePrompt",
    "ProbeSeries",
    "ProbeSet",
    "ProbeUnavailable",
    "ScheduleFormat",
    "drift_alert",
    "drift_finding",
    "list_runs",
    "load_probe_set",
    "probe_drift",
    "probe_drifts",
    "render_schedule",
    "run_probe",
]
