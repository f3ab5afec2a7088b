"""Step-time model of speculative decoding under load, and what follows from it.

The target model's decode step with ``B`` sequences in the batch and ``n`` tokens per sequence
takes (a roofline in two terms, see reference/specdecode.md section 3.5-3.6)::

    t(B, n) = floor_s + per_sequence_s * B + per_token_s * B * n

``floor_s`` is the memory-bound part (weights read once per step, scheduler and launch overhead);
it dominates at small ``B`` and is why throughput is not linear in concurrency there.
``per_token_s`` is the compute for each token the step processes. ``per_sequence_s`` (KV-cache
reads, sampling, the scheduler's per-request work) is paid once per sequence however many
tokens it verifies. It is identifiable from one ``k`` when acceptance is measured: the
baseline's step grows by ``per_sequence_s + per_token_s`` per sequence, a speculative step by
``per_sequence_s + (k + 1) * per_token_s``. Leaving it out makes verification look too dear and
the modelled speedup fall too steeply with load (on the CPU sweep in ``examples/`` it moved
the modelled breakeven from 19 to 29 against a measured crossing at 31).

Plain decoding runs ``t(B, 1)`` per step and emits one token per sequence. Speculation with ``k``
drafted tokens verifies ``k + 1`` tokens per sequence, pays the drafter, and emits
``E(alpha, k) = 1 + alpha + ... + alpha**k`` tokens per sequence (Leviathan et al. 2023)::

    t_spec(B, k) = t(B, k + 1) + drafter_overhead_s + k * draft_cost_ratio * t(B, 1)

A model-free drafter (ngram) costs a small batch-independent ``drafter_overhead_s``; a draft
model costs ``draft_cost_ratio`` (the paper's ``c``) of a one-token target step per drafted
token. Output throughput at concurrency ``B`` is ``B * E / t``, so the speedup is
``E * t(B, 1) / t_spec(B, k)``; at ``B -> 0`` it tends to Leviathan's batch-one speedup.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
from scipy.optimize import brentq

from app.breakeven.rules.speculation import alpha_from_acceptance_length, draft_acceptance_rate
from app.domain.errors import InvalidInput, NoBreakeven

FloatArray = npt.NDArray[np.float64]

BASELINE_METHOD = "none"
MODEL_FREE_METHODS = frozenset({"ngram", "ngram_gpu", "suffix", "prompt_lookup"})
"""Drafters without a neural network: their cost is a per-step overhead, not a ratio ``c``."""


def is_model_free(method: str) -> bool:
    """Whether a vLLM speculative method drafts without running a model (ngram, suffix)."""
    return method.strip().lower() in MODEL_FREE_METHODS


@dataclass(frozen=True, slots=True, kw_only=True)
class StepTimeModel:
    """Decode step time of the target model: ``floor_s + per_sequence_s*B + per_token_s*B*n``."""

    floor_s: float
    """Batch-independent part of a step, seconds (the memory-bound floor)."""
    per_token_s: float
    """Seconds per token processed in the step (verified tokens count)."""
    per_sequence_s: float = 0.0
    """Seconds per sequence in the batch, independent of its tokens (KV reads, sampling)."""

    def step_s(self, *, concurrency: FloatArray | float, tokens_per_sequence: float) -> FloatArray:
        """Step time in seconds for ``concurrency`` sequences of ``tokens_per_sequence`` tokens."""
        batch = np.asarray(concurrency, dtype=np.float64)
        per_sequence = self.per_sequence_s + self.per_token_s * tokens_per_sequence
        return self.floor_s + per_sequence * batch


@dataclass(frozen=True, slots=True, kw_only=True)
class SpeculationModel:
    """One speculative configuration: its k, its acceptance and its drafter's cost."""

    k: int
    """Drafted tokens per sequence per step (vLLM's ``num_speculative_tokens``), >= 1."""
    mean_acceptance_length: float
    """Tokens emitted per sequence per step, bonus token included, in [1, k + 1]."""
    drafter_overhead_s: float = 0.0
    """Seconds per step for drafting, independent of batch and k (model-free drafters)."""
    draft_cost_ratio: float = 0.0
    """Draft model run time per drafted token over a one-token target step (Leviathan's c)."""

    @property
    def alpha(self) -> float:
        """Per-token acceptance rate implied by the mean acceptance length (i.i.d. positions)."""
        return alpha_from_acceptance_length(
            mean_acceptance_length=self.mean_acceptance_length, k=self.k
        )


