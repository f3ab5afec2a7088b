"""Inputs of the dynamic partition schedule (:mod:`app.slurm.rules.partition_schedule`), read from
the ledger: a deployment's load by hour of the week, its node-hour price, and its fitted TPOT.

* :func:`hourly_load`: the time-weighted p90 of concurrent sessions (sessions with a request
  in flight) in each hour of the week over the last ``weeks`` whole weeks, from the
  deployment's usage records wherever the ledger keeps them (the database or a run's
  Parquet store). :func:`load_profile_of` gives the mean (session-seconds / 3600) as well.
* :func:`node_hour_price`: the ledger's own price of a node-hour: the deployment's compute
  cost (request and idle entries, whose GPU-seconds add up to its GPUs x wall time) over the
  GPU-hours they cover, times the GPUs of a node, in one allocated month.
* :func:`fitted_tpot`: the TPOT model of the deployment's newest fitted sweep, scaled to a
  p90 by the sweep's measured p90/p50 TPOT ratio.

Functions take a session and never commit. Errors:

* NotFound [404 not_found]
  - NoFittedSweep         the deployment has no sweep with a fit
  - NoNodeHourPrice       the ledger has no allocated compute cost for the deployment
* Invalid [422 invalid_input]
  - BreakevenError        a stored fit too old to give a step model (app.breakeven.service)
"""

import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.breakeven.rules.model import SpeculationModel, StepTimeModel, is_model_free
from app.breakeven.schemas import StoredFit
from app.breakeven.service import BreakevenError, list_sweeps, read_stored_fit
from app.breakeven.tier_catalog import load_tier_catalog
from app.breakeven.tiers import sweep_workload
from app.domain.errors import InvalidInput, NotFound
from app.domain.ledger import EntryKind
from app.domain.periods import Month
from app.kit.epoch import to_us
from app.kit.measures import sum_gpu_ns
from app.models import LedgerRollup, UsageRecord
from app.slurm.rules.partition_schedule import LoadProfile, load_profile, tpot_model
from app.storage.entry_reader import window_readers
from app.storage.run_repository import current_run_ids

__all__ = [
    "FittedTpot",
    "NoFittedSweep",
    "NoNodeHourPrice",
    "fitted_tpot",
    "hourly_load",
    "load_profile_of",
    "node_hour_price",
]

REQUEST_LOOKBACK = timedelta(days=1)
"""Usage is read by arrival: requests that arrived up to this long before the window and
were still running in it count too."""
_GPU_NS_PER_HOUR = 3_600 * 10**9


class NoFittedSweep(NotFound):
    """The deployment has no sweep with a stored fit."""


class NoNodeHourPrice(NotFound):
    """The ledger has no allocated compute cost (or no GPU time) for the deployment."""


# ------------------------------------------------------------------------ load


def _window(now: datetime, weeks: int) -> tuple[datetime, datetime]:
    if now.tzinfo is None:
        raise InvalidInput("now must be an aware datetime")
    if weeks < 1:
        raise InvalidInput(f"weeks must be >= 1, got {weeks}")
    end = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    return end - timedelta(weeks=weeks), end


def _requests(
    session: Session,
    deployment: str,
    start: datetime,
    end: datetime,
    s3_endpoint_url: str | None,
) -> Iterator[tuple[str, int, int]]:
    """``(session id, arrival us, finish us)`` of the deployment's requests overlapping
    ``[start, end)``, read where the ledger keeps the usage."""
    with window_readers(
        session, start - REQUEST_LOOKBACK, end, s3_endpoint_url=s3_endpoint_url
    ) as parts:
        for part in parts:
            rows = part.reader.rows(
                select(UsageRecord.session_id, UsageRecord.arrived_at, UsageRecord.finished_at)
                .where(
                    UsageRecord.deployment == deployment,
                    UsageRecord.arrived_at >= part.start,
                    UsageRecord.arrived_at < part.end,
                    UsageRecord.finished_at > start,
                )
                .order_by(UsageRecord.arrived_at)
            )
            if not rows:
                continue
            arrived = to_us([row[1] for row in rows])
            finished = to_us([row[2] for row in rows])
            for row, begin, finish in zip(rows, arrived, finished, strict=True):
                yield str(row[0]), int(begin), int(finish)


