"""What a serving tier costs per unit of work, with and without speculation, against load.

A tier is ``instances`` cloud instances, each holding ``replicas_per_instance`` model replicas
(tensor-parallel groups). Closed-loop sessions spread evenly over the replicas, so each replica
runs at ``concurrency / replicas`` and its throughput comes from a step-time model
(:mod:`app.breakeven.rules.model`). Then, with ``P`` the fleet's price per second:

* cost per 1K session-seconds ``= 1000 * P / concurrency``: every active session accrues one
  session-second per second. It depends only on what is provisioned; speculation changes it
  only through the replicas needed to meet a latency target.
* cost per 1M output tokens ``= 1e6 * P / tokens_per_s``: speculation changes it directly.

Money is in integer micro-units (rounded half to even); these are estimates from a model, not
ledger amounts. Step times for hardware that was never measured come from a roofline
(:func:`roofline_step_model`), calibrated against a published step-time fit.

Quoted figures are checked against these computed ones in :mod:`app.breakeven.rules.claims`.
"""

import math
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from app.breakeven.rules.model import (
    FloatArray,
    SpeculationModel,
    StepTimeModel,
    baseline_tokens_per_s,
    speculative_tokens_per_s,
)
from app.domain.errors import InvalidInput

IntArray = npt.NDArray[np.int64]

SECONDS_PER_HOUR = 3600.0


class SpeculationMode(StrEnum):
    """How a replica speculates: never, always with the configured k, or the best k per load."""

    none = "none"
    fixed = "fixed"
    dynamic = "dynamic"
    """vLLM's ``num_speculative_tokens_per_batch_size``: the best k in 0..k at each batch size."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TierCapacity:
    """What one tier provisions and what it costs."""

    instance_usd_micros_per_hour: int
    """On-demand price of one instance, USD micros per hour."""
    instances: int
    replicas_per_instance: int = 1
    max_concurrency_per_replica: int = 256
    """vLLM's ``max_num_seqs``: a replica never runs more sequences than this at once."""

    @property
    def replicas(self) -> int:
        """Model replicas in the fleet."""
        return self.instances * self.replicas_per_instance

    @property
    def usd_micros_per_hour(self) -> int:
        """Price of the whole fleet per hour."""
        return self.instances * self.instance_usd_micros_per_hour


@dataclass(frozen=True, slots=True, kw_only=True)
class CostCurve:
    """Throughput, latency and unit costs of one tier and mode, one entry per concurrency."""

    mode: SpeculationMode
    concurrency: FloatArray
    """Concurrent sessions over the whole fleet."""
    per_replica_concurrency: FloatArray
    k: IntArray
    """Drafted tokens per step chosen at each point (0 without speculation)."""
    tokens_per_s: FloatArray
    """Output tokens per second of the fleet."""
    tpot_s: FloatArray
    """Modelled time per output token of a request: step time over tokens per step."""
    usd_micros_per_1k_session_seconds: IntArray
    usd_micros_per_1m_tokens: IntArray


