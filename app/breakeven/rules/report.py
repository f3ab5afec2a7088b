"""Breakeven analysis of a load sweep: the fit, the crossing, its interval and the schedule.

:func:`fit_breakeven` is the entry point for the CLI and the API: validated sweep rows in, a
frozen :class:`BreakevenFit` out; :func:`breakeven_fit_as_dict` gives its JSON-ready form.
"""

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from app.breakeven.rules.fit import (
    FittedParameter,
    LeastSquaresFit,
    SweepProblem,
    build_problem,
    fit_sweep,
    fitted_parameters,
    solve,
)
from app.breakeven.rules.local_crossing import LocalCrossing, local_crossing, next_levels
from app.breakeven.rules.model import (
    AcceptanceNeed,
    FloatArray,
    ScheduleBand,
    SpeculationModel,
    StepTimeModel,
    acceptance_needed,
    baseline_tokens_per_s,
    breakeven_concurrency,
    inflection_concurrency,
    is_model_free,
    speculation_schedule,
    speculative_tokens_per_s,
    speedup,
)
from app.breakeven.rules.sweep import ConfigSweep, SweepPoint, validate_sweep
from app.domain.errors import InvalidInput, NoBreakeven

INFLECTION_SEARCH_FACTOR = 100.0
"""The inflection is searched from measured-min / factor to measured-max * factor."""


