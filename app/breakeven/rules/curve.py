"""A deployment's fitted breakeven as the other features see it: the curve and the speedup
read off it at a concurrency."""

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from app.domain.errors import InvalidInput


@dataclass(frozen=True, slots=True, kw_only=True)
class BreakevenCurve:
    """A deployment's fitted breakeven (from its newest load sweep)."""

    deployment: str
    breakeven_concurrency: float
    speedups: Sequence[tuple[float, float]]
    """(concurrency, modelled speedup) points of the fit, for interpolation."""
    schedule: Sequence[Sequence[int]]
    """vLLM ``num_speculative_tokens_per_batch_size`` bands ``[start, end, k]``."""
    sweep_id: int


def speedup_at(points: Sequence[tuple[float, float]], concurrency: float) -> float:
    """Modelled speedup at ``concurrency``, interpolated linearly on log concurrency and held
    constant beyond the outermost points.

    Raises:
        InvalidInput: If there are no points or a concurrency is not positive.
    """
    ordered = sorted((c, s) for c, s in points if math.isfinite(c) and math.isfinite(s))
    if not ordered or concurrency <= 0 or ordered[0][0] <= 0:
        raise InvalidInput("need positive concurrency and at least one curve point")
    if concurrency <= ordered[0][0]:
        return ordered[0][1]
    for (c0, s0), (c1, s1) in itertools.pairwise(ordered):
        if concurrency <= c1:
            share = (math.log(concurrency) - math.log(c0)) / (math.log(c1) - math.log(c0))
            return s0 + share * (s1 - s0)
    return ordered[-1][1]
