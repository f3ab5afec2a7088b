"""Exact splitting of money by weights in memory: largest remainder in integer micros.

The allocation of a month is a relational plan (app/allocation/plan.py) with the same rule;
this is the small in-memory form, for splits over a report's lines (idle shared into a
view, a source row's ListCost over its entries) and as the oracle the plan is tested against.

Rounding rule:

* The magnitude ``|total|`` is split and the sign applied afterwards, so splitting ``-X``
  gives exactly the negation of splitting ``+X`` (credits mirror charges).
* Each part starts at the floor of its exact share; the micros left over go, one each, to the
  parts with the largest remainders. Ties go to the smaller key. Every part is therefore within one micro of its exact share and
  the parts add up to the total exactly.
"""

import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Any, Protocol, TypeVar

import numpy as np

from app.domain.errors import EmptyAllocationBasis, InvalidInput

__all__ = ["split_array_by_weight", "split_by_weight"]


class _Orderable(Protocol):
    def __lt__(self, other: Any, /) -> bool: ...


K = TypeVar("K", bound=_Orderable)


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


def split_array_by_weight(total_micros: int, weights: np.ndarray) -> np.ndarray:
    """:func:`split_by_weight` with the keys the positions of an array of int64 weights:
    the same parts (zero where the weight is zero), without a Python step per weight.

    Products and remainders are exact Python integers (an object array), so a weight times
    the total may exceed 64 bits; ties go to the earlier position.

    Raises:
        EmptyAllocationBasis: If no weight is positive.
        InvalidInput: If a weight is negative.
    """
    if (weights < 0).any():
        raise InvalidInput(f"weight at position {int(np.argmax(weights < 0))} is negative")
    denominator = int(weights.sum(dtype=object))
    if denominator == 0:
        raise EmptyAllocationBasis(f"no positive weight among {len(weights)} keys")
    magnitude = abs(total_micros)
    products = weights.astype(object) * magnitude
    parts = products // denominator
    leftover = magnitude - int(parts.sum())
    if leftover:
        if denominator >= 2**63:
            keyed = split_by_weight(magnitude, dict(enumerate(weights.tolist())))
            parts = np.array([keyed.get(i, 0) for i in range(len(weights))], dtype=object)
        else:
            remainders = (products - parts * denominator).astype(np.int64)
            # Largest remainder first, then the earlier position (lexsort: last key primary).
            order = np.lexsort((np.arange(len(weights)), -remainders))
            parts[order[:leftover]] += 1
    # Negate before narrowing: -2**63 fits int64, its magnitude does not.
    return (-parts if total_micros < 0 else parts).astype(np.int64)


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
