"""Load-sweep points and their validation before a breakeven fit.

A sweep has one row per (speculation config, concurrency level), possibly repeated. Exactly one
config is the baseline (method ``none``); every other config speculates with a fixed ``k``.
Degenerate input raises :class:`InvalidSweep` naming the config and the problem: a fit on it
would be silent nonsense.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

from app.breakeven.rules.model import BASELINE_METHOD
from app.domain.errors import InvalidInput

MIN_CONCURRENCY_LEVELS = 3
_LENGTH_TOLERANCE = 1e-6


class InvalidSweep(InvalidInput):
    """A sweep cannot be fitted as given; ``config`` names the offending config, if any."""

    def __init__(self, config: str | None, problem: str) -> None:
        self.config = config
        self.problem = problem
        super().__init__(f"config {config!r}: {problem}" if config is not None else problem)


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepPoint:
    """One measured (config, concurrency) row of a load sweep, as in the sweep CSV."""

    config: str
    """Name of the speculation config, e.g. ``none`` or ``ngram-k4``."""
    method: str
    """vLLM speculative method, ``none`` for the baseline."""
    k: int
    """Drafted tokens per step (``num_speculative_tokens``); 0 for the baseline."""
    concurrency: int
    """Concurrent closed-loop sessions."""
    output_tokens_per_s: float
    """Output throughput over the measured window, tokens per second."""
    tpot_p50_s: float = math.nan
    """Median time per output token, seconds (kept for reports; the fit does not use it)."""
    acceptance_rate: float = math.nan
    """vLLM draft acceptance rate, accepted / drafted tokens; NaN when not measured."""
    mean_acceptance_length: float = math.nan
    """Tokens per step per sequence, bonus token included; NaN when not measured."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigSweep:
    """The validated rows of one config, in input order."""

    config: str
    method: str
    k: int
    concurrency: tuple[float, ...]
    tokens_per_s: tuple[float, ...]
    acceptance_lengths: tuple[float, ...]
    """Mean acceptance length per row; rows without one get the config's mean. Empty for the
    baseline and for configs whose acceptance was not measured."""
    mean_acceptance_length: float | None
    """Mean over the rows that measured it, or None: then the fit estimates it."""

    @property
    def levels(self) -> tuple[float, ...]:
        """Distinct concurrency levels, ascending."""
        return tuple(sorted(set(self.concurrency)))


@dataclass(frozen=True, slots=True, kw_only=True)
class Sweep:
    """A validated sweep: one baseline and at least one speculative config."""

    baseline: ConfigSweep
    speculative: tuple[ConfigSweep, ...]


def _check_point(point: SweepPoint) -> None:
    name = point.config
    if not isinstance(name, str) or not name.strip():
        raise InvalidSweep(None, f"a row has an empty config name: {point!r}")
    conc = point.concurrency
    if (
        isinstance(conc, bool)
        or not isinstance(conc, int | float)
        or not math.isfinite(conc)
        or conc < 1
    ):
        raise InvalidSweep(name, f"concurrency must be a number >= 1, got {conc!r}")
    rate = point.output_tokens_per_s
    if isinstance(rate, bool) or not isinstance(rate, int | float) or math.isnan(rate):
        raise InvalidSweep(name, f"output_tokens_per_s is NaN or missing at concurrency {conc:g}")
    if not math.isfinite(rate) or rate <= 0:
        raise InvalidSweep(
            name,
            f"output_tokens_per_s must be finite and > 0, got {rate!r} at concurrency {conc:g}",
        )
    k = point.k
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise InvalidSweep(name, f"k must be an integer >= 0, got {k!r}")
    if point.method.strip().lower() != BASELINE_METHOD and k < 1:
        raise InvalidSweep(name, f"method {point.method!r} speculates but k is {k}; k must be >= 1")


