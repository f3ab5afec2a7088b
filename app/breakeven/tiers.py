"""Tier costs and recommendations: the catalog, the instance prices and a throughput model.

Each tier's replica gets a roofline step-time model (hardware) and a speculative
configuration (workload: acceptance). A sweep can replace the workload side: its fitted
acceptance (alpha) and its measured TPOT p90/p50 ratio are used for every tier, since those
describe the prompts, while step times stay per tier, since those describe the hardware.
"""

import math
import statistics
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from app.breakeven import repository
from app.catalog import InstancePrice, instance_prices
from app.domain.breakeven import SpeculationModel, StepTimeModel
from app.domain.money import decimal_to_micros, format_micros
from app.domain.speculation import expected_tokens_per_step
from app.domain.tier_costs import (
    CostCurve,
    SpeculationMode,
    TierCapacity,
    cost_breakeven_concurrency,
    cost_curve,
    draft_cost_ratio,
    fits_capacity,
    roofline_step_model,
    tpot_at,
)
from app.tiers.catalog import GpuSpec, Tier, TierCatalog

MODES = (SpeculationMode.none, SpeculationMode.fixed, SpeculationMode.dynamic)
MODE_LABELS = {
    SpeculationMode.none: "never speculate",
    SpeculationMode.fixed: "always speculate",
    SpeculationMode.dynamic: "fitted schedule (best k per batch size)",
}


class TierError(Exception):
    """A tier request that cannot be answered; the message says why."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    """What a sweep says about the prompts: acceptance and the TPOT tail."""

    alpha: float | None
    tpot_p90_over_mean: float
    source: str


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


def default_workload(catalog: TierCatalog) -> Workload:
    """The catalog's own assumptions (no sweep)."""
    return Workload(
        alpha=None, tpot_p90_over_mean=catalog.tpot_p90_over_mean, source="tier catalog assumptions"
    )


def sweep_workload(session: Session, sweep_id: int, catalog: TierCatalog) -> Workload:
    """Acceptance and TPOT tail measured by a stored sweep.

    Raises:
        TierError: If the sweep does not exist or has no fit.
    """
    sweep = repository.get_sweep(session, sweep_id)
    if sweep is None:
        raise TierError(f"no sweep {sweep_id}")
    if not sweep.fit:
        raise TierError(f"sweep {sweep_id} has no fit; run `specledger breakeven fit` first")
    primary = next(
        (c for c in sweep.fit.get("configs", []) if c.get("config") == sweep.fit.get("config")),
        None,
    )
    alpha = None if primary is None else primary.get("alpha")
    ratios = []
    for row in repository.sweep_rows(session, sweep_id):
        p90 = row.metrics.get("tpot_p90_s")
        if (
            isinstance(p90, float)
            and math.isfinite(row.point.tpot_p50_s)
            and row.point.tpot_p50_s > 0
        ):
            ratios.append(p90 / row.point.tpot_p50_s)
    tail = statistics.median(ratios) if ratios else catalog.tpot_p90_over_mean
    return Workload(
        alpha=None if alpha is None else float(alpha),
        tpot_p90_over_mean=tail,
        source=f"sweep {sweep_id} ({sweep.name})",
    )