def load_profile_of(
    session: Session,
    deployment: str,
    *,
    weeks: int = 4,
    now: datetime,
    quantile: float = 0.9,
    s3_endpoint_url: str | None = None,
) -> LoadProfile:
    """Concurrent sessions of ``deployment`` per hour of the week, over the ``weeks`` whole
    weeks that end at the start of the current hour (``now`` floored to the hour, UTC).

    Args:
        session: Database session.
        deployment: Deployment whose usage records are read.
        weeks: Weeks of history, >= 1; each hour of the week is seen once per week.
        now: Aware instant the window ends at (floored to its hour).
        quantile: Time share the sized level covers (0.9: p90).
        s3_endpoint_url: For runs whose usage is kept in an S3 store.

    Returns:
        Per hour of the week (0 = Monday 00:00 UTC): the quantile and the mean of concurrent
        sessions (see :func:`app.slurm.rules.partition_schedule.load_profile`).
    """
    start, end = _window(now, weeks)
    return load_profile(
        _requests(session, deployment, start, end, s3_endpoint_url),
        start_us=int(to_us([start])[0]),
        weeks=weeks,
        quantile=quantile,
    )


def hourly_load(
    session: Session,
    deployment: str,
    *,
    weeks: int = 4,
    now: datetime,
    quantile: float = 0.9,
    s3_endpoint_url: str | None = None,
) -> list[float]:
    """The load the partition schedule is sized for: per hour of the week (0 = Monday
    00:00 UTC), the time-weighted ``quantile`` (p90) of concurrent sessions over the last
    ``weeks`` weeks. A session counts while it has a request in flight. See
    :func:`load_profile_of` for the arguments."""
    profile = load_profile_of(
        session,
        deployment,
        weeks=weeks,
        now=now,
        quantile=quantile,
        s3_endpoint_url=s3_endpoint_url,
    )
    return list(profile.quantile_load)


# ------------------------------------------------------------------------ price


def _div_half_even(numerator: int, denominator: int) -> int:
    quotient, remainder = divmod(numerator, denominator)
    twice = 2 * remainder
    if twice > denominator or (twice == denominator and quotient % 2):
        quotient += 1
    return quotient


def node_hour_price(
    session: Session,
    deployment: str,
    *,
    gpus_per_node: int,
    currency: str,
    month: Month | None = None,
) -> int:
    """The ledger's price of one node-hour of ``deployment``, micros of ``currency``.

    The deployment's effective cost in its request and idle entries (the compute rows split
    by GPU-seconds: request GPU-seconds plus idle GPU-seconds are its GPUs x wall time) over
    the GPU-hours those entries cover, times ``gpus_per_node``; rounded half to even. Shared
    rows (networking, storage) are left out: they do not scale with the nodes in the
    partition. Read from the current runs' rollups of one booked month.

    Args:
        session: Database session.
        deployment: Deployment name as the ledger has it.
        gpus_per_node: GPUs of one Slurm node, >= 1.
        currency: Currency of the ledger entries to read.
        month: Booked month to price from; None: the latest month allocated for the
            deployment in that currency.

    Raises:
        NoNodeHourPrice: If the ledger has no such cost or no GPU time for it.
    """
    if gpus_per_node < 1:
        raise InvalidInput(f"gpus_per_node must be >= 1, got {gpus_per_node}")
    rows = session.execute(
        select(
            LedgerRollup.booked_month,
            func.sum(LedgerRollup.effective_cost_micros),
            sum_gpu_ns(LedgerRollup),
        )
        .where(
            LedgerRollup.run_id.in_(current_run_ids()),
            LedgerRollup.deployment == deployment,
            LedgerRollup.kind.in_([EntryKind.request, EntryKind.idle]),
            LedgerRollup.currency == currency,
        )
        .group_by(LedgerRollup.booked_month)
    ).all()
    by_month = {str(booked): (int(cost or 0), int(gpu_ns or 0)) for booked, cost, gpu_ns in rows}
    chosen = str(month) if month is not None else max(by_month, default=None)
    cost, gpu_ns = by_month.get(chosen, (0, 0)) if chosen is not None else (0, 0)
    if gpu_ns <= 0:
        where = f" in {chosen}" if chosen is not None else ""
        raise NoNodeHourPrice(
            f"no allocated compute cost in {currency} for deployment {deployment!r}{where}; "
            "run `specledger allocate` for a month with its billing and usage"
        )
    return _div_half_even(cost * gpus_per_node * _GPU_NS_PER_HOUR, gpu_ns)


