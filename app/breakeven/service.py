"""Breakeven use cases: fit a sweep file, store measured sweeps, list and read sweeps and
their fits, read a fitted schedule, and the breakeven of each deployment (for waste).

Orchestration only: the sweep file is read by :mod:`app.breakeven.sweep_file`, the maths is
in :mod:`app.breakeven.rules.report`, queries in :mod:`app.breakeven.repository`. Functions
take a session and never commit (the CLI's unit of work and the API's session do). A stored
fit is read back through :class:`app.breakeven.schemas.StoredFit`. A sweep's fit is the
stored one unless a refit is asked for; a refit is computed on the sweep's fixed-k rows and
not stored (reads never write).

Errors (all :class:`app.domain.errors.SpecLedgerError`, rendered by the two edges):

* Invalid [422 invalid_input]
  - SweepFileError (app.breakeven.sweep_file)   a sweep CSV that cannot be read
    - UnfittableSweep                           rows that cannot be fitted (too few levels...)
  - BreakevenError                              a fit source or engine that cannot be used
* NotFound [404 not_found]
  - SweepNotFound                               no such sweep, or no fitted sweep yet
"""

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from app.breakeven import repository
from app.breakeven.render import measured_crossing
from app.breakeven.rules.curve import BreakevenCurve
from app.breakeven.rules.model import ScheduleBand, raise_bands
from app.breakeven.rules.report import BreakevenFit, breakeven_fit_as_dict, fit_breakeven
from app.breakeven.rules.schedule_check import (
    ScheduleCheck,
    check_schedules,
    schedule_check_as_dict,
)
from app.breakeven.rules.sweep import InvalidSweep, SweepPoint
from app.breakeven.schemas import StoredFit
from app.breakeven.sweep_file import SweepFileError, SweepRow, read_sweep_file
from app.deployments.service import get_deployment
from app.domain.errors import Invalid, InvalidInput, NotFound
from app.models import Sweep, SweepPointRecord


class BreakevenError(Invalid):
    """A breakeven request that cannot be carried out; the message says what to do."""


class UnfittableSweep(SweepFileError):
    """The sweep's rows cannot be fitted (too few levels, no baseline...); names the source."""


class SweepNotFound(NotFound):
    """No sweep with that id, or no fitted sweep at all."""


@dataclass(frozen=True, slots=True)
class SweepSummary:
    sweep: Sweep
    points: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FitOutcome:
    """A fit and where it was stored."""

    sweep_id: int | None
    fit: BreakevenFit
    body: dict[str, Any]
    """JSON form (``breakeven fit --json``)."""
    scheduled_rows: tuple[SweepRow, ...]
    """Rows measured with a dynamic schedule: compared, not fitted."""
    schedule_checks: tuple[ScheduleCheck, ...] = ()
    """Each scheduled config against never and always speculating."""


def fit_rows(
    rows: Sequence[SweepRow], *, source: str, bootstrap_samples: int, seed: int
) -> tuple[BreakevenFit, dict[str, Any]]:
    """Fit sweep rows; the domain's rejection is re-raised naming ``source`` (and the column).

    Raises:
        UnfittableSweep: On degenerate data (the domain's message, prefixed with the source).
    """
    try:
        fit = fit_breakeven(
            [row.point for row in rows], bootstrap_samples=bootstrap_samples, seed=seed
        )
    except InvalidSweep as exc:
        column = "concurrency" if "concurrency" in exc.problem else None
        raise UnfittableSweep(source, str(exc), column=column) from None
    except InvalidInput as exc:
        raise UnfittableSweep(source, str(exc)) from None
    body = breakeven_fit_as_dict(fit)
    crossings = {c.config: measured_crossing(c.comparisons) for c in fit.configs}
    body["measured_crossing"] = crossings[fit.primary_config]
    for config in body["configs"]:  # type: ignore[attr-defined]
        config["measured_crossing"] = crossings[config["config"]]
    return fit, body


