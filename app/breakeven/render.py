"""Plain-text report of a breakeven fit (what ``specledger breakeven fit`` prints)."""

import itertools
import json
import math
from collections.abc import Sequence

from app.breakeven.sweep_file import SweepRow
from app.domain.breakeven_report import BreakevenFit, ConcurrencyComparison, ConfigBreakeven
from app.domain.schedule_check import ScheduleCheck


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
    if config.breakeven_ci is not None:
        lo, hi = config.breakeven_ci
        line += (
            f" ({100 * confidence:.0f}% CI {_num(lo)}-{_num(hi)}, {samples} bootstrap "
            f"refits, {100 * config.bootstrap_crossing_share:.0f}% crossed)"
        )
    crossing = measured_crossing(config.comparisons)
    measured = (
        "no measured crossing"
        if crossing is None
        else f"measured crossing (interpolated) {crossing:.2f}"
    )
    return [line, f"  {measured}"]


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
