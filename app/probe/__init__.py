"""Continuous acceptance benchmarking: a fixed, versioned probe set sent through each
deployment on a schedule (``specledger probe run`` / ``probe schedule``), metered and charged
under the probe's own team, and a CUSUM on each deployment's probe acceptance against its
baseline (``specledger probe drift``; alerts from ``specledger alerts check``)."""

from app.probe.probe_set import ProbePrompt, ProbeSet, load_probe_set
from app.probe.schedule import ScheduleFormat, render_schedule
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