def _roofline(catalog: TierCatalog, tier: Tier, gpu: GpuSpec, model: str) -> StepTimeModel:
    cal = catalog.calibration
    return roofline_step_model(
        params_billion=catalog.model_params_billion[model],
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


def show_tiers(catalog: TierCatalog, models: list[TierModel], workload: Workload) -> dict[str, Any]:
    """Every tier's price, model and unit-cost curves over its session range.

    Returns:
        A JSON-ready dict (money as decimal strings).
    """
    tiers = []
    for model in models:
        tier = model.tier
        grid = _grid(tier.sessions_min, tier.sessions_max)
        sizes = []
        for instances in range(tier.instances_min, tier.instances_max + 1):
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
            "instances": {"min": tier.instances_min, "max": tier.instances_max},
            "sessions": {"min": tier.sessions_min, "max": tier.sessions_max},
            "quoted": tier.quoted, "notes": list(tier.notes), "model": _model_facts(model),
            "sizes": sizes,
        })  # fmt: skip
    return {
        "workload": workload.source,
        "tpot_p90_over_mean": workload.tpot_p90_over_mean,
        "hours_per_month": catalog.hours_per_month,
        "calibration": catalog.calibration.source,
        "unit_costs": "cost per 1K session-seconds = fleet price per second x 1000 / concurrent "
                      "sessions (speculation changes it only through the instances needed); "
                      "cost per 1M tokens = fleet price / fleet output tokens",
        "tiers": tiers,
    }  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class TierOption:
    """The cheapest way one tier meets the target, or why it cannot."""

    tier: str
    feasible: bool
    in_session_range: bool
    instances: int | None = None
    mode: SpeculationMode | None = None
    k: int | None = None
    tpot_p90_s: dict[str, float] | None = None
    """Per mode, at the chosen (or largest) size."""
    usd_micros_per_1k_session_seconds: int | None = None
    usd_micros_per_1m_tokens: dict[str, int] | None = None
    reason: str = ""


def _option(model: TierModel, *, concurrency: int, tpot_p90_s: float, tail: float) -> TierOption:
    tier = model.tier
    in_range = tier.sessions_min <= concurrency <= tier.sessions_max
    last: dict[str, float] = {}
    for instances in range(tier.instances_min, tier.instances_max + 1):
        capacity = model.capacity(instances)
        if not fits_capacity(capacity, concurrency=concurrency):
            continue
        p90 = {
            mode.value: tail
            * tpot_at(model.step, model.spec, capacity, concurrency=concurrency, mode=mode)
            for mode in MODES
        }
        last = p90
        curves = {
            mode: cost_curve(
                model.step,
                model.spec,
                capacity,
                concurrency=np.asarray([float(concurrency)]),
                mode=mode,
            )
            for mode in MODES
        }
        per_1m = {mode.value: int(curves[mode].usd_micros_per_1m_tokens[0]) for mode in MODES}
        ok = [mode for mode in MODES if p90[mode.value] <= tpot_p90_s]
        if not ok:
            continue
        # Same hardware, same price: the mode with most tokens per second is cheapest per token;
        # on a tie the simpler mode wins (none, then fixed, then dynamic).
        best = min(ok, key=lambda m: (per_1m[m.value], MODES.index(m)))
        return TierOption(
            tier=tier.name,
            feasible=True,
            in_session_range=in_range,
            instances=instances,
            mode=best,
            k=int(curves[best].k[0]),
            tpot_p90_s=p90,
            usd_micros_per_1k_session_seconds=int(
                curves[best].usd_micros_per_1k_session_seconds[0]
            ),
            usd_micros_per_1m_tokens=per_1m,
        )
    if not last:
        reason = (
            f"{concurrency} sessions exceed {tier.instances_max} instance(s) x "
            f"{tier.replicas_per_instance} replica(s) x "
            f"{tier.max_concurrency_per_replica} sequences per replica"
        )
    else:
        fastest = min(last.values())
        reason = (
            f"even {tier.instances_max} instance(s) give a TPOT p90 of "
            f"{fastest * 1000:.1f} ms at best, above the {tpot_p90_s * 1000:.1f} ms target"
        )
    return TierOption(
        tier=tier.name,
        feasible=False,
        in_session_range=in_range,
        tpot_p90_s=last or None,
        reason=reason,
    )


