"""Plain text of the breakeven feature: the fit report (``breakeven fit``), the tiers
(``tiers show``) and the tier advice (``tiers recommend``)."""

import itertools
import json
import math
from collections.abc import Sequence
from typing import Any

from app.breakeven.rules.claims import usd
from app.breakeven.rules.report import (
    TARGET_HALF_WIDTH,
    BreakevenFit,
    ConcurrencyComparison,
    ConfigBreakeven,
)
from app.breakeven.rules.schedule_check import ScheduleCheck
from app.breakeven.sweep_file import SweepRow
from app.domain.money import parse_micros


def measured_crossing(comparisons: Sequence[ConcurrencyComparison]) -> float | None:
    """Where the measured speedup first falls through 1, interpolated on log axes.

    Between the two measured levels that bracket it, ``log(speedup)`` is taken as linear in
    ``log(concurrency)``. None when the measured speedups stay on one side of 1.
    """
    points = [(c.concurrency, c.measured_speedup) for c in comparisons]
    for (c0, s0), (c1, s1) in itertools.pairwise(points):
        y0, y1 = math.log(s0), math.log(s1)
        if y0 == 0.0:
            return c0
        if y0 > 0.0 >= y1:
            x0, x1 = math.log(c0), math.log(c1)
            return math.exp(x0 + (x1 - x0) * y0 / (y0 - y1))
    return None


def _num(value: float, digits: int = 3) -> str:
    if not math.isfinite(value):
        return "n/a" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return f"{value:.{digits}g}"


def _parameters(fit: BreakevenFit) -> list[str]:
    lines = [f"Step-time model (residual RMS {100 * fit.residual_rms_log:.1f}% of throughput)"]
    width = max(len(p.name) for p in fit.parameters)
    for p in fit.parameters:
        error = "n/a" if math.isnan(p.standard_error) else _num(p.standard_error, 2)
        flag = "  (at bound: SE understates the doubt)" if p.at_bound else ""
        lines.append(f"  {p.name:<{width}}  {_num(p.value, 4)} ± {error} {p.unit}{flag}")
    return lines


def _comparison_table(config: ConfigBreakeven) -> list[str]:
    lines = ["  concurrency  measured  predicted  needed acceptance (accepted/drafted, alpha)"]
    for c in config.comparisons:
        need = c.acceptance_needed
        if need.draft_acceptance_rate is None or need.alpha is None:
            needed = f"unreachable (would need {need.mean_acceptance_length:.2f} tokens/step)"
        else:
            needed = f"{need.draft_acceptance_rate:.3f}, alpha {need.alpha:.3f}"
        lines.append(
            f"  {c.concurrency:>11g}  {c.measured_speedup:>7.3f}x  "
            f"{c.predicted_speedup:>8.3f}x  {needed}"
        )
    return lines


