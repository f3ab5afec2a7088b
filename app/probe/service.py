"""Acceptance probes: run a fixed probe set through a deployment's metering proxy and store
what it measured; judge each deployment's probe acceptance against its baseline.

The probe's requests go through the proxy with a proxy key of the probe team (default
``probe``), limited to the probed deployment: they are metered, allocated and charged like
any traffic, under that team, never hidden. A key of another team, or one the proxy could
route to other deployments, is refused.

Drift: :func:`app.probe.rules.drift.detect_probe_drop` (Page's CUSUM, downward) per series of runs
(one deployment, model, probe set and concurrency; the baseline is its first
:data:`~app.probe.rules.drift.BASELINE_RUNS` runs). A drift is dated at the first run of the
lower acceptance and costed as production acceptance drift is: the deployment's spend since
the change times the share of GPU work the lost acceptance added (verified tokens per
output token, measured by the probe before and after). It becomes an alert (kind
``acceptance_drift``, one per change) and a waste finding (kind ``acceptance_drift``).
"""

import asyncio
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx
from sqlalchemy import Connection, select
from sqlalchemy.orm import Session

from app.alerts import Alert, AlertKind, Severity
from app.anomalies.rules.acceptance_drift import AcceptanceBucket
from app.auth.service import hash_key, proxy_grants
from app.budgets.rules.budget import BudgetScope, ScopeKind
from app.budgets.spend import spend
from app.db import for_reading
from app.domain.errors import Invalid, Unavailable
from app.domain.findings import Finding, FindingKind, Scope, monthly
from app.domain.money import format_micros
from app.models import ProbeRun
from app.probe.client import ProgressHook, send_all, served_model
from app.probe.probe_set import ProbeSet, load_probe_set
from app.probe.rules.defaults import DEFAULT_TEAM as DEFAULT_TEAM
from app.probe.rules.defaults import DEFAULT_TIMEOUT_S as DEFAULT_TIMEOUT_S
from app.probe.rules.drift import (
    BASELINE_RUNS,
    acceptance_per_position,
    detect_probe_drop,
    extra_work_share,
    summarize,
)


class ProbeKeyRefused(Invalid):
    """The key given is not a live proxy key of the probe team for this deployment alone."""

    code = "probe_key_refused"


class ProbeUnavailable(Unavailable):
    """The proxy could not be asked (which model it serves)."""

    code = "probe_unavailable"