class ScheduleBand(NamedTuple):
    """One entry of vLLM's ``num_speculative_tokens_per_batch_size``: ``[start, end, k]``.

    ``start`` and ``end`` are batch sizes, both inclusive; ``k == 0`` turns speculation off.
    A tuple so that it serializes as the JSON list vLLM expects.
    """

    start: int
    end: int
    k: int


@dataclass(frozen=True, slots=True, kw_only=True)
class AcceptanceNeed:
    """Acceptance that a speculative configuration needs to break even at one concurrency."""

    concurrency: float
    mean_acceptance_length: float
    """Required tokens per step; above ``k + 1`` no acceptance rate is enough."""
    alpha: float | None
    """Required per-token acceptance rate, or None when even alpha = 1 does not break even."""
    draft_acceptance_rate: float | None
    """The same need in vLLM's accepted/drafted terms, or None when unattainable."""


def baseline_tokens_per_s(step: StepTimeModel, *, concurrency: FloatArray | float) -> FloatArray:
    """Output tokens per second without speculation: ``B / t(B, 1)``."""
    batch = np.asarray(concurrency, dtype=np.float64)
    return batch / step.step_s(concurrency=batch, tokens_per_sequence=1.0)


def _tokens_per_step(spec: SpeculationModel, k: int) -> float:
    if k == spec.k:
        return spec.mean_acceptance_length
    alpha = spec.alpha
    return math.fsum(alpha**i for i in range(k + 1))


def speculative_step_s(
    step: StepTimeModel, spec: SpeculationModel, *, concurrency: FloatArray | float, k: int
) -> FloatArray:
    """Step time in seconds with ``k`` drafted tokens per sequence (``k == 0``: plain step)."""
    batch = np.asarray(concurrency, dtype=np.float64)
    verify = step.step_s(concurrency=batch, tokens_per_sequence=k + 1.0)
    if k == 0:
        return verify
    draft = k * spec.draft_cost_ratio * step.step_s(concurrency=batch, tokens_per_sequence=1.0)
    return verify + spec.drafter_overhead_s + draft


def speculative_tokens_per_s(
    step: StepTimeModel,
    spec: SpeculationModel,
    *,
    concurrency: FloatArray | float,
    k: int | None = None,
) -> FloatArray:
    """Output tokens per second with speculation: ``B * E(alpha, k) / t_spec(B, k)``.

    Args:
        step: Target step-time model.
        spec: Speculative configuration.
        concurrency: Sequences in the batch (scalar or array).
        k: Drafted tokens; defaults to ``spec.k``. Other values reuse the configuration's alpha.

    Returns:
        Tokens per second, same shape as ``concurrency``.
    """
    drafted = spec.k if k is None else k
    batch = np.asarray(concurrency, dtype=np.float64)
    step_s = speculative_step_s(step, spec, concurrency=batch, k=drafted)
    return batch * _tokens_per_step(spec, drafted) / step_s


def speedup(
    step: StepTimeModel, spec: SpeculationModel, *, concurrency: FloatArray | float
) -> FloatArray:
    """Speculative over plain output throughput at the same concurrency."""
    plain = baseline_tokens_per_s(step, concurrency=concurrency)
    return speculative_tokens_per_s(step, spec, concurrency=concurrency) / plain


def _speedup_at(step: StepTimeModel, spec: SpeculationModel, concurrency: float) -> float:
    return float(speedup(step, spec, concurrency=concurrency))


