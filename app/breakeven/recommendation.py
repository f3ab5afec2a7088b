"""Tier advice: the cheapest tier that meets a TPOT p90 target at a concurrency, the
speculation mode to run there, the reasoning for every tier, and the brief's quoted figures
against the computed ones at that load (``tiers recommend``, ``/v1/tiers/recommendation``).
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from app.breakeven.rules.claims import (
    CostCheck,
    check_monthly_cost,
    check_session_second_cost,
    usd,
)
from app.breakeven.rules.tier_costs import SpeculationMode, cost_curve, fits_capacity, tpot_at
from app.breakeven.tier_catalog import TierCatalog, load_tier_catalog
from app.breakeven.tiers import (
    MODES,
    TierError,
    TierModel,
    Workload,
    build_tier_models,
    cost_check_json,
    load_workload,
    quote_json,
)
from app.domain.money import format_micros

MODE_LABELS = {
    SpeculationMode.none: "never speculate",
    SpeculationMode.fixed: "always speculate",
    SpeculationMode.dynamic: "fitted schedule (best k per batch size)",
}


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
    quoted: dict[str, Any] | None = None
    """The brief's figures for the tier (decimal strings), if any."""
    claim_checks: tuple[CostCheck, ...] = ()
    """The quoted monthly cost and cost per 1K session-seconds against the chosen size at
    this concurrency."""
    reason: str = ""


def _option_checks(
    model: TierModel, *, instances: int, concurrency: int, hours_per_month: float
) -> tuple[CostCheck, ...]:
    quoted = model.tier.quoted
    if quoted is None:
        return ()
    terms = model.terms(
        hours_per_month,
        instances=(instances, instances),
        sessions=(concurrency, concurrency),
        scope="this load",
    )
    return (
        check_monthly_cost(terms, quoted_micros=quoted.usd_per_month.micros),
        check_session_second_cost(terms, quoted_micros=quoted.usd_micros_per_1k_session_seconds),
    )


def _option(
    model: TierModel, *, concurrency: int, tpot_p90_s: float, tail: float, hours_per_month: float
) -> TierOption:
    tier = model.tier
    in_range = tier.sessions.min <= concurrency <= tier.sessions.max
    last: dict[str, float] = {}
    for instances in range(tier.instances.min, tier.instances.max + 1):
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
            quoted=quote_json(tier),
            claim_checks=_option_checks(
                model,
                instances=instances,
                concurrency=concurrency,
                hours_per_month=hours_per_month,
            ),
        )
    if not last:
        reason = (
            f"{concurrency} sessions exceed {tier.instances.max} instance(s) x "
            f"{tier.replicas_per_instance} replica(s) x "
            f"{tier.max_concurrency_per_replica} sequences per replica"
        )
    else:
        fastest = min(last.values())
        reason = (
            f"even {tier.instances.max} instance(s) give a TPOT p90 of "
            f"{fastest * 1000:.1f} ms at best, above the {tpot_p90_s * 1000:.1f} ms target"
        )
    return TierOption(
        tier=tier.name,
        feasible=False,
        in_session_range=in_range,
        tpot_p90_s=last or None,
        quoted=quote_json(tier),
        reason=reason,
    )


def recommend_tier(
    catalog: TierCatalog,
    models: list[TierModel],
    workload: Workload,
    *,
    concurrency: int,
    tpot_p90_s: float,
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
        _option(
            m,
            concurrency=concurrency,
            tpot_p90_s=tpot_p90_s,
            tail=workload.tpot_p90_over_mean,
            hours_per_month=catalog.hours_per_month,
        )
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
        "quoted": option.quoted,
        "claim_checks": [cost_check_json(check) for check in option.claim_checks],
        "reason": option.reason or None,
    }  # fmt: skip


def _quoted_clause(checks: Sequence[CostCheck]) -> str:
    """``; the brief quotes ... (computed ..., above)`` for a reasoning line."""
    parts = []
    for check in checks:
        low, high = check.quoted_micros
        quoted = usd(low) if low == high else f"{usd(low)}-{usd(high)}"
        unit = "a month" if check.claim == "usd_per_month" else "per 1K session-seconds"
        parts.append(f"{quoted} {unit} (computed {usd(check.computed_micros[0])}: {check.verdict})")
    return f"; the brief quotes {' and '.join(parts)}" if parts else ""


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
            + _quoted_clause(o.claim_checks)
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


def tier_recommendation(
    session: Session | None, *, concurrency: int, tpot_p90_s: float, sweep_id: int | None = None
) -> dict[str, Any]:
    """``tiers recommend`` and ``GET /v1/tiers/recommendation``: :func:`recommend_tier`.

    Args:
        session: Database session; needed only with ``sweep_id``.
        concurrency: Concurrent sessions to serve, >= 1.
        tpot_p90_s: Target p90 time per output token, seconds, > 0.
        sweep_id: Take acceptance and the TPOT tail from this fitted sweep.

    Raises:
        TierQueryError: If the sweep is unknown or has no fit.
        TierError: If the concurrency or the target is not positive.
    """
    catalog = load_tier_catalog()
    workload = load_workload(session, catalog, sweep_id)
    return recommend_tier(
        catalog,
        build_tier_models(catalog, workload),
        workload,
        concurrency=concurrency,
        tpot_p90_s=tpot_p90_s,
    )
