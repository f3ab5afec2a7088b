"""Exact splitting of money by weights: largest remainder in integer micros.

Two forms with the same result: :func:`split_by_weight` for one amount held in a mapping, and
:func:`split_by_weight_arrays` for many amounts at once (numpy, for a month of requests).
:func:`allocate_hour` and :func:`allocate_hours_arrays` apply them to the allocation of one
deployment-hour described in DESIGN.md ("Allocation").

Rounding rule, shared by every function here:

* The magnitude ``|total|`` is split and the sign applied afterwards, so splitting ``-X``
  gives exactly the negation of splitting ``+X`` (credits mirror charges).
* Each part starts at the floor of its exact share; the micros left over go, one each, to the
  parts with the largest remainders. Ties go to the smaller key (mapping form) or to the
  earlier row (array form). Every part is therefore within one micro of its exact share and
  the parts add up to the total exactly.
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Protocol, TypeVar

import numpy as np
from numpy.typing import NDArray

from app.domain.errors import EmptyAllocationBasis, InvalidInput

__all__ = [
    "FAST_PATH_MAX_GROUP_WEIGHT",
    "HourAllocation",
    "HourAllocationArrays",
    "allocate_hour",
    "allocate_hours_arrays",
    "split_by_weight",
    "split_by_weight_arrays",
]


class _Orderable(Protocol):
    def __lt__(self, other: Any, /) -> bool: ...


K = TypeVar("K", bound=_Orderable)

FAST_PATH_MAX_GROUP_WEIGHT = 2**56 - 1
"""Largest weight sum of one group that :func:`split_by_weight_arrays` splits in int64 numpy.