def breakeven_concurrency(
    step: StepTimeModel, spec: SpeculationModel, *, low: float, high: float
) -> float:
    """Concurrency in ``[low, high]`` where the modelled speedup equals 1.

    Args:
        step: Target step-time model.
        spec: Speculative configuration.
        low: Smallest concurrency considered, > 0.
        high: Largest concurrency considered, > ``low``.

    Returns:
        The crossing, found with ``scipy.optimize.brentq`` after checking the bracket.

    Raises:
        InvalidInput: If the range is empty or not positive.
        NoBreakeven: If the speedup minus one has the same sign at both ends.
    """
    if not (0.0 < low < high and math.isfinite(high)):
        raise InvalidInput(f"concurrency range must satisfy 0 < low < high, got [{low}, {high}]")
    at_low = _speedup_at(step, spec, low) - 1.0
    at_high = _speedup_at(step, spec, high) - 1.0
    if at_low == 0.0:
        return low
    if at_high == 0.0:
        return high
    if (at_low > 0.0) == (at_high > 0.0):
        raise NoBreakeven(
            f"speedup stays {'above' if at_low > 0 else 'below'} 1 on [{low:g}, {high:g}]: "
            f"{at_low + 1:.4f} at {low:g}, {at_high + 1:.4f} at {high:g}"
        )
    # Solve on log(B): the curve is close to a logistic there, so brentq converges fast.
    root = brentq(
        lambda x: _speedup_at(step, spec, math.exp(x)) - 1.0,
        math.log(low),
        math.log(high),
        xtol=1e-12,
    )
    return math.exp(float(root))


def inflection_concurrency(
    step: StepTimeModel, spec: SpeculationModel, *, low: float, high: float, grid_points: int = 801
) -> float | None:
    """Inflection point of the speedup curve on a log-concurrency axis, found numerically.

    With ``x = log(B)``, the inflection is where ``d2S/dx2 = 0``. The curve is sigmoid-like in
    ``x``, so the point is taken where ``|dS/dx|`` peaks on a grid and refined with brentq on a
    central-difference second derivative. For the linear step model it lies at the knee
    ``B = t_spec(0) / (dt_spec/dB)``, where the verify step's compute equals its floor.

    Args:
        step: Target step-time model.
        spec: Speculative configuration.
        low: Smallest concurrency searched, > 0.
        high: Largest concurrency searched, > ``low``.
        grid_points: Grid resolution on ``log(B)``.

    Returns:
        The concurrency of steepest descent, or None when the slope peaks at an end of the range
        (no inflection inside it, or a flat curve).

    Raises:
        InvalidInput: If the range is empty or not positive.
    """
    if not (0.0 < low < high and math.isfinite(high)):
        raise InvalidInput(f"concurrency range must satisfy 0 < low < high, got [{low}, {high}]")
    h = 1e-4

    def curve(x: FloatArray | float) -> FloatArray:
        return speedup(step, spec, concurrency=np.exp(x))

    def second(x: float) -> float:
        return float((curve(x + h) - 2.0 * curve(x) + curve(x - h)) / (h * h))

    xs = np.linspace(math.log(low), math.log(high), grid_points)
    slope = np.abs((curve(xs + h) - curve(xs - h)) / (2.0 * h))
    peak = int(np.argmax(slope))
    if peak in (0, grid_points - 1) or slope[peak] <= 1e-9 * max(1.0, float(np.max(curve(xs)))):
        return None
    left, right = float(xs[peak - 1]), float(xs[peak + 1])
    if (second(left) > 0.0) == (second(right) > 0.0):
        return math.exp(float(xs[peak]))
    return math.exp(float(brentq(second, left, right, xtol=1e-10)))