def _breakeven_lines(config: ConfigBreakeven, confidence: float, samples: int) -> list[str]:
    low, high = config.concurrency_low, config.concurrency_high
    if config.breakeven_concurrency is None:
        side = "above" if config.speedup_at_low > 1 else "below"
        return [
            f"  Breakeven: no crossing in the measured range {low:g}-{high:g}: the modelled "
            f"speedup stays {side} 1 ({config.speedup_at_low:.3f}x at {low:g}, "
            f"{config.speedup_at_high:.3f}x at {high:g})"
        ]
    line = f"  Breakeven: {config.breakeven_concurrency:.2f} concurrent requests"
    lines = []
    if config.breakeven_source == "measured":
        local = config.local
        if local is not None and local.interval is not None:
            lo, hi = local.interval
            line += f" (measured; {100 * confidence:.0f}% CI {_num(lo)}-{_num(hi)})"
        elif local is not None:
            line += f" (measured: between levels {local.bracket[0]:g} and {local.bracket[1]:g})"
        lines.append(f"  The model and the measurements disagree: {config.disagreement}")
        if config.bootstrap_ci is not None:
            boot_lo, boot_hi = config.bootstrap_ci
            lines.append(
                f"  The fitted model's crossing {_num(config.model_breakeven_concurrency or 0)} "
                f"(residual bootstrap, {samples} refits: {_num(boot_lo)}-{_num(boot_hi)})"
            )
    elif config.breakeven_ci is not None and config.bootstrap_ci is not None:
        lo, hi = config.breakeven_ci
        boot_lo, boot_hi = config.bootstrap_ci
        line += f" ({100 * confidence:.0f}% CI {_num(lo)}-{_num(hi)})"
        lines.append(
            f"  Interval: the union of the fitted model's residual bootstrap ({samples} refits, "
            f"{100 * config.bootstrap_crossing_share:.0f}% crossed: {_num(boot_lo)}-"
            f"{_num(boot_hi)}) and {_local_text(config)}"
        )
    crossing = measured_crossing(config.comparisons)
    measured = (
        "no measured crossing"
        if crossing is None
        else f"measured crossing (interpolated) {crossing:.2f}"
    )
    lines.append(f"  {measured}")
    if not config.pinned_down and config.next_levels:
        levels = ",".join(str(level) for level in config.next_levels)
        lines.append(
            "  The measured levels do not pin the crossing down: measure concurrency "
            f"{levels} next (`specledger breakeven sweep --concurrency {levels}`)"
        )
    if config.repeats_for_target is not None:
        lines.append(
            f"  Runs per level for an interval within {TARGET_HALF_WIDTH:.0%} of the "
            f"estimate: {config.repeats_for_target}"
        )
    return [line, *lines]


def _local_text(config: ConfigBreakeven) -> str:
    local = config.local
    if local is None:
        return "no local interval (the measured speedup never falls through 1)"
    used = ", ".join(f"{level:g}" for level in local.levels_used)
    if local.interval is None:
        return f"no bounded local interval from the levels {used} (Fieller: slope not significant)"
    return (
        f"the Fieller interval {_num(local.interval[0])}-{_num(local.interval[1])} of the "
        f"measured crossing {local.estimate:.2f} (levels {used})"
    )


def _config_lines(fit: BreakevenFit, config: ConfigBreakeven) -> list[str]:
    source = "measured" if config.acceptance_measured else "fitted: the sweep had none"
    lines = [
        "",
        f"Config {config.config} ({config.method}, k={config.k}) vs {fit.baseline_config}: mean "
        f"acceptance length {config.mean_acceptance_length:.2f} ({source}), alpha "
        f"{config.alpha:.3f}",
        *_comparison_table(config),
        *_breakeven_lines(config, fit.confidence, fit.bootstrap_samples),
    ]
    if config.inflection_concurrency is None:
        lines.append("  Inflection (log-concurrency axis): none in the searched range")
    else:
        where = "inside" if config.inflection_in_range else "outside"
        lines.append(
            f"  Inflection (log-concurrency axis): {config.inflection_concurrency:.2f} "
            f"({where} the measured range)"
        )
    schedule = json.dumps([list(band) for band in config.schedule])
    lines.append(f"  Schedule (vLLM num_speculative_tokens_per_batch_size): {schedule}")
    return lines


def fit_report(
    fit: BreakevenFit,
    *,
    source: str,
    sweep_id: int | None,
    scheduled_rows: Sequence[SweepRow] = (),
    schedule_checks: Sequence[ScheduleCheck] = (),
) -> str:
    """The human-readable report of a fit.

    Args:
        fit: The fit.
        source: Where the sweep came from (a file name).
        sweep_id: The stored sweep's id, if stored.
        scheduled_rows: Rows measured with a dynamic schedule.
        schedule_checks: Those rows against never and always speculating.

    Returns:
        Multi-line text.
    """
    stored = f" (stored as sweep {sweep_id})" if sweep_id is not None else ""
    lines = [
        f"Breakeven fit of {source}{stored}; baseline {fit.baseline_config!r}, primary "
        f"config {fit.primary_config!r}",
        *_parameters(fit),
    ]
    for config in fit.configs:
        lines += _config_lines(fit, config)
    for check in schedule_checks:
        lines += _schedule_check_lines(check, fit)
    checked = {check.config for check in schedule_checks}
    unchecked = [row for row in scheduled_rows if row.point.config not in checked]
    if unchecked:
        lines += [
            "",
            "Rows measured with a dynamic schedule (no fixed configs to compare at their levels):",
        ]
        for row in unchecked:
            p = row.point
            lines.append(
                f"  {p.config} at {p.concurrency}: {p.output_tokens_per_s:.1f} "
                f"tokens/s, schedule {row.schedule}"
            )
    return "\n".join(lines)


