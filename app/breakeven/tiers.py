"""Tier costs: the catalog, the instance prices and a throughput model, and the brief's claims.

Each tier's replica gets a roofline step-time model (hardware) and a speculative
configuration (workload: acceptance). A sweep can replace the workload side: its fitted
acceptance (alpha) and its measured TPOT p90/p50 ratio are used for every tier, since those
describe the prompts, while step times stay per tier, since those describe the hardware.

The brief's quoted figures (per tier: a monthly cost range and a cost per 1K session-seconds;
for the architecture: a speedup) are shown beside the computed ones and flagged within, below
or above, with the reason in the model's terms (:mod:`app.breakeven.rules.claims`).
The CLI and the API both call :func:`tiers_report` here and
:func:`app.breakeven.recommendation.tier_recommendation` for advice.
"""

import math
import statistics
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from app.breakeven import repository
from app.breakeven.rules.claims import (
    CostCheck,
    FleetTerms,
    SpeedupCheck,
    check_monthly_cost,
    check_session_second_cost,
    check_speedup,
    range_verdict,
)
from app.breakeven.rules.model import SpeculationModel, StepTimeModel
from app.breakeven.rules.speculation import expected_tokens_per_step
from app.breakeven.rules.tier_costs import (
    CostCurve,
    SpeculationMode,
    TierCapacity,
    cost_breakeven_concurrency,
    cost_curve,
    draft_cost_ratio,
    fits_capacity,
    roofline_step_model,
)
from app.breakeven.service import read_stored_fit
from app.breakeven.tier_catalog import GpuSpec, Tier, TierCatalog, load_tier_catalog
from app.catalog import InstancePrice, instance_prices
from app.domain.errors import Invalid
from app.domain.money import decimal_to_micros, format_micros

MODES = (SpeculationMode.none, SpeculationMode.fixed, SpeculationMode.dynamic)


class TierError(Invalid):
    """A tier request that cannot be answered; the message says why."""


class TierQueryError(TierError):
    """The sweep a tier question names cannot be used: unknown, or not fitted.

    It names the ``sweep`` query parameter itself, so the API answers 422
    ``invalid_parameter`` with that field, as for any parameter that parsed but makes no sense.
    """

    code = "invalid_parameter"

    def __init__(self, message: str) -> None:
        super().__init__(message, fields=[("query.sweep", message)])


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    """What a sweep says about the prompts: acceptance and the TPOT tail."""

    alpha: float | None
    tpot_p90_over_mean: float
    source: str
    measured_speedups: tuple[tuple[float, float], ...] = ()
    """``(concurrency, measured speedup)`` of the sweep's primary config; empty without one."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TierModel:
    """A tier with its price and its modelled replica."""

    tier: Tier
    price: InstancePrice
    step: StepTimeModel
    spec: SpeculationModel
    acceptance_source: str

    def capacity(self, instances: int) -> TierCapacity:
        """The tier provisioned with ``instances`` instances."""
        return TierCapacity(
            instance_usd_micros_per_hour=decimal_to_micros(self.price.usd_per_hour),
            instances=instances,
            replicas_per_instance=self.tier.replicas_per_instance,
            max_concurrency_per_replica=self.tier.max_concurrency_per_replica,
        )

    def terms(
        self,
        hours_per_month: float,
        *,
        instances: tuple[int, int],
        sessions: tuple[int, int],
        scope: str = "the tier",
    ) -> FleetTerms:
        """The terms of the tier's computed cost, for checking a quote."""
        return FleetTerms(
            instance_type=self.tier.instance_type,
            instance_usd_micros_per_hour=decimal_to_micros(self.price.usd_per_hour),
            gpus_per_instance=self.price.gpus,
            instances_min=instances[0],
            instances_max=instances[1],
            hours_per_month=hours_per_month,
            sessions_min=sessions[0],
            sessions_max=sessions[1],
            scope=scope,
        )


def default_workload(catalog: TierCatalog) -> Workload:
    """The catalog's own assumptions (no sweep)."""
    return Workload(
        alpha=None,
        tpot_p90_over_mean=catalog.tpot_p90_over_mean.value,
        source="tier catalog assumptions",
    )