MIN_LEVELS_FOR_PER_SEQUENCE = 4
"""Concurrency levels the baseline needs before ``per_sequence_s`` is fitted by default."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ConcurrencyComparison:
    """Measured against modelled throughput at one concurrency level of both configs."""

    concurrency: float
    measured_baseline_tokens_per_s: float
    """Median over repeated rows."""
    measured_speculative_tokens_per_s: float
    """Median over repeated rows."""
    measured_speedup: float
    predicted_baseline_tokens_per_s: float
    predicted_speculative_tokens_per_s: float
    predicted_speedup: float
    acceptance_needed: AcceptanceNeed
    """Acceptance at which this config's k would just break even here."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigBreakeven:
    """Breakeven results for one speculative config against the baseline."""

    config: str
    method: str
    k: int
    mean_acceptance_length: float
    acceptance_measured: bool
    """False when the sweep had no acceptance figures and the fit estimated the length."""
    alpha: float
    """Per-token acceptance rate implied by the mean acceptance length."""
    concurrency_low: float
    concurrency_high: float
    """The measured range shared with the baseline, where the crossing is searched."""
    speedup_at_low: float
    speedup_at_high: float
    """Modelled speedup at the ends of the range (the answer when there is no crossing)."""
    breakeven_concurrency: float | None
    """The answer: where the modelled speedup is 1, as long as it agrees with the measured
    levels (it lies between the two levels the measured speedup falls through 1 between,
    or no two levels bracket the crossing and the model extrapolates); else the measured
    crossing (``breakeven_source`` says which, ``disagreement`` why). None when neither
    crosses in the measured range."""
    breakeven_ci: tuple[float, float] | None
    """The answer's interval: for the model's answer, the interval of
    :data:`INTERVAL_METHOD` (an end may be 0.0 or inf when bootstrap replicates leave the
    range; None without a bootstrap); for the measured one, its Fieller interval, or the
    bracketing levels when that is unbounded."""
    breakeven_source: str
    """``model``, ``measured`` (the model disagreed with the levels) or ``none``."""
    model_breakeven_concurrency: float | None
    """Where the fitted model's speedup is 1 in the measured range, whatever is reported."""
    disagreement: str | None
    """Set when the model's crossing lies outside the measured levels that bracket the
    crossing (or the model does not cross where they do): how, and that the measured
    crossing is reported."""
    bootstrap_ci: tuple[float, float] | None
    """The residual-bootstrap part of ``breakeven_ci`` alone (the fitted model's noise)."""
    local: LocalCrossing | None
    """The crossing from the measured levels around it (None when they do not cross)."""
    pinned_down: bool
    """Whether the levels around the crossing bound it (a bounded local interval)."""
    next_levels: tuple[int, ...]
    """Concurrency levels to measure next when the crossing is not pinned down."""
    repeats_for_target: int | None
    """Runs per level that would bring the local interval to within
    :data:`TARGET_HALF_WIDTH` of the estimate (its width shrinks as one over the square
    root of the runs); None without a bounded local interval."""
    bootstrap_crossing_share: float
    """Share of bootstrap replicates with a crossing within the widened bootstrap range."""
    inflection_concurrency: float | None
    inflection_in_range: bool
    comparisons: tuple[ConcurrencyComparison, ...]
    schedule: tuple[ScheduleBand, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class BreakevenFit:
    """The fitted model and the breakeven analysis of every speculative config."""

    baseline_config: str
    primary_config: str
    step_model: StepTimeModel
    parameters: tuple[FittedParameter, ...]
    residual_rms_log: float
    """Root mean square of log residuals, about the typical relative error of a row."""
    configs: tuple[ConfigBreakeven, ...]
    bootstrap_samples: int
    seed: int
    confidence: float

    @property
    def primary(self) -> ConfigBreakeven:
        """The config whose answer is reported at the top level."""
        return next(c for c in self.configs if c.config == self.primary_config)

    @property
    def breakeven_concurrency(self) -> float | None:
        """Breakeven of the primary config."""
        return self.primary.breakeven_concurrency

    @property
    def breakeven_ci(self) -> tuple[float, float] | None:
        """Confidence interval on the primary config's breakeven."""
        return self.primary.breakeven_ci

    @property
    def schedule(self) -> tuple[ScheduleBand, ...]:
        """vLLM ``num_speculative_tokens_per_batch_size`` for the primary config."""
        return self.primary.schedule


INTERVAL_METHOD = (
    "the union of a residual-bootstrap percentile interval of the fitted model and a "
    "Fieller interval of the crossing of a weighted line through the measured log speedups "
    "at the levels around it (the model may be biased; the local line is not tied to it)"
)


TARGET_HALF_WIDTH = 0.10
"""The interval width ``breakeven sweep`` plans repeats for: the estimate within 10%."""


def repeats_for_target(local: LocalCrossing | None, repeats: int) -> int | None:
    """Runs per level for a local interval of +-:data:`TARGET_HALF_WIDTH` around the
    estimate, from the interval ``repeats`` runs gave."""
    if local is None or local.interval is None:
        return None
    half = max(
        math.log(local.estimate / local.interval[0]), math.log(local.interval[1] / local.estimate)
    )
    return max(1, math.ceil(repeats * (half / math.log1p(TARGET_HALF_WIDTH)) ** 2))


def _runs_at(config: ConfigSweep, levels: Sequence[float]) -> int:
    """The fewest rows a config has at any of ``levels``."""
    return min(config.concurrency.count(level) for level in levels)


def _row_noise(fit: LeastSquaresFit) -> tuple[float, int]:
    """Standard deviation of one row's log throughput from the fit's residuals, and its
    degrees of freedom."""
    rows, params = len(fit.residuals), len(fit.theta)
    df = max(rows - params, 1)
    return float(math.sqrt(float(np.sum(fit.residuals**2)) / df)), df


def disagreement(model: float | None, local: LocalCrossing | None) -> str | None:
    """How the model's crossing disagrees with the measured levels that bracket the
    crossing, or None when they agree (the model's crossing lies between those levels, so
    the model only interpolates) or no two levels bracket it (the model is all there is)."""
    if local is None:
        return None
    low, high = local.bracket
    measured = (
        f"the measured speedup falls through 1 between levels {low:g} and {high:g} "
        f"(at {local.estimate:.2f} on the line through the levels around it)"
    )
    if model is None:
        return f"the fitted model does not cross in the measured range, but {measured}; " + (
            "reporting the measured crossing"
        )
    if low <= model <= high:
        return None
    return (
        f"the fitted model crosses at {model:.2f}, but {measured}; reporting the measured crossing"
    )


def _combined_interval(
    bootstrap: tuple[float, float], local: LocalCrossing | None
) -> tuple[float, float]:
    if local is None or local.interval is None:
        return bootstrap
    return min(bootstrap[0], local.interval[0]), max(bootstrap[1], local.interval[1])


def _crossing(
    step: StepTimeModel, spec: SpeculationModel, *, low: float, high: float
) -> float | None:
    try:
        return breakeven_concurrency(step, spec, low=low, high=high)
    except NoBreakeven:
        return None


def _bootstrap_crossings(
    problem: SweepProblem,
    fit: LeastSquaresFit,
    ranges: Sequence[tuple[float, float]],
    *,
    samples: int,
    seed: int,
    range_factor: float,
) -> FloatArray:
    """Breakevens of refits to residual-bootstrap replicates, one column per config.

    Log residuals are centred, inflated by ``sqrt(n / (n - p))`` for the fitted degrees of
    freedom, resampled with replacement and added to the fitted curve. Replicates are solved on a
    range widened by ``range_factor``; outside it a replicate counts as 0.0 (never pays) or
    inf (still pays), so percentiles stay defined.
    """
    rng = np.random.default_rng(seed)
    rows, params = len(fit.residuals), len(fit.theta)
    centred = (fit.residuals - fit.residuals.mean()) * math.sqrt(rows / max(rows - params, 1))
    fitted_log = problem.log_predicted(fit.theta)
    out = np.empty((samples, len(ranges)))
    for sample in range(samples):
        draw = rng.choice(centred, size=rows, replace=True)
        # residual = log(pred) - log(measured), so a replicate measures pred / exp(draw)
        refit = solve(problem, fitted_log - draw, [fit.theta])
        step, specs = problem.unpack(refit.theta)
        for column, (spec, (low, high)) in enumerate(zip(specs, ranges, strict=True)):
            low_wide, high_wide = low / range_factor, high * range_factor
            found = _crossing(step, spec, low=low_wide, high=high_wide)
            if found is None:
                pays = float(speedup(step, spec, concurrency=high_wide)) > 1.0
                found = math.inf if pays else 0.0
            out[sample, column] = found
    return out


def _interval(values: FloatArray, confidence: float) -> tuple[float, float]:
    tails = [(1.0 - confidence) / 2.0, (1.0 + confidence) / 2.0]
    # Order statistics when sentinels (0, inf) are present: interpolating towards inf gives NaN.
    if np.all(np.isfinite(values)):
        low, high = np.quantile(values, tails, method="linear")
    else:
        low, high = np.quantile(values, tails, method="inverted_cdf")
    return float(low), float(high)


def _median_at(concurrency: tuple[float, ...], rates: tuple[float, ...], level: float) -> float:
    return float(np.median([r for c, r in zip(concurrency, rates, strict=True) if c == level]))


def _comparisons(
    baseline: ConfigSweep, config: ConfigSweep, step: StepTimeModel, spec: SpeculationModel
) -> tuple[ConcurrencyComparison, ...]:
    rows = []
    for level in sorted(set(baseline.levels) & set(config.levels)):
        plain = _median_at(baseline.concurrency, baseline.tokens_per_s, level)
        spec_rate = _median_at(config.concurrency, config.tokens_per_s, level)
        modelled_plain = baseline_tokens_per_s(step, concurrency=level)
        modelled_spec = speculative_tokens_per_s(step, spec, concurrency=level)
        rows.append(
            ConcurrencyComparison(
                concurrency=level,
                measured_baseline_tokens_per_s=plain,
                measured_speculative_tokens_per_s=spec_rate,
                measured_speedup=spec_rate / plain,
                predicted_baseline_tokens_per_s=float(modelled_plain),
                predicted_speculative_tokens_per_s=float(modelled_spec),
                predicted_speedup=float(modelled_spec / modelled_plain),
                acceptance_needed=acceptance_needed(step, spec, concurrency=level),
            )
        )
    return tuple(rows)


def _analyse_config(
    baseline: ConfigSweep,
    config: ConfigSweep,
    step: StepTimeModel,
    spec: SpeculationModel,
    *,
    concurrency_range: tuple[float, float],
    crossings: FloatArray | None,
    noise: tuple[float, int],
    confidence: float,
    max_k: int,
    max_batch_size: int,
) -> ConfigBreakeven:
    low, high = concurrency_range
    found = _crossing(step, spec, low=low, high=high)
    local = local_crossing(baseline, config, sigma=noise[0], df=noise[1], confidence=confidence)
    interval = bootstrap = None
    share = math.nan
    if crossings is not None:
        share = float(np.mean(np.isfinite(crossings) & (crossings > 0.0)))
        if found is not None:
            bootstrap = _interval(crossings, confidence)
            interval = _combined_interval(bootstrap, local)
    answer, answer_ci, source = found, interval, "model" if found is not None else "none"
    disagrees = disagreement(found, local)
    if local is not None and disagrees is not None:
        answer, source = local.estimate, "measured"
        answer_ci = local.interval if local.interval is not None else local.bracket
    pinned = local is not None and local.interval is not None
    runs = (
        min(_runs_at(baseline, local.bracket), _runs_at(config, local.bracket))
        if local is not None
        else 1
    )
    suggested: tuple[int, ...] = ()
    if answer is not None and not pinned:
        measured = sorted(set(baseline.levels) & set(config.levels))
        suggested = next_levels(answer, answer_ci, measured)
    knee = inflection_concurrency(
        step, spec, low=low / INFLECTION_SEARCH_FACTOR, high=high * INFLECTION_SEARCH_FACTOR
    )
    return ConfigBreakeven(
        config=config.config,
        method=config.method,
        k=config.k,
        mean_acceptance_length=spec.mean_acceptance_length,
        acceptance_measured=config.mean_acceptance_length is not None,
        alpha=spec.alpha,
        concurrency_low=low,
        concurrency_high=high,
        speedup_at_low=float(speedup(step, spec, concurrency=low)),
        speedup_at_high=float(speedup(step, spec, concurrency=high)),
        breakeven_concurrency=answer,
        breakeven_ci=answer_ci,
        breakeven_source=source,
        model_breakeven_concurrency=found,
        disagreement=disagrees,
        bootstrap_ci=bootstrap,
        local=local,
        pinned_down=pinned,
        next_levels=suggested,
        repeats_for_target=repeats_for_target(local, runs),
        bootstrap_crossing_share=share,
        inflection_concurrency=knee,
        inflection_in_range=knee is not None and low <= knee <= high,
        comparisons=_comparisons(baseline, config, step, spec),
        schedule=speculation_schedule(step, spec, max_k=max_k, max_batch_size=max_batch_size),
    )


def _check_options(
    *,
    bootstrap_samples: int,
    confidence: float,
    max_k: int | None,
    max_batch_size: int,
    bootstrap_range_factor: float,
) -> None:
    if not bootstrap_range_factor >= 1.0:
        raise InvalidInput(f"bootstrap_range_factor must be >= 1, got {bootstrap_range_factor}")
    if bootstrap_samples < 0:
        raise InvalidInput(f"bootstrap_samples must be >= 0, got {bootstrap_samples}")
    if not 0.0 < confidence < 1.0:
        raise InvalidInput(f"confidence must lie in (0, 1), got {confidence}")
    if max_k is not None and max_k < 0:
        raise InvalidInput(f"max_k must be >= 0, got {max_k}")
    if max_batch_size < 1:
        raise InvalidInput(f"max_batch_size must be >= 1, got {max_batch_size}")


def fit_breakeven(
    points: Sequence[SweepPoint],
    *,
    bootstrap_samples: int = 200,
    seed: int = 0,
    confidence: float = 0.95,
    max_k: int | None = None,
    max_batch_size: int = 256,
    primary_config: str | None = None,
    fit_per_sequence: bool | None = None,
    bootstrap_range_factor: float = 16.0,
) -> BreakevenFit:
    """Fit the step-time model to a sweep and derive breakeven, interval, inflection, schedule.

    A sweep whose curves do not cross in the measured range is a valid answer: that config's
    ``breakeven_concurrency`` is None and ``speedup_at_low`` / ``speedup_at_high`` say which side
    of 1 it stays on.

    Args:
        points: Sweep rows: one baseline config (method ``none``) and speculative configs.
        bootstrap_samples: Residual-bootstrap replicates for the interval; 0 skips it.
        seed: Seed of the bootstrap's random generator (results are deterministic).
        confidence: Coverage of the breakeven interval.
        max_k: Largest k in the schedule; defaults to each config's measured k, since alpha is
            only known up to there.
        max_batch_size: The schedule covers batch sizes ``1..max_batch_size``.
        primary_config: Config reported at the top level; defaults to the first speculative
            config in input order.
        fit_per_sequence: Also fit a per-sequence step cost (needs measured acceptance).
            None: fit it when every speculative config drafts without a model and has
            measured acceptance, and the baseline has ``MIN_LEVELS_FOR_PER_SEQUENCE`` levels
            (a draft model's cost also grows per sequence, which leaves the two terms only
            weakly separable in noisy data).
        bootstrap_range_factor: Replicates search for the crossing on the measured range
            widened by this factor on both sides.

    Returns:
        The fit and, per speculative config, the breakeven analysis.

    Raises:
        InvalidInput: On degenerate sweep data (see ``validate_sweep``; the subclass
            ``InvalidSweep`` names the config) or out-of-range options.
    """
    _check_options(
        bootstrap_samples=bootstrap_samples,
        confidence=confidence,
        max_k=max_k,
        max_batch_size=max_batch_size,
        bootstrap_range_factor=bootstrap_range_factor,
    )
    sweep = validate_sweep(points)
    names = [c.config for c in sweep.speculative]
    primary = names[0] if primary_config is None else primary_config
    if primary not in names:
        raise InvalidInput(
            f"primary config {primary!r} is not a speculative config of the sweep: {names}"
        )
    if fit_per_sequence is None:
        fit_per_sequence = (
            all(
                c.mean_acceptance_length is not None and is_model_free(c.method)
                for c in sweep.speculative
            )
            and len(sweep.baseline.levels) >= MIN_LEVELS_FOR_PER_SEQUENCE
        )
    problem = build_problem(sweep, fit_per_sequence=fit_per_sequence)
    fit = fit_sweep(problem, sweep)
    step, specs = problem.unpack(fit.theta)
    baseline = sweep.baseline
    ranges = [
        (max(baseline.levels[0], c.levels[0]), min(baseline.levels[-1], c.levels[-1]))
        for c in sweep.speculative
    ]
    crossings = None
    if bootstrap_samples:
        crossings = _bootstrap_crossings(
            problem,
            fit,
            ranges,
            samples=bootstrap_samples,
            seed=seed,
            range_factor=bootstrap_range_factor,
        )
    configs = tuple(
        _analyse_config(
            baseline,
            config,
            step,
            spec,
            concurrency_range=ranges[column],
            crossings=None if crossings is None else crossings[:, column],
            noise=_row_noise(fit),
            confidence=confidence,
            max_k=config.k if max_k is None else max_k,
            max_batch_size=max_batch_size,
        )
        for column, (config, spec) in enumerate(zip(sweep.speculative, specs, strict=True))
    )
    return BreakevenFit(
        baseline_config=baseline.config,
        primary_config=primary,
        step_model=step,
        parameters=fitted_parameters(problem, fit),
        residual_rms_log=float(np.sqrt(np.mean(fit.residuals**2))),
        configs=configs,
        bootstrap_samples=bootstrap_samples,
        seed=seed,
        confidence=confidence,
    )


def _jsonable(value: object) -> object:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    return value


def breakeven_fit_as_dict(fit: BreakevenFit) -> dict[str, object]:
    """Plain JSON-ready form of a fit: the primary config's answer first, then everything.

    Non-finite floats (an unbounded interval end, a missing standard error) become None.

    Args:
        fit: Result of :func:`fit_breakeven`.

    Returns:
        A dict with ``breakeven_concurrency``, ``breakeven_ci`` (two numbers or None),
        ``schedule`` (``[[start, end, k], ...]``), the edges, inflection, parameters and configs.
    """
    primary = fit.primary
    body = dataclasses.asdict(fit)
    summary: dict[str, object] = {
        "config": primary.config,
        "breakeven_concurrency": primary.breakeven_concurrency,
        "breakeven_ci": primary.breakeven_ci,
        "breakeven_source": primary.breakeven_source,
        "model_breakeven_concurrency": primary.model_breakeven_concurrency,
        "disagreement": primary.disagreement,
        "schedule": primary.schedule,
        "concurrency_range": (primary.concurrency_low, primary.concurrency_high),
        "speedup_at_edges": (primary.speedup_at_low, primary.speedup_at_high),
        "inflection_concurrency": primary.inflection_concurrency,
        "interval_method": INTERVAL_METHOD,
        "pinned_down": primary.pinned_down,
        "next_levels": primary.next_levels,
        "repeats_for_target": primary.repeats_for_target,
    }
    summary.update(body)
    result = _jsonable(summary)
    assert isinstance(result, dict)
    return result