def _schedule_check_lines(check: ScheduleCheck, fit: BreakevenFit) -> list[str]:
    verdict = "meets" if check.meets_target else "misses"
    lines = [
        "",
        f"Schedule {check.config!r} against never ({fit.baseline_config}) and always "
        f"({fit.primary_config}) speculating, output tokens/s (medians):",
        "  concurrency  scheduled      never     always  vs better",
    ]
    for level in check.levels:
        runs = f" ({level.runs} runs)" if level.runs > 1 else ""
        lines.append(
            f"  {level.concurrency:>11}  {level.scheduled_tokens_per_s:>9.1f}  "
            f"{level.never_tokens_per_s:>9.1f}  {level.always_tokens_per_s:>9.1f}  "
            f"{level.ratio_to_best:>8.3f}{runs}"
        )
    lines.append(
        f"  {verdict} the target of {check.target:.0%} of the better fixed choice at "
        f"every level (worst {check.worst_ratio:.3f})"
    )
    return lines


# ---------------------------------------------------------------------------------- tiers


def _money(text: str) -> str:
    return usd(parse_micros(text))


def _quoted(quoted: dict[str, Any] | None) -> str:
    if quoted is None:
        return "quoted: none"
    month = quoted["usd_per_month"]
    return (
        f"quoted: {_money(month['min'])}-{_money(month['max'])}/month, "
        f"{_money(quoted['usd_per_1k_session_seconds'])} per 1K session-seconds "
        f'({quoted["source"]}: "{" | ".join(quoted["text"])}")'
    )


_CLAIM_LABELS = {
    "usd_per_month": "monthly cost",
    "usd_per_1k_session_seconds": "cost per 1K session-seconds",
    "speedup": "speedup",
}


def _figure(claim: str, value: Any) -> str:
    return f"{float(value):.2f}x" if claim == "speedup" else _money(value)


def _span(claim: str, pair: dict[str, Any]) -> str:
    low, high = _figure(claim, pair["min"]), _figure(claim, pair["max"])
    return low if low == high else f"{low} to {high}"


def _claim_lines(checks: Sequence[dict[str, Any]]) -> list[str]:
    """Each quoted figure against the computed one: ``ok`` within, ``FLAG`` outside, and why."""
    lines = []
    for check in checks:
        claim = check["claim"]
        flag = "ok  " if check["verdict"] == "within" else "FLAG"
        verdict = (
            "WITHIN it" if check["verdict"] == "within" else f"computed {check['verdict'].upper()}"
        )
        lines += [
            f"  {flag} {_CLAIM_LABELS[claim]}: quoted {_span(claim, check['quoted'])}, computed "
            f"{_span(claim, check['computed'])}: {verdict}",
            f"       why: {check['reason']}",
        ]
    return lines


def _speedup_claim(report: dict[str, Any]) -> list[str]:
    claim = report["claims"]["speedup"]
    if claim is None:
        return []
    lines = [f'Quoted speedup: {claim["value"]:g}x ({claim["source"]}: "{claim["text"][0]}")']
    measured = claim["measured"]
    if measured is not None:
        points = ", ".join(f"{v:.2f}x at {c:g}" for c, v in measured["points"])
        lines.append(
            f"  measured by {measured['source']}: {points}; {measured['verdict'].upper()} the "
            f"quoted {claim['value']:g}x"
        )
    return lines


