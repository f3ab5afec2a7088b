"""Probe drift from stored runs (SQLite and PostgreSQL): a deployment whose probe acceptance
fell ten points is found, dated at the change, costed from its spend, turned into a waste
finding and alerted once; a steady one, or one still collecting its baseline, is not."""

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from app.alerts import AlertKind, add_webhook
from app.domain.findings import FindingKind, Scope
from app.models import AlertDelivery, ProbeRun
from app.probe import drift_alert, drift_finding, probe_drift, probe_drifts
from app.probe.rules.drift import BASELINE_RUNS
from app.settings import Settings
from app.watch import check_everything
from ingest.service import IngestOptions, ingest_billing
from tests.budgets.helpers import allocate, register
from tests.factories import insert_usage, usage_record
from tests.ingest.helpers import focus_row, write_focus_csv

OCTOBER = datetime(2026, 10, 1, tzinfo=UTC)
FIRST = datetime(2026, 10, 28, tzinfo=UTC)
"""The first probe run; the deployment has run (and been billed) since October 1."""
CHANGE_RUN = 48
"""The first run (hourly from FIRST) of the lower acceptance."""
DRAFTED, OUTPUT = 1500, 1000


def _run(deployment: str, hour: int, rate: float, **extra: object) -> ProbeRun:
    accepted = round(rate * DRAFTED)
    fields: dict[str, object] = {
        "deployment": deployment,
        "model": "smol",
        "proxy_url": "http://proxy:8080",
        "team": "probe",
        "session_id": f"probe-{deployment}-{hour}",
        "probe_set_version": "v1",
        "probe_set_sha256": "a" * 64,
        "concurrency": 1,
        "started_at": FIRST + timedelta(hours=hour),
        "finished_at": FIRST + timedelta(hours=hour, seconds=30),
        "requests": 16,
        "ok": 16,
        "output_tokens": OUTPUT,
        "num_drafts": DRAFTED // 4,
        "draft_tokens": DRAFTED,
        "accepted_tokens": accepted,
        "acceptance_rate": accepted / DRAFTED,
        # 375 steps of k = 4, shaped so that they accept ``accepted`` tokens.
        "acceptance_histogram": _histogram(accepted),
        "acceptance_per_position": [],
        "tokens_per_s": 50.0,
        "tpot_p50_ms": 20.0,
        "tpot_p90_ms": 25.0,
        "ttft_p50_ms": 90.0,
    }
    fields.update(extra)
    return ProbeRun(**fields)


def _histogram(accepted: int) -> list[int]:
    steps = DRAFTED // 4
    full, rest = divmod(accepted, 4)
    histogram = [0] * 5
    histogram[4] = full
    histogram[rest] += 1 if rest else 0
    histogram[0] = steps - sum(histogram)
    return histogram


def _series(deployment: str, *, runs: int, fall: float, seed: int) -> list[ProbeRun]:
    rng = random.Random(seed)
    return [
        _run(deployment, hour, rng.gauss(0.62, 0.01) - (fall if hour >= CHANGE_RUN else 0.0))
        for hour in range(runs)
    ]


def _bill_and_use(session: Session, tmp_path: Path) -> None:
    """d1 costs 96.00 a day in October, its GPU time all used by production requests (a
    month of history: the cost anomaly detector sees nothing new)."""
    register(session)
    days = [OCTOBER + timedelta(days=d) for d in range(31)]
    rows = [
        focus_row(cost="96.00", ChargePeriodStart=f"{day:%Y-%m-%dT%H:%M:%SZ}",
                  ChargePeriodEnd=f"{day + timedelta(days=1):%Y-%m-%dT%H:%M:%SZ}")
        for day in days
    ]  # fmt: skip
    ingest_billing(session.connection(), str(write_focus_csv(tmp_path / "b.csv", rows)),
                   IngestOptions(source="bill"))  # fmt: skip
    insert_usage(
        session.connection(),
        [
            usage_record(arrived=OCTOBER + timedelta(hours=h, minutes=5), seconds=60,
                         gpu_ns=3600 * 10**9)
            for h in range(31 * 24)
        ],
    )  # fmt: skip
    allocate(session)