def acceptance_needed(
    step: StepTimeModel,
    spec: SpeculationModel,
    *,
    concurrency: float,
    target_speedup: float = 1.0,
) -> AcceptanceNeed:
    """Smallest acceptance at which the configuration's ``k`` reaches ``target_speedup`` (1:
    breaks even) at ``concurrency``.

    Speedup is ``E * t(B, 1) / t_spec(B, k)`` and ``t_spec`` does not depend on acceptance, so
    the need is ``E = target * t_spec / t`` tokens per step, turned into alpha by inverting
    equation 1.

    Args:
        step: Target step-time model.
        spec: Speculative configuration (its acceptance is not used, its costs are).
        concurrency: Sequences in the batch, > 0.
        target_speedup: Speedup over plain decoding to reach, > 0.

    Returns:
        The required mean acceptance length, alpha and vLLM draft acceptance rate.
    """
    plain = float(step.step_s(concurrency=concurrency, tokens_per_sequence=1.0))
    spec_s = float(speculative_step_s(step, spec, concurrency=concurrency, k=spec.k))
    needed = max(1.0, target_speedup * spec_s / plain)
    if needed > spec.k + 1:
        return AcceptanceNeed(
            concurrency=concurrency,
            mean_acceptance_length=needed,
            alpha=None,
            draft_acceptance_rate=None,
        )
    return AcceptanceNeed(
        concurrency=concurrency,
        mean_acceptance_length=needed,
        alpha=alpha_from_acceptance_length(mean_acceptance_length=needed, k=spec.k),
        draft_acceptance_rate=draft_acceptance_rate(mean_acceptance_length=needed, k=spec.k),
    )


def speculation_schedule(
    step: StepTimeModel, spec: SpeculationModel, *, max_k: int, max_batch_size: int
) -> tuple[ScheduleBand, ...]:
    """Best k for every batch size, as vLLM's ``num_speculative_tokens_per_batch_size`` bands.

    For each batch size ``B`` in ``1..max_batch_size``, picks the ``k`` in ``0..max_k`` with the
    highest modelled throughput (vLLM Dynamic SD's goodput rule, with the fitted step model in
    place of profiled ITLs); ties go to the smaller k, so ``k = 0`` wins where no k pays.
    Acceptance for other k follows from the configuration's alpha.

    Args:
        step: Target step-time model.
        spec: Speculative configuration.
        max_k: Largest k considered, >= 0.
        max_batch_size: Largest batch size covered, >= 1 (vLLM's ``max_num_seqs``).

    Returns:
        Contiguous bands ``(start, end, k)`` covering ``1..max_batch_size``, ends inclusive.

    Raises:
        InvalidInput: If ``max_k < 0`` or ``max_batch_size < 1``.
    """
    if max_k < 0 or max_batch_size < 1:
        raise InvalidInput(
            f"need max_k >= 0 and max_batch_size >= 1, got {max_k}, {max_batch_size}"
        )
    batch = np.arange(1, max_batch_size + 1, dtype=np.float64)
    rates = np.vstack(
        [speculative_tokens_per_s(step, spec, concurrency=batch, k=k) for k in range(max_k + 1)]
    )
    # A relative margin keeps float noise from flipping exact ties away from the smaller k.
    best = rates.max(axis=0)
    chosen = np.argmax(rates >= best * (1.0 - 1e-12), axis=0)
    bands: list[ScheduleBand] = []
    start = 1
    for index in range(1, max_batch_size + 1):
        last = index == max_batch_size
        if last or chosen[index] != chosen[index - 1]:
            bands.append(ScheduleBand(start=start, end=index, k=int(chosen[index - 1])))
            start = index + 1
    return tuple(bands)


def raise_bands(bands: Sequence[ScheduleBand], min_k: int) -> tuple[ScheduleBand, ...]:
    """Bands with every k below ``min_k`` raised to it, adjacent bands of equal k merged."""
    merged: list[ScheduleBand] = []
    for band in bands:
        k = max(band.k, min_k)
        if merged and merged[-1].k == k and merged[-1].end + 1 == band.start:
            merged[-1] = ScheduleBand(start=merged[-1].start, end=band.end, k=k)
        else:
            merged.append(ScheduleBand(start=band.start, end=band.end, k=k))
    return tuple(merged)