def run_probe(
    session: Session,
    *,
    deployment: str,
    proxy_url: str,
    api_key: str,
    model: str | None = None,
    probe_set: ProbeSet | None = None,
    concurrency: int = 1,
    now: datetime,
    team: str = DEFAULT_TEAM,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    progress: ProgressHook | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> ProbeRun:
    """Send every prompt of ``probe_set`` (default: the bundled v1) through the proxy at
    ``proxy_url`` with ``api_key``, ``concurrency`` at a time, and add the run to
    ``session`` (flushed; the caller commits).

    The key is checked in a read-only session of its own, and ``session`` is used only once
    the requests are done: give a session outside a transaction and none is open while the
    probe runs (on SQLite an open transaction would hold the write lock the proxy needs to
    record the probe's own requests).

    Args:
        deployment: The deployment probed; the key must be limited to it.
        model: The model to ask for; default: the first the proxy lists for the key.
        now: When the run starts (aware); ``finished_at`` adds the measured wall time.
        team: The team the key must bill (the probe's own).

    Raises:
        ProbeKeyRefused: If the key is not a live proxy key of ``team`` limited to
            ``deployment``.
        ProbeUnavailable: If no model is given and the proxy lists none for the key.
    """
    if now.tzinfo is None:
        raise Invalid(f"now {now!r} is naive; give an aware time")
    if concurrency < 1:
        raise Invalid(f"concurrency must be at least 1, got {concurrency}")
    probe_set = probe_set or load_probe_set()
    bind = session.get_bind()
    engine = bind.engine if isinstance(bind, Connection) else bind
    with Session(for_reading(engine)) as reader:  # no transaction is held while probing
        _check_key(reader, api_key, team=team, deployment=deployment)
    clock = time.perf_counter()
    if model is None:
        model = _served_model(proxy_url, api_key, timeout_s=timeout_s, transport=transport)
    started_at = now.astimezone(UTC)
    session_id = f"probe-{deployment}-{started_at:%Y%m%dT%H%M%S%fZ}"[:128]
    sent, wall_s = asyncio.run(
        send_all(
            probe_set.prompts,
            base_url=proxy_url,
            api_key=api_key,
            model=model,
            session_id=session_id,
            tags=f"probe_set={probe_set.version}",
            concurrency=concurrency,
            timeout_s=timeout_s,
            progress=progress,
            transport=transport,
        )
    )
    summary = summarize([s.response for s in sent], wall_seconds=wall_s)
    error = next((f"{s.prompt_id}: {s.error}" for s in sent if s.error), None)
    run = ProbeRun(
        deployment=deployment,
        model=model,
        proxy_url=proxy_url,
        team=team,
        session_id=session_id,
        probe_set_version=probe_set.version,
        probe_set_sha256=probe_set.sha256,
        concurrency=concurrency,
        started_at=started_at,
        finished_at=started_at + timedelta(seconds=time.perf_counter() - clock),
        requests=summary.requests,
        ok=summary.ok,
        output_tokens=summary.output_tokens,
        num_drafts=summary.num_drafts,
        draft_tokens=summary.draft_tokens,
        accepted_tokens=summary.accepted_tokens,
        acceptance_rate=summary.acceptance_rate,
        acceptance_histogram=summary.histogram,
        acceptance_per_position=summary.acceptance_per_position,
        tokens_per_s=summary.tokens_per_s,
        tpot_p50_ms=summary.tpot_p50_ms,
        tpot_p90_ms=summary.tpot_p90_ms,
        ttft_p50_ms=summary.ttft_p50_ms,
        error=None if error is None else error[:512],
    )
    session.add(run)
    session.flush()
    return run


def _check_key(session: Session, api_key: str, *, team: str, deployment: str) -> None:
    create = (
        f"create one with `specledger keys create --proxy --team {team} --deployments {deployment}`"
    )
    grant = proxy_grants(session).get(hash_key(api_key.strip()))
    if grant is None:
        raise ProbeKeyRefused(f"the probe key is not a live proxy key in this database; {create}")
    if grant.team != team:
        raise ProbeKeyRefused(
            f"the probe key bills team {grant.team!r}, not the probe team {team!r}: probe "
            f"traffic is charged to its own team; {create}"
        )
    if grant.deployments != frozenset({deployment}):
        allowed = "every deployment" if grant.deployments is None else sorted(grant.deployments)
        raise ProbeKeyRefused(
            f"the probe key may use {allowed}; it must be limited to {deployment!r} alone, "
            f"or the proxy may route the probe to another deployment; {create}"
        )


def _served_model(
    proxy_url: str, api_key: str, *, timeout_s: float, transport: httpx.AsyncBaseTransport | None
) -> str:
    try:
        model = asyncio.run(
            served_model(proxy_url, api_key, timeout_s=timeout_s, transport=transport)
        )
    except (httpx.HTTPError, ValueError) as exc:
        raise ProbeUnavailable(f"cannot list the models at {proxy_url}: {exc}") from None
    if model is None:
        raise ProbeUnavailable(f"the proxy at {proxy_url} lists no model for this key")
    return model


def list_runs(
    session: Session, *, deployment: str | None = None, limit: int = 50
) -> list[ProbeRun]:
    """Probe runs, newest first."""
    query = select(ProbeRun).order_by(ProbeRun.started_at.desc(), ProbeRun.id.desc())
    if deployment is not None:
        query = query.where(ProbeRun.deployment == deployment)
    return list(session.scalars(query.limit(limit)))


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeDrift:
    deployment: str
    model: str
    probe_set_version: str
    concurrency: int
    change_run_id: int
    """The first run of the lower acceptance (names the change)."""
    change_at: datetime
    alarm_at: datetime
    """The start of the run at whose end the CUSUM crossed its threshold."""
    baseline_rate: float
    recent_rate: float
    """Accepted over drafted tokens from the change to the newest run."""
    baseline_positions: list[float]
    recent_positions: list[float]
    runs_since_change: int
    statistic: float
    cost_micros: int
    """The deployment's spend since the change times the share of GPU work the lost
    acceptance added."""
    currency: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeSeries:
    """One series of comparable runs and where its drift test stands."""

    deployment: str
    model: str
    probe_set_version: str
    probe_set_sha256: str
    concurrency: int
    runs: int
    baseline_runs: int
    """Runs in the baseline so far (at most :data:`~app.probe.rules.drift.BASELINE_RUNS`)."""
    baseline_rate: float | None
    """Token-weighted acceptance of the baseline runs so far."""
    latest_rate: float | None
    latest_at: datetime
    drift: ProbeDrift | None


def probe_drift(
    session: Session,
    deployment: str | None = None,
    *,
    now: datetime,
    currency: str,
    baseline: int = BASELINE_RUNS,
) -> list[ProbeSeries]:
    """Every series of probe runs (of ``deployment``, or all), with its drift if the CUSUM
    alarmed; runs that started after ``now`` are not seen."""
    query = (
        select(ProbeRun)
        .where(ProbeRun.started_at <= now)
        .order_by(ProbeRun.started_at, ProbeRun.id)
    )
    if deployment is not None:
        query = query.where(ProbeRun.deployment == deployment)
    groups: dict[tuple[str, str, str, int], list[ProbeRun]] = defaultdict(list)
    for run in session.scalars(query):
        key = (run.deployment, run.model, run.probe_set_sha256, run.concurrency)
        groups[key].append(run)
    return [
        _series(session, runs, now=now, currency=currency, baseline=baseline)
        for _, runs in sorted(groups.items())
    ]


def probe_drifts(session: Session, *, now: datetime, currency: str) -> list[ProbeDrift]:
    """The drifts of every deployment's probe series."""
    found = probe_drift(session, now=now, currency=currency)
    return [series.drift for series in found if series.drift is not None]


def _rate(runs: Sequence[ProbeRun]) -> float | None:
    drafted = sum(r.draft_tokens for r in runs)
    return sum(r.accepted_tokens for r in runs) / drafted if drafted else None


def _positions(runs: Sequence[ProbeRun]) -> list[float]:
    return acceptance_per_position([run.acceptance_histogram or [] for run in runs])[1]


def _work(runs: Sequence[ProbeRun]) -> tuple[int, int, int]:
    return (
        sum(r.accepted_tokens for r in runs),
        sum(r.draft_tokens for r in runs),
        sum(r.output_tokens for r in runs),
    )


def _series(
    session: Session, runs: list[ProbeRun], *, now: datetime, currency: str, baseline: int
) -> ProbeSeries:
    first, last = runs[0], runs[-1]
    base = runs[:baseline]
    buckets = [AcceptanceBucket(accepted=r.accepted_tokens, drafted=r.draft_tokens) for r in runs]
    alarm = detect_probe_drop(buckets, baseline=baseline)
    drift = None
    if alarm is not None:
        since = runs[alarm.change_index :]
        change = since[0]
        spent = spend(
            session,
            BudgetScope(ScopeKind.deployment, first.deployment),
            change.started_at,
            now,
            currency=currency,
        ).total_micros
        share = extra_work_share(before=_work(base), after=_work(since))
        drift = ProbeDrift(
            deployment=first.deployment,
            model=first.model,
            probe_set_version=first.probe_set_version,
            concurrency=first.concurrency,
            change_run_id=change.id,
            change_at=change.started_at,
            alarm_at=runs[alarm.alarm_index].started_at,
            baseline_rate=alarm.baseline_rate,
            recent_rate=alarm.recent_rate,
            baseline_positions=_positions(base),
            recent_positions=_positions(since),
            runs_since_change=len(since),
            statistic=alarm.statistic,
            cost_micros=round(spent * share),
            currency=currency,
        )
    return ProbeSeries(
        deployment=first.deployment,
        model=first.model,
        probe_set_version=first.probe_set_version,
        probe_set_sha256=first.probe_set_sha256,
        concurrency=first.concurrency,
        runs=len(runs),
        baseline_runs=len(base),
        baseline_rate=_rate(base),
        latest_rate=_rate([last]),
        latest_at=last.started_at,
        drift=drift,
    )


def _positions_text(before: list[float], after: list[float]) -> str:
    pairs = zip(before, after, strict=False)  # k may differ after a change
    return "; ".join(f"{p}: {b:.0%} -> {a:.0%}" for p, (b, a) in enumerate(pairs, 1))


def drift_alert(drift: ProbeDrift, *, now: datetime) -> Alert:
    """One alert per deployment and change (named by the change's first run)."""
    positions = _positions_text(drift.baseline_positions, drift.recent_positions)
    return Alert(
        kind=AlertKind.acceptance_drift,
        dedup_key=f"probe-drift:{drift.deployment}:{drift.change_run_id}",
        title=(
            f"Probe acceptance of {drift.deployment} fell from {drift.baseline_rate:.0%} to "
            f"{drift.recent_rate:.0%}"
        )[:200],
        text=(
            f"The {drift.probe_set_version} probe set ({drift.model}, concurrency "
            f"{drift.concurrency}) accepts less since the run of "
            f"{drift.change_at:%Y-%m-%d %H:%M}Z (CUSUM alarm at the run of "
            f"{drift.alarm_at:%Y-%m-%d %H:%M}Z, {drift.runs_since_change} runs since). "
            + (f"Acceptance per position: {positions}. " if positions else "")
            + f"The extra verification work has cost about {format_micros(drift.cost_micros)} "
            f"{drift.currency} since. Check the drafter and the engine's configuration (a "
            "changed draft model, k or vLLM version), lower k, or switch speculation off."
        )[:4000],
        severity=Severity.warning,
        occurred_at=now,
        details={
            "deployment": drift.deployment,
            "source": "probe",
            "probe_set": drift.probe_set_version,
            "change_at": drift.change_at.isoformat(),
            "alarm_at": drift.alarm_at.isoformat(),
            "baseline_rate": round(drift.baseline_rate, 4),
            "recent_rate": round(drift.recent_rate, 4),
            "cost": format_micros(drift.cost_micros),
            "currency": drift.currency,
        },
    )


def drift_finding(drift: ProbeDrift, *, now: datetime) -> Finding:
    """The drift as a waste finding of its deployment: the cost since the change, and that
    rate over a month (the change's age, at least an hour, as the window)."""
    window_s = max((now - drift.change_at).total_seconds(), 3600.0)
    return Finding(
        kind=FindingKind.acceptance_drift,
        scope=Scope.deployment,
        key=drift.deployment,
        window_cost_micros=drift.cost_micros,
        monthly_cost_micros=monthly(drift.cost_micros, window_s),
        action=(
            "Find what changed at the change point (draft model, k, vLLM version, prompt "
            "template); lower k or switch speculation off until acceptance is back."
        ),
        detail=(
            f"Probe acceptance ({drift.probe_set_version} set) fell from "
            f"{drift.baseline_rate:.1%} to {drift.recent_rate:.1%} since "
            f"{drift.change_at:%Y-%m-%d %H:%M}Z (CUSUM)."
        ),
        metrics={
            "baseline_rate": round(drift.baseline_rate, 4),
            "recent_rate": round(drift.recent_rate, 4),
            "change_at": drift.change_at.isoformat(),
            "alarm_at": drift.alarm_at.isoformat(),
            "probe_set": drift.probe_set_version,
            "runs_since_change": drift.runs_since_change,
        },
    )