def fit_sweep_file(
    session: Session | None,
    *,
    path: Path,
    bootstrap_samples: int = 200,
    seed: int = 0,
    deployment: str | None = None,
) -> FitOutcome:
    """Read, check and fit a sweep CSV; store the sweep, its points and its fit.

    Fitting the same file again (same SHA-256), or the CSV that ``breakeven sweep`` wrote and
    stored, updates the stored fit instead of adding a second copy of the sweep.

    Args:
        session: Where to store the result; None fits without storing.
        path: The sweep CSV.
        bootstrap_samples: Bootstrap replicates for the breakeven interval.
        seed: Seed of the bootstrap.
        deployment: The registered deployment the sweep measured; its waste findings,
            autoscaling advice and ``breakeven apply`` then use this sweep.

    Returns:
        The fit, its JSON form and the stored sweep's id.

    Raises:
        SweepFileError: On an unreadable file or degenerate data; names file, row and column.
        UnknownDeployment: No deployment has that name.
    """
    if deployment is not None:
        if session is None:
            raise BreakevenError("a sweep tied to a deployment must be stored (drop --no-store)")
        get_deployment(session, deployment)
    sweep_file = read_sweep_file(path)
    fit, body = fit_rows(
        sweep_file.rows, source=str(path), bootstrap_samples=bootstrap_samples, seed=seed
    )
    checks = compare_schedules(fit, sweep_file.rows, sweep_file.scheduled)
    body["schedule_checks"] = [schedule_check_as_dict(check) for check in checks]
    sweep_id = None
    if session is not None:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        settings = {
            "source": str(path),
            "sha256": digest,
            "bootstrap_samples": bootstrap_samples,
            "seed": seed,
        }
        existing = repository.find_sweep_by_digest(session, digest)
        if existing is not None:
            existing.settings = {**(existing.settings or {}), **settings}
            if deployment is not None:
                existing.deployment = deployment
            repository.set_fit(session, existing, body)
            sweep_id = existing.id
        else:
            sweep = repository.add_sweep(
                session,
                name=path.name,
                rows=[*sweep_file.rows, *sweep_file.scheduled],
                settings=settings,
                fit=body,
                deployment=deployment,
            )
            sweep_id = sweep.id
        body = {"sweep_id": sweep_id, **body}
    return FitOutcome(
        sweep_id=sweep_id,
        fit=fit,
        body=body,
        scheduled_rows=sweep_file.scheduled,
        schedule_checks=checks,
    )


def compare_schedules(
    fit: BreakevenFit, fitted: Sequence[SweepRow], scheduled: Sequence[SweepRow]
) -> tuple[ScheduleCheck, ...]:
    """Scheduled rows against the fit's baseline (never) and primary config (always)."""

    def points(config: str) -> list[SweepPoint]:
        return [row.point for row in fitted if row.point.config == config]

    return check_schedules(
        [row.point for row in scheduled],
        never=points(fit.baseline_config),
        always=points(fit.primary_config),
    )


def store_measured_sweep(
    session: Session,
    *,
    name: str,
    rows: Sequence[SweepRow],
    settings: dict[str, Any],
    deployment: str | None = None,
    bootstrap_samples: int = 200,
    seed: int = 0,
) -> tuple[int, FitOutcome | None, str | None]:
    """Store a sweep measured by ``breakeven sweep`` and fit it when the data allow.

    Returns:
        ``(sweep id, fit or None, why there is no fit or None)``.
    """
    fittable = [row for row in rows if not row.schedule]
    sweep = repository.add_sweep(
        session, name=name, rows=rows, settings=settings, deployment=deployment
    )
    try:
        fit, body = fit_rows(fittable, source=name, bootstrap_samples=bootstrap_samples, seed=seed)
    except UnfittableSweep as exc:  # stored without a fit; the caller says why
        return sweep.id, None, str(exc)
    scheduled = tuple(r for r in rows if r.schedule)
    checks = compare_schedules(fit, fittable, scheduled)
    body = {
        "sweep_id": sweep.id,
        **body,
        "schedule_checks": [schedule_check_as_dict(check) for check in checks],
    }
    repository.set_fit(session, sweep, body)
    outcome = FitOutcome(
        sweep_id=sweep.id, fit=fit, body=body, scheduled_rows=scheduled, schedule_checks=checks
    )
    return sweep.id, outcome, None


@dataclass(frozen=True, slots=True, kw_only=True)
class FittedSchedule:
    """The speculation schedule of a stored or saved fit, for its primary config."""

    bands: tuple[ScheduleBand, ...]
    method: str
    """The speculation method the fit measured, e.g. ``ngram``."""
    k: int
    """The ``k`` the fit measured."""
    source: str
    """Where the fit came from, for messages: a sweep or a file."""


def read_stored_fit(body: object, source: str) -> StoredFit:
    """A stored or saved fit body, typed.

    Raises:
        BreakevenError: If the body is not a fit as ``breakeven fit --json`` prints it.
    """
    try:
        return StoredFit.model_validate(body)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or 'body'}: {error['msg']}"
            for error in exc.errors()
        )
        raise BreakevenError(
            f"{source}: not a breakeven fit as `breakeven fit --json` prints it ({problems})"
        ) from None