def sweep_workload(session: Session, sweep_id: int, catalog: TierCatalog) -> Workload:
    """Acceptance, TPOT tail and measured speedups of a stored sweep.

    Raises:
        TierQueryError: If the sweep does not exist or has no fit.
        BreakevenError: If its stored fit is not a fit.
    """
    sweep = repository.get_sweep(session, sweep_id)
    if sweep is None:
        raise TierQueryError(f"no sweep {sweep_id}")
    if not sweep.fit:
        raise TierQueryError(f"sweep {sweep_id} has no fit; run `specledger breakeven fit` first")
    primary = read_stored_fit(sweep.fit, f"sweep {sweep_id}").primary
    ratios = []
    for row in repository.sweep_rows(session, sweep_id):
        p90 = row.metrics.get("tpot_p90_s")
        if (
            isinstance(p90, float)
            and math.isfinite(row.point.tpot_p50_s)
            and row.point.tpot_p50_s > 0
        ):
            ratios.append(p90 / row.point.tpot_p50_s)
    tail = statistics.median(ratios) if ratios else catalog.tpot_p90_over_mean.value
    return Workload(
        alpha=primary.alpha,
        tpot_p90_over_mean=tail,
        source=f"sweep {sweep_id} ({sweep.name})",
        measured_speedups=tuple(
            (c.concurrency, c.measured_speedup)
            for c in primary.comparisons
            if c.measured_speedup is not None
        ),
    )


def _roofline(catalog: TierCatalog, tier: Tier, gpu: GpuSpec, model: str) -> StepTimeModel:
    cal = catalog.calibration
    return roofline_step_model(
        params_billion=catalog.models[model].params_billion,
        bytes_per_param=tier.bytes_per_param,
        gpus=tier.gpus_per_replica,
        peak_tflops_per_gpu=gpu.bf16_dense_tflops,
        hbm_tb_per_s_per_gpu=gpu.hbm_tb_per_s,
        bandwidth_efficiency=cal.bandwidth_efficiency,
        compute_efficiency=cal.compute_efficiency,
        step_overhead_s=cal.step_overhead_s,
    )


def build_tier_models(catalog: TierCatalog, workload: Workload) -> list[TierModel]:
    """One modelled replica per tier.

    Raises:
        TierError: If a tier's instance type or GPU is not in the catalogs.
    """
    prices = instance_prices()
    models = []
    for tier in catalog.tiers:
        price = prices.get(tier.instance_type)
        if price is None or price.gpu not in catalog.gpus:
            raise TierError(
                f"tier {tier.name!r}: instance {tier.instance_type!r} or its GPU is "
                "missing from instance_prices.json / tiers.json"
            )
        gpu = catalog.gpus[price.gpu]
        step = _roofline(catalog, tier, gpu, tier.target)
        spec = tier.speculation
        ratio = spec.draft_cost_ratio
        if ratio is None:
            if spec.draft is None:
                raise TierError(f"tier {tier.name!r}: give a draft model or a draft_cost_ratio")
            ratio = draft_cost_ratio(draft=_roofline(catalog, tier, gpu, spec.draft), target=step)
        length, source = spec.mean_acceptance_length, spec.acceptance_source
        if workload.alpha is not None:
            length = expected_tokens_per_step(alpha=workload.alpha, k=spec.k)
            source = f"alpha {workload.alpha:.3f} from {workload.source}, at this tier's k={spec.k}"
        models.append(
            TierModel(
                tier=tier,
                price=price,
                step=step,
                acceptance_source=source,
                spec=SpeculationModel(
                    k=spec.k, mean_acceptance_length=length, draft_cost_ratio=ratio
                ),
            )
        )
    return models


def _grid(low: int, high: int, points: int = 5) -> list[int]:
    values = np.unique(np.rint(np.geomspace(low, high, points)).astype(int))
    return [int(v) for v in values]


def _point(curve: CostCurve, i: int) -> dict[str, Any]:
    return {
        "k": int(curve.k[i]),
        "tokens_per_s": round(float(curve.tokens_per_s[i]), 1),
        "tpot_s": round(float(curve.tpot_s[i]), 5),
        "usd_per_1k_session_seconds": format_micros(
            int(curve.usd_micros_per_1k_session_seconds[i])
        ),
        "usd_per_1m_tokens": format_micros(int(curve.usd_micros_per_1m_tokens[i])),
    }