# ------------------------------------------------------------------------ latency


@dataclass(frozen=True, slots=True, kw_only=True)
class FittedTpot:
    """A deployment's fitted TPOT model: call it as ``tpot_s(concurrency, speculate)``."""

    step: StepTimeModel
    spec: SpeculationModel | None
    """None when the fit's primary config does not speculate."""
    method: str
    """vLLM speculative method of the fit's primary config (``ngram``, ``draft_model``...)."""
    k: int
    tail: float
    """TPOT p90 over the modelled TPOT: the sweep's median measured p90/p50 ratio (1 when it
    measured none)."""
    sweep_id: int
    source: str

    @property
    def speculation(self) -> str:
        """What "speculation on" runs, e.g. ``ngram k=4``."""
        return f"{self.method} k={self.k}" if self.spec is not None else "none"

    def __call__(self, concurrency: float, speculate: bool) -> float:
        return tpot_model(self.step, self.spec, self.k, tail=self.tail)(concurrency, speculate)


def _speculation(fit: StoredFit, source: str) -> SpeculationModel | None:
    primary = fit.primary
    if primary.k == 0 or primary.method == "none":
        return None
    length = primary.mean_acceptance_length
    if length is None and primary.alpha is not None:
        length = math.fsum(primary.alpha**i for i in range(primary.k + 1))
    if length is None:
        raise BreakevenError(f"{source}: the fit has no acceptance for {primary.config!r}")
    model_free = is_model_free(primary.method)
    cost = fit.parameter(
        f"{primary.config}.{'drafter_overhead_s' if model_free else 'draft_cost_ratio'}"
    )
    return SpeculationModel(
        k=primary.k,
        mean_acceptance_length=length,
        drafter_overhead_s=cost if model_free else 0.0,
        draft_cost_ratio=0.0 if model_free else cost,
    )


def fitted_tpot(session: Session, deployment: str) -> FittedTpot:
    """The TPOT model of the newest sweep of ``deployment`` that has a stored fit.

    Raises:
        NoFittedSweep: If the deployment has no fitted sweep.
        BreakevenError: If the stored fit has no step model (stored before fits kept one:
            fit the sweep again) or no acceptance.
    """
    sweep = next(
        (s.sweep for s in list_sweeps(session, deployment=deployment) if s.sweep.fit),
        None,
    )
    if sweep is None:
        raise NoFittedSweep(
            f"deployment {deployment!r} has no fitted sweep; run "
            f"`specledger breakeven sweep --deployment {deployment} ...` first"
        )
    source = f"sweep {sweep.id} ({sweep.name})"
    fit = read_stored_fit(sweep.fit, source)
    if fit.step_model is None:
        raise BreakevenError(f"{source}: the fit has no step model; fit the sweep again")
    spec = _speculation(fit, source)
    workload = sweep_workload(session, sweep.id, load_tier_catalog())
    return FittedTpot(
        step=fit.step_model.model(),
        spec=spec,
        method=fit.primary.method,
        k=fit.primary.k if spec is not None else 0,
        tail=workload.tpot_p90_over_mean,
        sweep_id=sweep.id,
        source=source,
    )