def roofline_step_model(
    *,
    params_billion: float,
    bytes_per_param: float,
    gpus: int,
    peak_tflops_per_gpu: float,
    hbm_tb_per_s_per_gpu: float,
    bandwidth_efficiency: float,
    compute_efficiency: float,
    step_overhead_s: float,
) -> StepTimeModel:
    """A step-time model for a dense model on GPUs that were not measured (roofline).

    A decode step reads every weight once (``floor_s``) and spends ``2 * params`` FLOPs per
    token it processes (``per_token_s``); ``gpus`` tensor-parallel GPUs share both. The
    efficiencies scale peak figures to what a real engine reaches (see reference/specdecode.md
    3.5-3.6: calibrating them against the published Llama-3.1-8B/H100 fit gives about 0.81 and
    0.77). KV-cache reads and tensor-parallel communication are not modelled.

    Args:
        params_billion: Parameters of the model, billions.
        bytes_per_param: 2 for bf16, 1 for fp8.
        gpus: Tensor-parallel GPUs of one replica, >= 1.
        peak_tflops_per_gpu: Dense peak of one GPU at the model's precision, TFLOPS.
        hbm_tb_per_s_per_gpu: Memory bandwidth of one GPU, TB/s.
        bandwidth_efficiency: Share of peak bandwidth reached, in (0, 1].
        compute_efficiency: Share of peak FLOPS reached, in (0, 1].
        step_overhead_s: Per-step cost independent of model size (scheduling, launches).

    Returns:
        The step-time model of one replica.

    Raises:
        InvalidInput: If a figure is not positive or an efficiency exceeds 1.
    """
    positives = {
        "params_billion": params_billion,
        "bytes_per_param": bytes_per_param,
        "gpus": gpus,
        "peak_tflops_per_gpu": peak_tflops_per_gpu,
        "hbm_tb_per_s_per_gpu": hbm_tb_per_s_per_gpu,
    }
    for name, value in positives.items():
        if not (math.isfinite(value) and value > 0):
            raise InvalidInput(f"{name} must be finite and > 0, got {value!r}")
    for name, value in (
        ("bandwidth_efficiency", bandwidth_efficiency),
        ("compute_efficiency", compute_efficiency),
    ):
        if not 0.0 < value <= 1.0:
            raise InvalidInput(f"{name} must lie in (0, 1], got {value!r}")
    if not (math.isfinite(step_overhead_s) and step_overhead_s >= 0):
        raise InvalidInput(f"step_overhead_s must be finite and >= 0, got {step_overhead_s!r}")
    params = params_billion * 1e9
    weights_s = (
        params * bytes_per_param / (gpus * hbm_tb_per_s_per_gpu * 1e12 * bandwidth_efficiency)
    )
    per_token_s = 2.0 * params / (gpus * peak_tflops_per_gpu * 1e12 * compute_efficiency)
    return StepTimeModel(floor_s=weights_s + step_overhead_s, per_token_s=per_token_s)


def draft_cost_ratio(*, draft: StepTimeModel, target: StepTimeModel) -> float:
    """Leviathan's ``c``: one draft-model step over one target step, both at batch one."""
    draft_s = float(draft.step_s(concurrency=1.0, tokens_per_sequence=1.0))
    target_s = float(target.step_s(concurrency=1.0, tokens_per_sequence=1.0))
    return draft_s / target_s


def _micros(values: FloatArray) -> IntArray:
    # np.rint rounds half to even, as the rest of the money code does.
    return np.rint(values).astype(np.int64)


def _chosen_k(
    step: StepTimeModel, spec: SpeculationModel | None, mode: SpeculationMode, batch: FloatArray
) -> IntArray:
    if spec is None or mode is SpeculationMode.none:
        return np.zeros(batch.shape, dtype=np.int64)
    if mode is SpeculationMode.fixed:
        return np.full(batch.shape, spec.k, dtype=np.int64)
    rates = np.vstack(
        [speculative_tokens_per_s(step, spec, concurrency=batch, k=k) for k in range(spec.k + 1)]
    )
    best = rates.max(axis=0)
    return np.asarray(np.argmax(rates >= best * (1.0 - 1e-12), axis=0), dtype=np.int64)


def replica_performance(
    step: StepTimeModel,
    spec: SpeculationModel | None,
    *,
    mode: SpeculationMode,
    per_replica_concurrency: FloatArray,
) -> tuple[IntArray, FloatArray, FloatArray]:
    """k, output tokens per second and TPOT of one replica at each concurrency.

    Args:
        step: Step-time model of one replica.
        spec: The speculative configuration; None (or mode ``none``) decodes plainly.
        mode: Never, always, or best-k-per-batch speculation.
        per_replica_concurrency: Sequences in the replica's batch, > 0.

    Returns:
        ``(k, tokens_per_s, tpot_s)`` arrays shaped like ``per_replica_concurrency``.
    """
    batch = np.asarray(per_replica_concurrency, dtype=np.float64)
    ks = _chosen_k(step, spec, mode, batch)
    tokens = np.empty(batch.shape)
    tpot = np.empty(batch.shape)
    for k in np.unique(ks):
        where = ks == k
        if spec is None or k == 0:
            step_s = step.step_s(concurrency=batch[where], tokens_per_sequence=1.0)
            tokens[where] = baseline_tokens_per_s(step, concurrency=batch[where])
            tpot[where] = step_s
        else:
            rate = speculative_tokens_per_s(step, spec, concurrency=batch[where], k=int(k))
            tokens[where] = rate
            # Each sequence emits E tokens per step: TPOT = step / E = batch / throughput.
            tpot[where] = batch[where] / rate
    return ks, tokens, tpot