def _model_facts(model: TierModel) -> dict[str, Any]:
    return {
        "target": model.tier.target, "gpu": model.price.gpu,
        "gpus_per_replica": model.tier.gpus_per_replica,
        "step_floor_s": model.step.floor_s, "step_per_token_s": model.step.per_token_s,
        "speculation": model.tier.speculation.method, "draft": model.tier.speculation.draft,
        "k": model.spec.k, "mean_acceptance_length": round(model.spec.mean_acceptance_length, 4),
        "draft_cost_ratio": round(model.spec.draft_cost_ratio, 4),
        "acceptance_source": model.acceptance_source,
    }  # fmt: skip


def quote_json(tier: Tier) -> dict[str, Any] | None:
    quoted = tier.quoted
    if quoted is None:
        return None
    low, high = quoted.usd_per_month.micros
    return {
        "source": quoted.source, "text": list(quoted.text),
        "usd_per_month": {"min": format_micros(low), "max": format_micros(high)},
        "usd_per_1k_session_seconds": format_micros(quoted.usd_micros_per_1k_session_seconds),
    }  # fmt: skip


def cost_check_json(check: CostCheck) -> dict[str, Any]:
    return {
        "claim": check.claim, "verdict": check.verdict.value,
        "quoted": {"min": format_micros(check.quoted_micros[0]),
                   "max": format_micros(check.quoted_micros[1])},
        "computed": {"min": format_micros(check.computed_micros[0]),
                     "max": format_micros(check.computed_micros[1])},
        "reason": check.reason,
    }  # fmt: skip


def _speedup_check_json(check: SpeedupCheck) -> dict[str, Any]:
    low, high = check.per_replica_concurrency
    return {
        "claim": "speedup", "verdict": check.verdict.value,
        "quoted": {"min": check.quoted, "max": check.quoted},
        "computed": {"min": round(check.computed[0], 3), "max": round(check.computed[1], 3)},
        "per_replica_concurrency": {"min": round(low, 3), "max": round(high, 3)},
        "reason": check.reason,
    }  # fmt: skip


def tier_claim_checks(catalog: TierCatalog, model: TierModel) -> list[dict[str, Any]]:
    """The brief's figures for a tier against the computed ones: monthly cost and cost per 1K
    session-seconds over the tier's sizes and sessions, and the speedup over its batch sizes.

    Returns:
        One JSON-ready check per quoted figure (none when nothing was quoted).
    """
    tier, checks = model.tier, []
    if tier.quoted is not None:
        terms = model.terms(
            catalog.hours_per_month,
            instances=(tier.instances.min, tier.instances.max),
            sessions=(tier.sessions.min, tier.sessions.max),
        )
        monthly = check_monthly_cost(terms, quoted_micros=tier.quoted.usd_per_month.micros)
        per_1k = check_session_second_cost(
            terms, quoted_micros=tier.quoted.usd_micros_per_1k_session_seconds
        )
        checks += [cost_check_json(monthly), cost_check_json(per_1k)]
    claim = catalog.claims.speedup
    if claim is not None:
        replicas = tier.replicas_per_instance
        batch = (
            tier.sessions.min / (tier.instances.max * replicas),
            tier.sessions.max / (tier.instances.min * replicas),
        )
        speedup = check_speedup(
            model.step, model.spec, per_replica_concurrency=batch, quoted=claim.value
        )
        checks.append(_speedup_check_json(speedup))
    return checks


def _claims_json(catalog: TierCatalog, workload: Workload) -> dict[str, Any]:
    claim = catalog.claims.speedup
    if claim is None:
        return {"speedup": None}
    measured = None
    if workload.measured_speedups:
        values = [value for _, value in workload.measured_speedups]
        span = (min(values), max(values))
        measured = {
            "source": workload.source,
            "points": [[c, round(v, 3)] for c, v in workload.measured_speedups],
            "min": round(span[0], 3), "max": round(span[1], 3),
            "verdict": range_verdict(span, (claim.value, claim.value)).value,
        }  # fmt: skip
    return {
        "speedup": {
            "value": claim.value, "source": claim.source, "text": list(claim.text),
            "measured": measured,
        }
    }  # fmt: skip