Groups above it (or with a total of exactly ``-2**63``) are split with Python integers, one
group at a time; the result is the same, only slower (about a microsecond per row).
"""

_INT64_MIN = -(2**63)
_FLOAT_SUM_SAFE = float(2**62)


def split_by_weight(total_micros: int, weights: Mapping[K, int | Fraction]) -> dict[K, int]:
    """Split an amount across keys in proportion to non-negative weights.

    Uses the largest-remainder method on the magnitude, so the parts always add up to
    ``total_micros`` and a negative total (a credit or refund) splits as the mirror image of
    the positive one.

    Args:
        total_micros: Amount to split, in micros; negative for credits. Any Python int.
        weights: Driver quantity per key (e.g. GPU-microseconds per request). Exact
            ``Fraction`` weights are accepted; floats are converted exactly. Keys must be
            mutually orderable (they break ties between equal remainders).

    Returns:
        Micros per key with a positive weight, each within one micro of
        ``total_micros * weight / sum(weights)``. Keys with zero weight are omitted.

    Raises:
        EmptyAllocationBasis: If no weight is positive (even when the total is zero).
        InvalidInput: If a weight is negative or not finite.
    """
    basis = _integer_weights(weights)
    denominator = sum(basis.values())
    if denominator == 0:
        raise EmptyAllocationBasis(f"no positive weight among {len(weights)} keys")
    magnitude = abs(total_micros)
    parts: dict[K, int] = {}
    remainders: dict[K, int] = {}
    for key, weight in basis.items():
        parts[key], remainders[key] = divmod(magnitude * weight, denominator)
    leftover = magnitude - sum(parts.values())
    if leftover:
        for key in sorted(remainders, key=lambda k: (-remainders[k], k))[:leftover]:
            parts[key] += 1
    if total_micros < 0:
        return {key: -part for key, part in parts.items()}
    return parts


def _integer_weights(weights: Mapping[K, int | Fraction]) -> dict[K, int]:
    """Positive weights scaled to integers with the same ratios (zero weights dropped)."""
    exact: dict[K, Fraction | int] = {}
    for key, weight in weights.items():
        if isinstance(weight, int):
            value: Fraction | int = int(weight)
        else:
            try:
                value = Fraction(weight)
            except (ValueError, OverflowError, TypeError):
                raise InvalidInput(
                    f"weight for {key!r} is not a finite number: {weight!r}"
                ) from None
        if value < 0:
            raise InvalidInput(f"weight for {key!r} is negative: {weight!r}")
        if value > 0:
            exact[key] = value
    scale = math.lcm(*(v.denominator for v in exact.values() if isinstance(v, Fraction)))
    if scale == 1:
        return {key: int(v) for key, v in exact.items()}
    return {key: int(v * scale) for key, v in exact.items()}


def split_by_weight_arrays(
    totals_micros: NDArray[np.integer[Any]],
    group_index: NDArray[np.integer[Any]],
    weights: NDArray[np.integer[Any]],
) -> NDArray[np.int64]:
    """Split many amounts at once, each across the rows of its group, exactly.

    Row ``i`` belongs to group ``group_index[i]`` and receives a share of
    ``totals_micros[group_index[i]]`` proportional to ``weights[i]``. The result equals
    :func:`split_by_weight` applied to each group with the row positions as keys (ties go to
    the earlier row), so sort rows by a stable key first if the tie-break must not depend on
    the input order.

    Bounds (all arithmetic is exact integer arithmetic; no float rounding reaches a result):

    * totals are int64, weights are non-negative int64;
    * a group whose weight sum is at most :data:`FAST_PATH_MAX_GROUP_WEIGHT` (2**56 - 1,
      about 7.2e16: 2,283 GPU-years in microseconds, 2.3 GPU-years in nanoseconds) is split
      in vectorised int64 arithmetic: ``|total| * w`` is reduced as ``(|total| // W) * w``
      plus ``(|total| % W) * w / W``, and the second product (up to 2**112) is divided
      with a float estimate corrected exactly in wrapping 64-bit arithmetic;
    * larger groups, and totals of exactly ``-2**63``, fall back to Python integers per
      group (same result, slower).

    Cost is one ``lexsort`` of the rows plus a few linear passes: about half a second per
    million rows on one core.

    Args:
        totals_micros: Amount per group, in micros; negative for credits. Shape ``(n_groups,)``.
        group_index: Group of each row, in ``[0, n_groups)``. Shape ``(n_rows,)``.
        weights: Non-negative integer weight of each row (e.g. GPU-microseconds).
            Shape ``(n_rows,)``.

    Returns:
        Micros per row (int64, shape ``(n_rows,)``); the rows of each group add up to that
        group's total exactly.

    Raises:
        EmptyAllocationBasis: If a group has no row with a positive weight.
        InvalidInput: If the arrays have the wrong shape or dtype, a weight is negative, or a
            group index is out of range.
    """
    totals = _as_int64(totals_micros, "totals_micros")
    groups = _as_int64(group_index, "group_index")
    w = _as_int64(weights, "weights")
    n_groups, n_rows = totals.shape[0], w.shape[0]
    if groups.shape[0] != n_rows:
        raise InvalidInput(f"group_index has {groups.shape[0]} rows, weights {n_rows}")
    if n_rows and (groups.min() < 0 or groups.max() >= n_groups):
        raise InvalidInput(f"group_index outside [0, {n_groups})")
    if n_rows and w.min() < 0:
        raise InvalidInput("weights must be non-negative")

    sum_float = np.zeros(n_groups, dtype=np.float64)
    np.add.at(sum_float, groups, w.astype(np.float64))
    empty = np.flatnonzero(sum_float == 0)
    if empty.size:
        raise EmptyAllocationBasis(
            f"{empty.size} group(s) without a positive weight, e.g. {empty[:5].tolist()}"
        )
    # The float sum only decides whether the int64 sum can be trusted (no wrap-around).
    sum_int = np.zeros(n_groups, dtype=np.int64)
    np.add.at(sum_int, groups, np.where(sum_float[groups] < _FLOAT_SUM_SAFE, w, 0))
    slow_group = (
        (sum_float >= _FLOAT_SUM_SAFE)
        | (sum_int > FAST_PATH_MAX_GROUP_WEIGHT)
        | (totals == _INT64_MIN)
    )
    slow_row = slow_group[groups]

    magnitude = np.where(slow_group, 0, np.abs(np.where(slow_group, 0, totals)))
    basis = np.where(slow_group, 1, sum_int)
    a, big_w = magnitude[groups], basis[groups]
    row_w = np.where(slow_row, 0, w)
    whole, part_a = np.divmod(a, big_w)
    quotient, remainder = _muldivmod(part_a, row_w, big_w)
    parts = whole * row_w + quotient

    given = np.zeros(n_groups, dtype=np.int64)
    np.add.at(given, groups, parts)
    leftover = magnitude - given
    # Rows sorted by group, then remainder descending; lexsort is stable, so ties keep row order.
    order = np.lexsort((-remainder, groups))
    counts = np.bincount(groups, minlength=n_groups)
    group_start = np.concatenate(([0], np.cumsum(counts)[:-1]))
    sorted_groups = groups[order]
    rank = np.arange(n_rows) - group_start[sorted_groups]
    parts[order] += (rank < leftover[sorted_groups]).astype(np.int64)
    parts *= np.sign(totals)[groups]

    if slow_row.any():
        _split_slow_groups(parts, totals, groups, w, np.flatnonzero(slow_row))
    return parts


def _split_slow_groups(
    parts: NDArray[np.int64],
    totals: NDArray[np.int64],
    groups: NDArray[np.int64],
    weights: NDArray[np.int64],
    rows: NDArray[np.intp],
) -> None:
    """Fill ``parts`` for the given rows with Python-int splits, one call per group."""
    rows = rows[np.argsort(groups[rows], kind="stable")]
    cuts = np.flatnonzero(np.diff(groups[rows])) + 1
    for segment in np.split(rows, cuts):
        keys = segment.tolist()
        split = split_by_weight(
            int(totals[groups[segment[0]]]), dict(zip(keys, weights[segment].tolist(), strict=True))
        )
        parts[segment] = [split.get(key, 0) for key in keys]


def _as_int64(array: NDArray[np.integer[Any]], name: str) -> NDArray[np.int64]:
    values = np.asarray(array)
    if values.ndim != 1:
        raise InvalidInput(f"{name} must be one-dimensional, got shape {values.shape}")
    if values.size == 0:
        return values.astype(np.int64)
    if not np.issubdtype(values.dtype, np.integer):
        raise InvalidInput(f"{name} must hold integers, got {values.dtype}")
    if values.dtype == np.uint64 and values.max() > np.iinfo(np.int64).max:
        raise InvalidInput(f"{name} exceeds int64")
    return values.astype(np.int64, copy=False)


def _muldivmod(
    x: NDArray[np.int64], y: NDArray[np.int64], m: NDArray[np.int64]
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Exact ``divmod(x * y, m)`` for ``0 <= x < m``, ``0 <= y <= m``, ``0 < m < 2**56``.

    The product may need 112 bits. The quotient is estimated in float64 (relative error below
    5 * 2**-53, so off by at most 33 for a quotient below 2**56); the remainder of that estimate
    is then exact modulo 2**64 and, being below 34 * m < 2**62 in magnitude, exact as int64;
    one floor division corrects both.
    """
    estimate = np.floor(x.astype(np.float64) * y.astype(np.float64) / m.astype(np.float64))
    quotient = estimate.astype(np.int64)
    product = x.astype(np.uint64) * y.astype(np.uint64)
    remainder = (product - quotient.astype(np.uint64) * m.astype(np.uint64)).view(np.int64)
    correction = remainder // m
    return quotient + correction, remainder - correction * m


@dataclass(frozen=True, slots=True)
class HourAllocation:
    """One deployment-hour's cost split between its requests and idle capacity."""

    requests: dict[str, int]
    """Micros per request id, for every request given (zero where it used no GPU time)."""
    idle_micros: int
    """Micros of unused capacity; zero when idle is shared back."""


def allocate_hour(
    cost_micros: int,
    capacity_gpu_us: int,
    request_gpu_us: Mapping[str, int],
    *,
    share_idle: bool,
) -> HourAllocation:
    """Allocate one deployment-hour's cost C over its requests by GPU time (DESIGN.md).

    Request i gets ``C * g_i / G`` and the idle capacity ``G - sum(g)`` is its own line, or,
    with ``share_idle``, the whole cost goes to the requests in proportion to ``g_i``
    (``C * g_i / sum(g)``). Largest-remainder rounding; the parts plus idle equal C exactly,
    and a negative C (credit) mirrors a positive one.

    Edge cases:
        * No request, or none with GPU time: all of C is idle, whatever ``share_idle`` says.
        * ``sum(g) > G`` (usage booked to the hour exceeds its capacity, e.g. requests
          counted in the hour they finished, or a capacity registered too low): the basis is
          clamped to usage, so idle is zero and C is split by ``g_i / sum(g)``; the bill is
          never over-allocated.
        * ``G == 0`` with no usage: all of C is idle.

    Args:
        cost_micros: Cost C of the hour's billing rows, in micros; negative for credits.
        capacity_gpu_us: Capacity G of the deployment in that hour, in GPU-microseconds.
        request_gpu_us: GPU-microseconds g_i per request id within the hour.
        share_idle: Share idle capacity back to the requests instead of an idle line.

    Returns:
        Micros per request and for idle.

    Raises:
        InvalidInput: If the capacity or a request's GPU time is negative.
    """
    if capacity_gpu_us < 0:
        raise InvalidInput(f"capacity_gpu_us is negative: {capacity_gpu_us}")
    for request_id, gpu_us in request_gpu_us.items():
        if gpu_us < 0:
            raise InvalidInput(f"GPU time of {request_id!r} is negative: {gpu_us}")
    used_gpu_us = sum(request_gpu_us.values())
    if used_gpu_us == 0:
        return HourAllocation(requests=dict.fromkeys(request_gpu_us, 0), idle_micros=cost_micros)
    idle_gpu_us = 0 if share_idle else max(capacity_gpu_us - used_gpu_us, 0)
    # Requests sort before the idle line, as rows come before idle rows in the array form.
    weights: dict[tuple[int, str], int] = {(0, rid): g for rid, g in request_gpu_us.items()}
    weights[(1, "")] = idle_gpu_us
    split = split_by_weight(cost_micros, weights)
    return HourAllocation(
        requests={rid: split.get((0, rid), 0) for rid in request_gpu_us},
        idle_micros=split.get((1, ""), 0),
    )


@dataclass(frozen=True, slots=True)
class HourAllocationArrays:
    """Vectorised :class:`HourAllocation` for many deployment-hours."""

    request_micros: NDArray[np.int64]
    """Micros per request row, shape ``(n_rows,)``."""
    idle_micros: NDArray[np.int64]
    """Idle micros per deployment-hour, shape ``(n_hours,)``."""


def allocate_hours_arrays(
    *,
    cost_micros: NDArray[np.integer[Any]],
    capacity_gpu_us: NDArray[np.integer[Any]],
    hour_index: NDArray[np.integer[Any]],
    request_gpu_us: NDArray[np.integer[Any]],
    share_idle: bool,
) -> HourAllocationArrays:
    """:func:`allocate_hour` for many deployment-hours at once, with the same rules.

    Row ``i`` is one request's GPU time within deployment-hour ``hour_index[i]``. The result
    equals :func:`allocate_hour` on each hour when each hour's rows are ordered by request id
    (ties between equal remainders go to the earlier row, and rows before the idle line).
    Numeric bounds are those of :func:`split_by_weight_arrays`.

    Args:
        cost_micros: Cost C per deployment-hour, in micros. Shape ``(n_hours,)``.
        capacity_gpu_us: Capacity G per deployment-hour, in GPU-microseconds.
            Shape ``(n_hours,)``.
        hour_index: Deployment-hour of each request row, in ``[0, n_hours)``.
        request_gpu_us: GPU-microseconds of each request row within its hour.
        share_idle: Share idle capacity back to the requests instead of an idle line.

    Returns:
        Micros per request row and idle micros per hour.

    Raises:
        InvalidInput: On shape or dtype errors, or negative capacities or GPU times.
    """
    cost = _as_int64(cost_micros, "cost_micros")
    capacity = _as_int64(capacity_gpu_us, "capacity_gpu_us")
    hours = _as_int64(hour_index, "hour_index")
    used = _as_int64(request_gpu_us, "request_gpu_us")
    n_hours = cost.shape[0]
    if capacity.shape[0] != n_hours:
        raise InvalidInput(f"capacity_gpu_us has {capacity.shape[0]} hours, cost_micros {n_hours}")
    if capacity.size and capacity.min() < 0:
        raise InvalidInput("capacity_gpu_us must be non-negative")
    if used.size and used.min() < 0:
        raise InvalidInput("request_gpu_us must be non-negative")
    if hours.shape[0] != used.shape[0]:
        raise InvalidInput(f"hour_index has {hours.shape[0]} rows, request_gpu_us {used.shape[0]}")
    if hours.size and (hours.min() < 0 or hours.max() >= n_hours):
        raise InvalidInput(f"hour_index outside [0, {n_hours})")
    used_float = np.zeros(n_hours, dtype=np.float64)
    np.add.at(used_float, hours, used.astype(np.float64))
    used_sum = np.zeros(n_hours, dtype=np.int64)
    np.add.at(used_sum, hours, used)
    if share_idle:
        idle_weight = np.zeros(n_hours, dtype=np.int64)
    else:
        # Where usage may exceed int64 it certainly exceeds capacity: idle is clamped to 0.
        fits = used_float < _FLOAT_SUM_SAFE
        idle_weight = np.where(fits, np.maximum(capacity - np.where(fits, used_sum, 0), 0), 0)
    idle_weight = np.where(used_float == 0, 1, idle_weight)  # no usage: everything is idle
    parts = split_by_weight_arrays(
        cost,
        np.concatenate((hours, np.arange(n_hours, dtype=np.int64))),
        np.concatenate((used, idle_weight)),
    )
    n_rows = used.shape[0]
    return HourAllocationArrays(request_micros=parts[:n_rows], idle_micros=parts[n_rows:])