def cost_curve(
    step: StepTimeModel,
    spec: SpeculationModel | None,
    capacity: TierCapacity,
    *,
    concurrency: FloatArray,
    mode: SpeculationMode,
) -> CostCurve:
    """Unit costs of a tier against total concurrency, sessions spread evenly over replicas.

    Args:
        step: Step-time model of one replica.
        spec: The speculative configuration (unused for mode ``none``).
        capacity: What the tier provisions and its price.
        concurrency: Concurrent sessions over the whole fleet, each > 0.
        mode: Never, always, or best-k-per-batch speculation.

    Returns:
        The curve; points above the replicas' ``max_concurrency_per_replica`` are modelled as
        if the batch could grow (callers check :func:`fits_capacity`).

    Raises:
        InvalidInput: If a concurrency is not positive or the tier has no replica.
    """
    sessions = np.asarray(concurrency, dtype=np.float64)
    if sessions.size == 0 or not np.all(np.isfinite(sessions) & (sessions > 0)):
        raise InvalidInput("concurrency must be finite and > 0")
    if capacity.replicas < 1 or capacity.instance_usd_micros_per_hour < 0:
        raise InvalidInput("a tier needs at least one replica and a non-negative price")
    if mode is not SpeculationMode.none and spec is None:
        raise InvalidInput(f"mode {mode.value!r} needs a speculative configuration")
    per_replica = sessions / capacity.replicas
    ks, replica_tokens, tpot = replica_performance(
        step, spec, mode=mode, per_replica_concurrency=per_replica
    )
    fleet_tokens = replica_tokens * capacity.replicas
    per_second = capacity.usd_micros_per_hour / SECONDS_PER_HOUR
    return CostCurve(
        mode=mode,
        concurrency=sessions,
        per_replica_concurrency=per_replica,
        k=ks,
        tokens_per_s=fleet_tokens,
        tpot_s=tpot,
        usd_micros_per_1k_session_seconds=_micros(1000.0 * per_second / sessions),
        usd_micros_per_1m_tokens=_micros(1e6 * per_second / fleet_tokens),
    )


def fits_capacity(capacity: TierCapacity, *, concurrency: float) -> bool:
    """Whether ``concurrency`` sessions fit the replicas' batch limit (``max_num_seqs``)."""
    return math.ceil(concurrency / capacity.replicas) <= capacity.max_concurrency_per_replica


def tpot_at(
    step: StepTimeModel,
    spec: SpeculationModel | None,
    capacity: TierCapacity,
    *,
    concurrency: float,
    mode: SpeculationMode,
) -> float:
    """Modelled TPOT of the busiest replica: sessions do not split, so it holds ``ceil(N/R)``."""
    busiest = np.asarray([float(math.ceil(concurrency / capacity.replicas))])
    _, _, tpot = replica_performance(step, spec, mode=mode, per_replica_concurrency=busiest)
    return float(tpot[0])


def cost_breakeven_concurrency(
    step: StepTimeModel,
    spec: SpeculationModel,
    capacity: TierCapacity,
    *,
    low: float,
    high: float,
    points: int = 2001,
) -> float | None:
    """Fleet concurrency in ``[low, high]`` where fixed-k speculation stops lowering $/1M tokens.

    The fleet price is the same in both modes, so this is where the fleet's throughputs cross,
    found on a log grid and refined linearly (enough for a report; the throughput breakeven of
    :func:`app.breakeven.rules.model.breakeven_concurrency` is the exact one per replica).

    Returns:
        The first crossing from "speculation cheaper" to "plain cheaper", or None when the sign
        does not change on the range.

    Raises:
        InvalidInput: If the range is empty or not positive.
    """
    if not (0.0 < low < high and math.isfinite(high)):
        raise InvalidInput(f"concurrency range must satisfy 0 < low < high, got [{low}, {high}]")
    grid = np.exp(np.linspace(math.log(low), math.log(high), points))
    per_replica = grid / capacity.replicas
    plain = baseline_tokens_per_s(step, concurrency=per_replica)
    fast = speculative_tokens_per_s(step, spec, concurrency=per_replica)
    gap = np.log(fast / plain)
    sign_change = np.nonzero((gap[:-1] > 0) & (gap[1:] <= 0))[0]
    if sign_change.size == 0:
        return None
    i = int(sign_change[0])
    x0, x1 = math.log(grid[i]), math.log(grid[i + 1])
    y0, y1 = float(gap[i]), float(gap[i + 1])
    return math.exp(x0 + (x1 - x0) * y0 / (y0 - y1)) if y0 != y1 else float(grid[i])
