"""Breakeven use cases: fit a sweep file, store measured sweeps, read a fitted schedule.

Orchestration only: the sweep file is read by :mod:`app.breakeven.sweep_file`, the maths is
in :mod:`app.domain.breakeven_report`, queries in :mod:`app.breakeven.repository`. Functions
take a session and never commit (the CLI's unit of work does).
"""

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from app.breakeven import repository
from app.breakeven.render import measured_crossing
from app.breakeven.sweep_file import SweepFileError, SweepRow, read_sweep_file
from app.domain.breakeven import ScheduleBand, raise_bands
from app.domain.breakeven_report import BreakevenFit, breakeven_fit_as_dict, fit_breakeven
from app.domain.breakeven_sweep import InvalidSweep, SweepPoint
from app.domain.errors import InvalidInput
from app.domain.schedule_check import ScheduleCheck, check_schedules, schedule_check_as_dict


class BreakevenError(Exception):
    """A breakeven request that cannot be carried out; the message says what to do."""


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
    """Fit sweep rows; domain rejections become a :class:`SweepFileError` naming ``source``.

    Raises:
        SweepFileError: On degenerate data (the domain's message, prefixed with the source).
    """
    try:
        fit = fit_breakeven(
            [row.point for row in rows], bootstrap_samples=bootstrap_samples, seed=seed
        )
    except InvalidSweep as exc:
        column = "concurrency" if "concurrency" in exc.problem else None
        raise SweepFileError(source, str(exc), column=column) from None
    except InvalidInput as exc:
        raise SweepFileError(source, str(exc)) from None
    body = breakeven_fit_as_dict(fit)
    crossings = {c.config: measured_crossing(c.comparisons) for c in fit.configs}
    body["measured_crossing"] = crossings[fit.primary_config]
    for config in body["configs"]:  # type: ignore[attr-defined]
        config["measured_crossing"] = crossings[config["config"]]
    return fit, body


def fit_sweep_file(
    session: Session | None, *, path: Path, bootstrap_samples: int = 200, seed: int = 0
) -> FitOutcome:
    """Read, check and fit a sweep CSV; store the sweep, its points and its fit.

    Fitting the same file again (same SHA-256), or the CSV that ``breakeven sweep`` wrote and
    stored, updates the stored fit instead of adding a second copy of the sweep.

    Args:
        session: Where to store the result; None fits without storing.
        path: The sweep CSV.
        bootstrap_samples: Bootstrap replicates for the breakeven interval.
        seed: Seed of the bootstrap.

    Returns:
        The fit, its JSON form and the stored sweep's id.

    Raises:
        SweepFileError: On an unreadable file or degenerate data; names file, row and column.
    """
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
            repository.set_fit(session, existing, body)
            sweep_id = existing.id
        else:
            sweep = repository.add_sweep(
                session,
                name=path.name,
                rows=[*sweep_file.rows, *sweep_file.scheduled],
                settings=settings,
                fit=body,
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
    except SweepFileError as exc:
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


def _fit_body(
    session: Session, *, sweep_id: int | None, fit_path: Path | None
) -> tuple[dict[str, Any], str]:
    if sweep_id is not None and fit_path is not None:
        raise BreakevenError("give --sweep or --fit, not both")
    if fit_path is not None:
        try:
            body = json.loads(fit_path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise BreakevenError(f"{fit_path}: not a readable fit JSON file: {exc}") from None
        if not isinstance(body, dict):
            raise BreakevenError(f"{fit_path}: expected a JSON object from `breakeven fit --json`")
        return body, str(fit_path)
    sweep = (
        repository.get_sweep(session, sweep_id)
        if sweep_id is not None
        else repository.latest_fitted_sweep(session)
    )
    if sweep is None:
        raise BreakevenError(
            f"no sweep {sweep_id}"
            if sweep_id is not None
            else "no fitted sweep yet; run `specledger breakeven fit sweep.csv`"
        )
    if sweep.fit is None:
        raise BreakevenError(
            f"sweep {sweep.id} has no fit; run `specledger breakeven fit` on its CSV"
        )
    return sweep.fit, f"sweep {sweep.id} ({sweep.name})"


def _schedule_of(body: dict[str, Any], source: str) -> tuple[tuple[ScheduleBand, ...], str, int]:
    """Bands, method and k of the fit's primary config."""
    try:
        bands = tuple(
            ScheduleBand(start=int(s), end=int(e), k=int(k)) for s, e, k in body["schedule"]
        )
        primary = next(c for c in body["configs"] if c["config"] == body["config"])
        method, k = str(primary["method"]), int(primary["k"])
    except (KeyError, TypeError, ValueError, StopIteration, ValidationError) as exc:
        raise BreakevenError(
            f"{source}: not a breakeven fit (need 'schedule', 'config' and "
            f"'configs' as `breakeven fit --json` prints them): {exc}"
        ) from None
    if not bands:
        raise BreakevenError(f"{source}: the fit has an empty schedule")
    return bands, method, k


def fitted_schedule(
    session: Session, *, sweep_id: int | None = None, fit_path: Path | None = None, min_k: int = 0
) -> FittedSchedule:
    """The schedule of a fit: stored with a sweep, the newest fitted sweep, or a
    ``breakeven fit --json`` file.

    Args:
        session: Database session (stored fits).
        sweep_id: Take the fit stored with this sweep.
        fit_path: Take the fit from a ``breakeven fit --json`` file instead.
        min_k: Raise bands below this k to it (adjacent equal bands merge), unless the
            schedule never speculates. 1 keeps the drafter drafting where the fit says k=0:
            vLLM's k=0 path with a drafter loaded ran 16% slower than plain decoding at
            concurrency 64 on the example CPU sweep, and k=1 there reached 0.947 of it.

    Raises:
        BreakevenError: No such sweep, no fit, or a file that is not a fit.
    """
    body, source = _fit_body(session, sweep_id=sweep_id, fit_path=fit_path)
    bands, method, k = _schedule_of(body, source)
    if min_k > 0 and any(band.k > 0 for band in bands):  # never speculating: plain engine
        bands = raise_bands(bands, min_k)
    return FittedSchedule(bands=bands, method=method, k=k, source=source)
