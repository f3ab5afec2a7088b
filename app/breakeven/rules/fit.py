"""Least-squares fit of the step-time model (app.breakeven.rules.model) to a measured load sweep.

One joint fit: the baseline and every speculative config share the target's step model
(``floor_s``, ``per_token_s``, optionally ``per_sequence_s``); each speculative config adds its
drafter cost (``drafter_overhead_s`` for model-free drafters, ``draft_cost_ratio`` for draft
models) and, when the sweep did not measure acceptance, its mean acceptance length. Residuals
are ``log(predicted) - log(measured)`` throughput, so every row weighs by its relative error.
Measured acceptance lengths are inputs, not parameters: each row is predicted with its own
measured length, and curves use the config's mean.
"""

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from app.breakeven.rules.model import (
    FloatArray,
    SpeculationModel,
    StepTimeModel,
    is_model_free,
    speculative_step_s,
)
from app.breakeven.rules.sweep import ConfigSweep, InvalidSweep, Sweep

_TOLERANCE = 1e-12


@dataclass(frozen=True, slots=True, kw_only=True)
class FittedParameter:
    """One fitted parameter with its standard error from the Jacobian at the optimum."""

    name: str
    value: float
    standard_error: float
    """``sqrt(diag(s^2 (J^T J)^+))``; NaN without residual degrees of freedom."""
    unit: str
    at_bound: bool
    """True when the optimum sits on a bound: the standard error then understates the doubt."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Slot:
    config: ConfigSweep
    cost_index: int
    acceptance_index: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepProblem:
    """The sweep laid out as arrays and a parameter vector, ready for least squares."""

    names: tuple[str, ...]
    units: tuple[str, ...]
    lower: tuple[float, ...]
    upper: tuple[float, ...]
    fit_per_sequence: bool
    slots: tuple[_Slot, ...]
    baseline_concurrency: tuple[float, ...]
    log_measured: tuple[float, ...]
    """Log throughput of every row: the baseline's first, then each config's, in slot order."""

    def unpack(self, theta: FloatArray) -> tuple[StepTimeModel, tuple[SpeculationModel, ...]]:
        """Models for a parameter vector; fitted acceptance uses the parameter, measured the mean."""
        step = StepTimeModel(
            floor_s=float(theta[0]),
            per_token_s=float(theta[1]),
            per_sequence_s=float(theta[2]) if self.fit_per_sequence else 0.0,
        )
        specs = []
        for slot in self.slots:
            cost = float(theta[slot.cost_index])
            model_free = is_model_free(slot.config.method)
            if slot.acceptance_index is None:
                assert slot.config.mean_acceptance_length is not None
                length = slot.config.mean_acceptance_length
            else:
                length = float(theta[slot.acceptance_index])
            specs.append(
                SpeculationModel(
                    k=slot.config.k,
                    mean_acceptance_length=length,
                    drafter_overhead_s=cost if model_free else 0.0,
                    draft_cost_ratio=0.0 if model_free else cost,
                )
            )
        return step, tuple(specs)

    def log_predicted(self, theta: FloatArray) -> FloatArray:
        """Log modelled throughput of every row, in the order of ``log_measured``."""
        step, specs = self.unpack(theta)
        base = np.asarray(self.baseline_concurrency)
        plain_s = step.step_s(concurrency=base, tokens_per_sequence=1.0)
        # Bounds keep parameters >= 0; the floor at 1e-300 only guards a zero step time.
        parts = [np.log(base / np.maximum(plain_s, 1e-300))]
        for slot, spec in zip(self.slots, specs, strict=True):
            batch = np.asarray(slot.config.concurrency)
            if slot.acceptance_index is None:
                lengths = np.asarray(slot.config.acceptance_lengths)
            else:
                lengths = np.full(batch.shape, spec.mean_acceptance_length)
            step_s = speculative_step_s(step, spec, concurrency=batch, k=spec.k)
            parts.append(np.log(batch * lengths / np.maximum(step_s, 1e-300)))
        return np.concatenate(parts)

    def residuals(self, theta: FloatArray, log_measured: FloatArray) -> FloatArray:
        """``log(predicted) - log(measured)`` for a parameter vector and measured throughputs."""
        return self.log_predicted(theta) - log_measured


def build_problem(sweep: Sweep, *, fit_per_sequence: bool) -> SweepProblem:
    """Lay out the parameters, bounds and rows of a validated sweep.

    Args:
        sweep: Validated sweep.
        fit_per_sequence: Also fit ``per_sequence_s``; needs measured acceptance everywhere.

    Returns:
        The least-squares problem.

    Raises:
        InvalidSweep: If ``fit_per_sequence`` is asked with a config lacking measured acceptance
            (the per-sequence cost and the acceptance length cannot both be estimated).
    """
    names = ["floor_s", "per_token_s"]
    units = ["s", "s/token"]
    lower, upper = [0.0, 0.0], [math.inf, math.inf]
    if fit_per_sequence:
        names.append("per_sequence_s")
        units.append("s/sequence")
        lower.append(0.0)
        upper.append(math.inf)
    slots = []
    for config in sweep.speculative:
        model_free = is_model_free(config.method)
        names.append(
            f"{config.config}.{'drafter_overhead_s' if model_free else 'draft_cost_ratio'}"
        )
        units.append("s" if model_free else "1")
        lower.append(0.0)
        upper.append(math.inf)
        cost_index = len(names) - 1
        acceptance_index = None
        if config.mean_acceptance_length is None:
            if fit_per_sequence:
                raise InvalidSweep(
                    config.config,
                    "fitting per_sequence_s needs a measured mean_acceptance_length or acceptance_rate",
                )
            names.append(f"{config.config}.mean_acceptance_length")
            units.append("tokens/step")
            lower.append(1.0)
            upper.append(config.k + 1.0)
            acceptance_index = len(names) - 1
        slots.append(_Slot(config=config, cost_index=cost_index, acceptance_index=acceptance_index))
    rows = [sweep.baseline.tokens_per_s, *(s.config.tokens_per_s for s in slots)]
    return SweepProblem(
        names=tuple(names),
        units=tuple(units),
        lower=tuple(lower),
        upper=tuple(upper),
        fit_per_sequence=fit_per_sequence,
        slots=tuple(slots),
        baseline_concurrency=sweep.baseline.concurrency,
        log_measured=tuple(math.log(r) for row in rows for r in row),
    )


def _starting_points(problem: SweepProblem, sweep: Sweep) -> list[FloatArray]:
    """Starts from a line through the baseline's step times ``B / throughput``."""
    batch = np.asarray(sweep.baseline.concurrency)
    step_s = batch / np.asarray(sweep.baseline.tokens_per_s)
    slope, intercept = np.polyfit(batch, step_s, 1)
    typical = float(np.mean(step_s))
    floor = max(float(intercept), 0.05 * typical)
    per_token = max(float(slope), 1e-3 * typical / float(np.mean(batch)))
    starts = []
    for share in (0.5, 0.25, 0.75):
        theta = [floor, per_token]
        if problem.fit_per_sequence:
            theta = [floor, 0.9 * per_token, 0.1 * per_token]
        for slot in problem.slots:
            theta.append(0.05 * floor if is_model_free(slot.config.method) else 0.05)
            if slot.acceptance_index is not None:
                theta.append(1.0 + share * slot.config.k)
        starts.append(np.asarray(theta, dtype=np.float64))
    has_fitted_acceptance = any(s.acceptance_index is not None for s in problem.slots)
    return starts if has_fitted_acceptance else starts[:1]