def _row_acceptance_length(point: SweepPoint) -> float:
    """The row's mean acceptance length, from vLLM's acceptance rate when only that was measured."""
    name, k = point.config, point.k
    length = point.mean_acceptance_length
    if math.isnan(length) and not math.isnan(point.acceptance_rate):
        rate = point.acceptance_rate
        if not (math.isfinite(rate) and 0.0 <= rate <= 1.0):
            raise InvalidSweep(name, f"acceptance_rate must lie in [0, 1], got {rate!r}")
        length = 1.0 + k * rate
    if math.isnan(length):
        return math.nan
    if not (
        math.isfinite(length) and 1.0 - _LENGTH_TOLERANCE <= length <= k + 1 + _LENGTH_TOLERANCE
    ):
        raise InvalidSweep(
            name,
            f"mean_acceptance_length must lie in [1, k+1] = [1, {k + 1}], got {length!r} "
            f"at concurrency {point.concurrency:g}",
        )
    return min(max(length, 1.0), k + 1.0)


def _build_config(name: str, rows: list[SweepPoint]) -> ConfigSweep:
    methods = {row.method.strip().lower() for row in rows}
    ks = {row.k for row in rows}
    if len(methods) > 1 or len(ks) > 1:
        raise InvalidSweep(
            name, f"rows disagree on method/k: methods {sorted(methods)}, k {sorted(ks)}"
        )
    method, k = methods.pop(), ks.pop()
    levels = sorted({float(row.concurrency) for row in rows})
    if len(levels) < MIN_CONCURRENCY_LEVELS:
        raise InvalidSweep(
            name,
            f"needs at least {MIN_CONCURRENCY_LEVELS} concurrency levels, got {len(levels)} "
            f"({', '.join(f'{c:g}' for c in levels)})",
        )
    lengths: tuple[float, ...] = ()
    mean_length: float | None = None
    if method != BASELINE_METHOD:
        per_row = [_row_acceptance_length(row) for row in rows]
        measured = [length for length in per_row if not math.isnan(length)]
        if measured:
            mean_length = math.fsum(measured) / len(measured)
            lengths = tuple(mean_length if math.isnan(x) else x for x in per_row)
    return ConfigSweep(
        config=name,
        method=method,
        k=k,
        concurrency=tuple(float(row.concurrency) for row in rows),
        tokens_per_s=tuple(float(row.output_tokens_per_s) for row in rows),
        acceptance_lengths=lengths,
        mean_acceptance_length=mean_length,
    )


def validate_sweep(points: Sequence[SweepPoint]) -> Sweep:
    """Group sweep rows by config and check that a breakeven fit can use them.

    Args:
        points: Sweep rows in any order; repeated (config, concurrency) rows are repeats.

    Returns:
        The baseline config and the speculative configs, in order of first appearance.

    Raises:
        InvalidSweep: On no rows; a NaN, infinite, zero or negative throughput; concurrency
            below 1; a negative k, or a speculative method with k = 0; rows of one config that
            disagree on method or k; fewer than three concurrency levels in a config; an
            acceptance length outside [1, k + 1]; no baseline (method ``none``) or more than
            one; no speculative config; a config whose concurrency range does not overlap the
            baseline's.
    """
    if not points:
        raise InvalidSweep(None, "the sweep has no rows")
    groups: dict[str, list[SweepPoint]] = {}
    for point in points:
        _check_point(point)
        groups.setdefault(point.config, []).append(point)
    configs = [_build_config(name, rows) for name, rows in groups.items()]
    baselines = [c for c in configs if c.method == BASELINE_METHOD]
    speculative = tuple(c for c in configs if c.method != BASELINE_METHOD)
    if not baselines:
        raise InvalidSweep(
            None,
            f"missing baseline: no config has method {BASELINE_METHOD!r} "
            f"(configs: {', '.join(repr(c.config) for c in configs)})",
        )
    if len(baselines) > 1:
        names = ", ".join(repr(c.config) for c in baselines)
        raise InvalidSweep(None, f"more than one baseline config with method 'none': {names}")
    if not speculative:
        raise InvalidSweep(None, "no speculative config to compare with the baseline")
    baseline = baselines[0]
    for config in speculative:
        low = max(baseline.levels[0], config.levels[0])
        high = min(baseline.levels[-1], config.levels[-1])
        if not low < high:
            raise InvalidSweep(
                config.config,
                f"concurrency range {config.levels[0]:g}-{config.levels[-1]:g} does not overlap "
                f"the baseline's {baseline.levels[0]:g}-{baseline.levels[-1]:g}",
            )
    return Sweep(baseline=baseline, speculative=speculative)