def recommend_tier(
    models: list[TierModel], workload: Workload, *, concurrency: int, tpot_p90_s: float
) -> dict[str, Any]:
    """The cheapest tier that meets a TPOT p90 target at ``concurrency`` sessions, with reasons.

    Tiers whose session range holds ``concurrency`` come first; among them the lowest cost per
    1K session-seconds wins. A tier outside its range is only chosen when no tier in range
    meets the target, and the answer says so.

    Raises:
        TierError: If the concurrency or the target is not positive.
    """
    if concurrency < 1 or not (math.isfinite(tpot_p90_s) and tpot_p90_s > 0):
        raise TierError("--concurrency must be >= 1 and --tpot-p90 > 0 seconds")
    options = [
        _option(m, concurrency=concurrency, tpot_p90_s=tpot_p90_s, tail=workload.tpot_p90_over_mean)
        for m in models
    ]
    feasible = [o for o in options if o.feasible]
    in_range = [o for o in feasible if o.in_session_range]
    pool = in_range or feasible
    chosen = min(pool, key=lambda o: o.usd_micros_per_1k_session_seconds or 0) if pool else None
    return {
        "concurrency": concurrency, "tpot_p90_target_s": tpot_p90_s,
        "workload": workload.source, "tpot_p90_over_mean": workload.tpot_p90_over_mean,
        "recommended": None if chosen is None else chosen.tier,
        "chosen_outside_session_range": chosen is not None and not chosen.in_session_range,
        "options": [_option_json(o) for o in options],
        "reasoning": _reasoning(options, chosen, concurrency=concurrency, target=tpot_p90_s),
    }  # fmt: skip


def _option_json(option: TierOption) -> dict[str, Any]:
    return {
        "tier": option.tier, "feasible": option.feasible,
        "in_session_range": option.in_session_range, "instances": option.instances,
        "speculation": None if option.mode is None else option.mode.value, "k": option.k,
        "tpot_p90_s": option.tpot_p90_s,
        "usd_per_1k_session_seconds": None if option.usd_micros_per_1k_session_seconds is None
        else format_micros(option.usd_micros_per_1k_session_seconds),
        "usd_per_1m_tokens": None if option.usd_micros_per_1m_tokens is None
        else {k: format_micros(v) for k, v in option.usd_micros_per_1m_tokens.items()},
        "reason": option.reason or None,
    }  # fmt: skip


def _reasoning(
    options: list[TierOption], chosen: TierOption | None, *, concurrency: int, target: float
) -> list[str]:
    lines = []
    for o in options:
        where = "inside" if o.in_session_range else "outside"
        if not o.feasible:
            lines.append(
                f"{o.tier}: cannot meet it ({o.reason}); {concurrency} sessions is "
                f"{where} its session range"
            )
            continue
        assert o.mode is not None
        assert o.tpot_p90_s is not None
        assert o.usd_micros_per_1m_tokens is not None
        assert o.usd_micros_per_1k_session_seconds is not None
        p90 = ", ".join(
            f"{MODE_LABELS[SpeculationMode(m)]} {v * 1000:.1f} ms" for m, v in o.tpot_p90_s.items()
        )
        per_1m = o.usd_micros_per_1m_tokens
        lines.append(
            f"{o.tier}: meets {target * 1000:.1f} ms with {o.instances} instance(s) ({where} its "
            f"session range); TPOT p90 {p90}; best: {MODE_LABELS[o.mode]} (k={o.k}) at "
            f"${format_micros(per_1m[o.mode.value])} per 1M tokens vs "
            f"${format_micros(per_1m['none'])} without speculation; "
            f"${format_micros(o.usd_micros_per_1k_session_seconds)} per 1K session-seconds"
        )
    if chosen is None:
        lines.append("No tier meets the target: relax the TPOT target or add capacity.")
    else:
        why = (
            "the cheapest per 1K session-seconds among tiers sized for this load"
            if chosen.in_session_range
            else "no tier sized for this load meets the target, so the cheapest that does"
        )
        lines.append(
            f"Recommended: {chosen.tier} with {chosen.instances} instance(s), "
            f"{MODE_LABELS[chosen.mode] if chosen.mode else ''}: {why}."
        )
        cheaper = [
            o
            for o in options
            if o.feasible
            and not o.in_session_range
            and (o.usd_micros_per_1k_session_seconds or 0)
            < (chosen.usd_micros_per_1k_session_seconds or 0)
        ]
        for o in cheaper:
            lines.append(
                f"Note: {o.tier} would be cheaper by the model but {concurrency} "
                "sessions is outside its session range (it serves another model "
                "size, and KV-cache memory is not modelled)."
            )
    return lines