def show_tiers(catalog: TierCatalog, models: list[TierModel], workload: Workload) -> dict[str, Any]:
    """Every tier's price, model and unit-cost curves over its session range, and the brief's
    quoted figures beside the computed ones, each flagged within, below or above.

    Returns:
        A JSON-ready dict (money as decimal strings).
    """
    tiers = []
    for model in models:
        tier = model.tier
        grid = _grid(tier.sessions.min, tier.sessions.max)
        sizes = []
        for instances in range(tier.instances.min, tier.instances.max + 1):
            capacity = model.capacity(instances)
            curves = {
                mode: cost_curve(
                    model.step,
                    model.spec,
                    capacity,
                    concurrency=np.asarray(grid, dtype=float),
                    mode=mode,
                )
                for mode in MODES
            }
            top = capacity.replicas * tier.max_concurrency_per_replica
            crossing = cost_breakeven_concurrency(
                model.step, model.spec, capacity, low=1.0, high=float(top)
            )
            hourly = capacity.usd_micros_per_hour
            sizes.append({
                "instances": instances, "replicas": capacity.replicas,
                "usd_per_hour": format_micros(hourly),
                "usd_per_month": format_micros(round(hourly * catalog.hours_per_month)),
                "cost_breakeven_concurrency": None if crossing is None else round(crossing, 1),
                "points": [{"concurrency": n, "fits": fits_capacity(capacity, concurrency=n),
                            **{mode.value: _point(curves[mode], i) for mode in MODES}}
                           for i, n in enumerate(grid)],
            })  # fmt: skip
        tiers.append({
            "name": tier.name, "description": tier.description,
            "instance_type": tier.instance_type, "scheduler": tier.scheduler,
            "instances": {"min": tier.instances.min, "max": tier.instances.max},
            "sessions": {"min": tier.sessions.min, "max": tier.sessions.max},
            "quoted": quote_json(tier), "claim_checks": tier_claim_checks(catalog, model),
            "notes": list(tier.notes), "model": _model_facts(model), "sizes": sizes,
        })  # fmt: skip
    return {
        "workload": workload.source,
        "claims": _claims_json(catalog, workload),
        "tpot_p90_over_mean": workload.tpot_p90_over_mean,
        "hours_per_month": catalog.hours_per_month,
        "calibration": catalog.calibration.source,
        "unit_costs": "cost per 1K session-seconds = fleet price per second x 1000 / concurrent "
                      "sessions (speculation changes it only through the instances needed); "
                      "cost per 1M tokens = fleet price / fleet output tokens",
        "tiers": tiers,
    }  # fmt: skip


# ----------------------------------------------------------------------- the CLI's and API's call


def load_workload(session: Session | None, catalog: TierCatalog, sweep_id: int | None) -> Workload:
    """The catalog's assumptions, or what the fitted sweep ``sweep_id`` measured.

    Raises:
        TierQueryError: If the sweep is unknown or has no fit.
    """
    if sweep_id is None:
        return default_workload(catalog)
    if session is None:
        raise TypeError("a sweep's workload is read from the database: pass a session")
    return sweep_workload(session, sweep_id, catalog)


def tiers_report(session: Session | None, *, sweep_id: int | None = None) -> dict[str, Any]:
    """``tiers show`` and ``GET /v1/tiers``: :func:`show_tiers` of the shipped catalog.

    Args:
        session: Database session; needed only with ``sweep_id``.
        sweep_id: Take acceptance, the TPOT tail and measured speedups from this fitted sweep.

    Raises:
        TierQueryError: If the sweep is unknown or has no fit.
        TierCatalogError: If the catalog is not valid.
        TierError: If a tier's instance or GPU is missing from the price catalogs.
    """
    catalog = load_tier_catalog()
    workload = load_workload(session, catalog, sweep_id)
    return show_tiers(catalog, build_tier_models(catalog, workload), workload)