@dataclass(frozen=True, slots=True, kw_only=True)
class LeastSquaresFit:
    """Optimum, residuals and standard errors of one least-squares run."""

    theta: FloatArray
    residuals: FloatArray
    standard_errors: FloatArray
    at_bound: tuple[bool, ...]


def solve(
    problem: SweepProblem, log_measured: FloatArray, starts: list[FloatArray]
) -> LeastSquaresFit:
    """Run ``scipy.optimize.least_squares`` with bounds from each start; keep the best.

    Args:
        problem: The laid-out sweep.
        log_measured: Log throughputs to fit (the measured ones, or a bootstrap replicate).
        starts: Starting parameter vectors (clipped strictly inside the bounds).

    Returns:
        The best optimum, its residuals and Jacobian standard errors.
    """
    lower, upper = np.asarray(problem.lower), np.asarray(problem.upper)
    best = None
    for start in starts:
        finite_upper = np.isfinite(upper)
        span = np.where(finite_upper, upper - lower, np.maximum(np.abs(start), 1e-12))
        x0 = np.clip(
            start, lower + 1e-6 * span, np.where(finite_upper, upper - 1e-6 * span, np.inf)
        )
        result = least_squares(
            problem.residuals,
            x0,
            args=(log_measured,),
            bounds=(lower, upper),
            x_scale="jac",
            jac="3-point",
            ftol=_TOLERANCE,
            xtol=_TOLERANCE,
            gtol=_TOLERANCE,
        )
        if best is None or result.cost < best.cost:
            best = result
    assert best is not None
    rows, params = best.jac.shape
    dof = rows - params
    if dof > 0:
        variance = 2.0 * float(best.cost) / dof
        covariance = variance * np.linalg.pinv(best.jac.T @ best.jac)
        errors = np.sqrt(np.clip(np.diag(covariance), 0.0, None))
    else:
        errors = np.full(params, math.nan)
    return LeastSquaresFit(
        theta=np.asarray(best.x, dtype=np.float64),
        residuals=np.asarray(best.fun, dtype=np.float64),
        standard_errors=errors,
        at_bound=tuple(bool(flag != 0) for flag in best.active_mask),
    )


def fit_sweep(problem: SweepProblem, sweep: Sweep) -> LeastSquaresFit:
    """Fit the problem to the measured throughputs from a few starting points.

    Args:
        problem: The laid-out sweep (from :func:`build_problem`).
        sweep: The same validated sweep, for starting values.

    Returns:
        The least-squares optimum.
    """
    return solve(problem, np.asarray(problem.log_measured), _starting_points(problem, sweep))


def fitted_parameters(problem: SweepProblem, fit: LeastSquaresFit) -> tuple[FittedParameter, ...]:
    """Name, value, standard error, unit and bound flag of every parameter."""
    return tuple(
        FittedParameter(
            name=name,
            value=float(value),
            standard_error=float(error),
            unit=unit,
            at_bound=at_bound,
        )
        for name, value, error, unit, at_bound in zip(
            problem.names, fit.theta, fit.standard_errors, problem.units, fit.at_bound, strict=True
        )
    )