def test_a_fall_in_probe_acceptance_is_found_dated_costed_and_alerted_once(session, tmp_path: Path):
    _bill_and_use(session, tmp_path)
    session.add_all(_series("d1", runs=72, fall=0.10, seed=3))
    session.add_all(_series("steady", runs=72, fall=0.0, seed=4))
    session.add_all(_series("young", runs=BASELINE_RUNS - 1, fall=0.0, seed=5))
    session.flush()
    now = FIRST + timedelta(hours=72)

    found = {s.deployment: s for s in probe_drift(session, now=now, currency="USD")}
    assert set(found) == {"d1", "steady", "young"}
    assert found["steady"].drift is None
    assert found["steady"].baseline_runs == BASELINE_RUNS
    assert (found["young"].baseline_runs, found["young"].drift) == (BASELINE_RUNS - 1, None)
    drift = found["d1"].drift
    assert drift is not None
    assert drift.change_at == FIRST + timedelta(hours=CHANGE_RUN)  # dated at the change
    assert drift.alarm_at <= FIRST + timedelta(hours=CHANGE_RUN + 3)
    assert drift.baseline_rate == pytest.approx(0.62, abs=0.01)
    assert drift.recent_rate == pytest.approx(0.52, abs=0.01)
    assert drift.runs_since_change == 72 - CHANGE_RUN
    assert drift.baseline_positions[0] > drift.recent_positions[0]
    # The last day, 96.00, since the change; verified tokens per output token
    # 1 + 570/1000 = 1.57 -> 1 + 720/1000 = 1.72: 8.7% of the work is extra, about 8.37.
    assert 7_500_000 < drift.cost_micros < 9_500_000
    assert drift.currency == "USD"
    assert [d.deployment for d in probe_drifts(session, now=now, currency="USD")] == ["d1"]
    assert probe_drift(session, "steady", now=now, currency="USD")[0].drift is None

    finding = drift_finding(drift, now=now)
    assert (finding.kind, finding.scope, finding.key) == (
        FindingKind.acceptance_drift, Scope.deployment, "d1",
    )  # fmt: skip
    assert finding.window_cost_micros == drift.cost_micros
    assert finding.monthly_cost_micros > finding.window_cost_micros
    alert = drift_alert(drift, now=now)
    assert alert.kind is AlertKind.acceptance_drift
    assert alert.title == "Probe acceptance of d1 fell from 62% to 52%"
    assert "Acceptance per position: 1:" in alert.text

    add_webhook(session, name="ops", url="http://127.0.0.1:9/hook", now=now)
    first = check_everything(session, now=now, settings=Settings())
    later = now + timedelta(hours=1)
    session.add(_run("d1", 72, 0.52))  # one more low run: the same change, no new alert
    session.flush()
    again = check_everything(session, now=later, settings=Settings())
    assert (first.drift_alerts, again.drift_alerts) == (1, 0)
    keys = [d.dedup_key for d in session.query(AlertDelivery).all()]
    assert keys.count(f"probe-drift:d1:{drift.change_run_id}") == 1


def test_runs_of_another_probe_set_or_concurrency_start_their_own_baseline(session):
    runs = _series("d1", runs=30, fall=0.0, seed=6)
    # After 30 steady runs of v1, a new probe set (v2) answers far lower: not a drift of v1.
    runs += [
        _run("d1", 30 + i, 0.30, probe_set_version="v2", probe_set_sha256="b" * 64)
        for i in range(30)
    ]
    runs += [_run("d1", 60 + i, 0.45, concurrency=8) for i in range(10)]
    session.add_all(runs)
    session.flush()
    series = probe_drift(session, now=FIRST + timedelta(days=5), currency="USD")
    assert [(s.probe_set_version, s.concurrency, s.runs, s.drift) for s in series] == [
        ("v1", 1, 30, None),
        ("v1", 8, 10, None),
        ("v2", 1, 30, None),
    ]
