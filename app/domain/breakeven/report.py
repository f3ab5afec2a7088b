"""Breakeven analysis of a load sweep: the fit, the crossing, its interval and the schedule.

:func:`fit_breakeven` is the entry point for the CLI and the API: validated sweep rows in, a
frozen :class:`BreakevenFit` out; :func:`breakeven_fit_as_dict` gives its JSON-ready form.
"""

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from app.domain.breakeven.fit import (
    FittedParameter,
    LeastSquaresFit,
    SweepProblem,
    build_problem,
    fit_sweep,
    fitted_parameters,
    solve,
)
from app.domain.breakeven.model import (
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
from app.domain.breakeven.sweep import ConfigSweep, SweepPoint, validate_sweep
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
    """Where the modelled speedup is 1, or None when it does not cross in the measured range."""
    breakeven_ci: tuple[float, float] | None
    """Bootstrap percentile interval; an end may be 0.0 or inf when replicates leave the range."""
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
    confidence: float,
    max_k: int,
    max_batch_size: int,
) -> ConfigBreakeven:
    low, high = concurrency_range
    found = _crossing(step, spec, low=low, high=high)
    interval, share = None, math.nan
    if crossings is not None:
        share = float(np.mean(np.isfinite(crossings) & (crossings > 0.0)))
        if found is not None:
            interval = _interval(crossings, confidence)
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
        breakeven_concurrency=found,
        breakeven_ci=interval,
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
        "schedule": primary.schedule,
        "concurrency_range": (primary.concurrency_low, primary.concurrency_high),
        "speedup_at_edges": (primary.speedup_at_low, primary.speedup_at_high),
        "inflection_concurrency": primary.inflection_concurrency,
    }
    summary.update(body)
    result = _jsonable(summary)
    assert isinstance(result, dict)
    return result