def _fit_body(
    session: Session, *, sweep_id: int | None, fit_path: Path | None, deployment: str | None
) -> tuple[StoredFit, str]:
    if sweep_id is not None and fit_path is not None:
        raise BreakevenError("give --sweep or --fit, not both")
    if fit_path is not None:
        try:
            body = json.loads(fit_path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise BreakevenError(f"{fit_path}: not a readable fit JSON file: {exc}") from None
        return read_stored_fit(body, str(fit_path)), str(fit_path)
    sweep = (
        repository.get_sweep(session, sweep_id)
        if sweep_id is not None
        else repository.latest_fitted_sweep(session, deployment)
    )
    if sweep is None:
        owner = f" for deployment {deployment!r} (nor one of no deployment)" if deployment else ""
        raise SweepNotFound(
            f"no sweep {sweep_id}"
            if sweep_id is not None
            else f"no fitted sweep yet{owner}; run `specledger breakeven fit sweep.csv"
            + (f" --deployment {deployment}`" if deployment else "`")
        )
    if sweep.fit is None:
        raise BreakevenError(
            f"sweep {sweep.id} has no fit; run `specledger breakeven fit` on its CSV"
        )
    source = f"sweep {sweep.id} ({sweep.name})"
    return read_stored_fit(sweep.fit, source), source


def fitted_schedule(
    session: Session,
    *,
    sweep_id: int | None = None,
    fit_path: Path | None = None,
    min_k: int = 0,
    deployment: str | None = None,
) -> FittedSchedule:
    """The schedule of a fit: stored with a sweep, the newest fitted sweep, or a
    ``breakeven fit --json`` file.

    Args:
        session: Database session (stored fits).
        sweep_id: Take the fit stored with this sweep.
        fit_path: Take the fit from a ``breakeven fit --json`` file instead.
        deployment: Without a sweep or file: the deployment's newest fitted sweep, else the
            newest fitted sweep of no deployment.
        min_k: Raise bands below this k to it (adjacent equal bands merge), unless the
            schedule never speculates. 1 keeps the drafter drafting where the fit says k=0:
            vLLM's k=0 path with a drafter loaded ran 16% slower than plain decoding at
            concurrency 64 on the example CPU sweep, and k=1 there reached 0.947 of it.

    Raises:
        SweepNotFound: No such sweep, or no fitted sweep.
        BreakevenError: A sweep without a fit, or a file that is not a fit.
    """
    fit, source = _fit_body(session, sweep_id=sweep_id, fit_path=fit_path, deployment=deployment)
    bands = fit.bands
    if not bands:
        raise BreakevenError(f"{source}: the fit has an empty schedule")
    if min_k > 0 and any(band.k > 0 for band in bands):  # never speculating: plain engine
        bands = raise_bands(bands, min_k)
    return FittedSchedule(bands=bands, method=fit.primary.method, k=fit.primary.k, source=source)


# ------------------------------------------------------------------------ reading sweeps


def list_sweeps(session: Session, *, deployment: str | None = None) -> list[SweepSummary]:
    """Sweeps, newest first, with their point counts."""
    return [
        SweepSummary(sweep, points)
        for sweep, points in repository.list_sweeps(session, deployment=deployment)
    ]


def get_sweep(session: Session, sweep_id: int) -> tuple[Sweep, list[SweepPointRecord]]:
    """A sweep and its measured points.

    Raises:
        SweepNotFound: If there is no such sweep.
    """
    sweep = repository.get_sweep(session, sweep_id)
    if sweep is None:
        raise SweepNotFound(f"no sweep {sweep_id}")
    return sweep, repository.sweep_points(session, sweep_id)


def sweep_rows(session: Session, sweep_id: int) -> list[SweepRow]:
    """A sweep's stored points as sweep rows, fixed-k and scheduled alike, in stored order."""
    return repository.sweep_rows(session, sweep_id)


def sweep_fit(
    session: Session,
    sweep_id: int,
    *,
    refit: bool = False,
    bootstrap_samples: int = 200,
    seed: int = 0,
) -> tuple[dict[str, Any], bool]:
    """The sweep's fit as a JSON-ready dict, and whether it was computed now.

    Raises:
        SweepNotFound: If there is no such sweep.
        UnfittableSweep: If the sweep's points cannot be fitted.
    """
    sweep = repository.get_sweep(session, sweep_id)
    if sweep is None:
        raise SweepNotFound(f"no sweep {sweep_id}")
    if sweep.fit and not refit:
        return dict(sweep.fit), False
    rows = [row for row in repository.sweep_rows(session, sweep_id) if not row.schedule]
    _, body = fit_rows(
        rows, source=f"sweep {sweep_id}", bootstrap_samples=bootstrap_samples, seed=seed
    )
    return body, True


def breakeven_curves(session: Session) -> dict[str, BreakevenCurve]:
    """Per deployment, the breakeven of its newest sweep that has one (stored fits first;
    a sweep never fitted is fitted now, without a bootstrap)."""
    curves: dict[str, BreakevenCurve] = {}
    for summary in list_sweeps(session):
        sweep = summary.sweep
        if sweep.deployment is None or sweep.deployment in curves:
            continue
        try:
            body, _ = sweep_fit(session, sweep.id, bootstrap_samples=0)
            fit = read_stored_fit(body, f"sweep {sweep.id}")
        except (UnfittableSweep, BreakevenError):  # no curve for this sweep: try an older one
            continue
        curve = curve_of(sweep.deployment, sweep.id, fit)
        if curve is not None:
            curves[sweep.deployment] = curve
    return curves


def curve_of(deployment: str, sweep_id: int, fit: StoredFit) -> BreakevenCurve | None:
    """The primary config's breakeven, modelled speedups and schedule; None without one."""
    crossing = fit.breakeven_concurrency
    if crossing is None or not math.isfinite(crossing):
        return None
    speedups = [
        (c.concurrency, c.predicted_speedup)
        for c in fit.primary.comparisons
        if c.predicted_speedup is not None
    ]
    return BreakevenCurve(
        deployment=deployment,
        breakeven_concurrency=crossing,
        speedups=speedups,
        schedule=[list(band) for band in fit.schedule],
        sweep_id=sweep_id,
    )