def tiers_text(report: dict[str, Any]) -> str:
    """The ``tiers show`` report as text.

    Args:
        report: What :func:`app.breakeven.tiers.show_tiers` returns.

    Returns:
        Multi-line text.
    """
    lines = [
        f"Workload: {report['workload']}; TPOT p90 = {report['tpot_p90_over_mean']:.2f} x "
        "modelled TPOT",
        f"Unit costs: {report['unit_costs']}",
        *_speedup_claim(report),
        "",
    ]
    for tier in report["tiers"]:
        m = tier["model"]
        lines += [
            f"{tier['name']}: {tier['description']}",
            f"  sessions {tier['sessions']['min']}-{tier['sessions']['max']}; scheduler "
            f"{tier['scheduler']}",
            f"  {_quoted(tier['quoted'])}",
            *_claim_lines(tier["claim_checks"]),
            f"  replica: {m['target']} on {m['gpus_per_replica']}x {m['gpu']}; step "
            f"{m['step_floor_s'] * 1000:.2f} ms + {m['step_per_token_s'] * 1e6:.1f} us/token; "
            f"{m['speculation']}{' (' + m['draft'] + ')' if m['draft'] else ''} k={m['k']}, "
            f"acceptance length {m['mean_acceptance_length']}, c={m['draft_cost_ratio']}",
            f"  acceptance: {m['acceptance_source']}",
        ]
        lines += [f"  note: {note}" for note in tier["notes"]]
        for size in tier["sizes"]:
            lines += _size_lines(size)
        lines.append("")
    lines.append(f"Calibration: {report['calibration']}")
    return "\n".join(lines)


def _size_lines(size: dict[str, Any]) -> list[str]:
    crossing = size["cost_breakeven_concurrency"]
    where = (
        "speculation always cheaper per token up to the batch limit"
        if crossing is None
        else f"always-speculate stops being cheaper per token at {crossing:g} sessions"
    )
    lines = [
        f"  {size['instances']} instance(s), {size['replicas']} replica(s): "
        f"${size['usd_per_hour']}/h, ${size['usd_per_month']}/month (computed); {where}",
        "    sessions  $/1K sess-s   $/1M tok: none   always  schedule(k)  TPOT ms: none  always",
    ]
    for p in size["points"]:
        none, fixed, dyn = p["none"], p["fixed"], p["dynamic"]
        flag = "" if p["fits"] else "  (over the batch limit)"
        lines.append(
            f"    {p['concurrency']:>8}  {none['usd_per_1k_session_seconds']:>11}  "
            f"{none['usd_per_1m_tokens']:>14}  {fixed['usd_per_1m_tokens']:>7}  "
            f"{dyn['usd_per_1m_tokens']:>8}({dyn['k']})  "
            f"{none['tpot_s'] * 1000:>13.2f}  {fixed['tpot_s'] * 1000:>6.2f}{flag}"
        )
    return lines


def recommendation_text(result: dict[str, Any]) -> str:
    """The ``tiers recommend`` answer as text.

    Args:
        result: What :func:`app.breakeven.tiers.recommend_tier` returns.

    Returns:
        Multi-line text: the answer first, then the reasoning per tier.
    """
    target_ms = result["tpot_p90_target_s"] * 1000
    head = (
        f"{result['concurrency']} concurrent sessions, TPOT p90 <= {target_ms:.1f} ms "
        f"(workload: {result['workload']}; p90 = {result['tpot_p90_over_mean']:.2f} x "
        "modelled TPOT)"
    )
    answer = (
        f"Recommended tier: {result['recommended']}"
        if result["recommended"]
        else "No tier meets the target."
    )
    lines = [head, answer, "", *(f"- {line}" for line in result["reasoning"])]
    for option in result["options"]:
        if option["claim_checks"]:
            lines += ["", f"{option['tier']} against the brief, at this load:"]
            lines += _claim_lines(option["claim_checks"])
    return "\n".join(lines)
