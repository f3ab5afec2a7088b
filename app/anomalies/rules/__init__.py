"""Cost anomalies per bucket (a day, or an hour where usage is metered) and what drove them.

**Detection** (:func:`detect`) is a seasonal-median decomposition with a MAD threshold, run
as a live detector: each bucket is judged from the ``cycles`` whole seasons just before it
and never from later buckets. The cost is taken on a log scale, ``z = log(cost + offset)``,
because cost noise grows with the level (a busy hour varies by more dollars than a quiet
one); the offset is the money floor ``min_deviation_micros``, so buckets near zero are
compared in money rather than as huge ratios. The window is cut into ``cycles`` blocks of
one season each, aligned so that every block starts at the judged bucket's season position:

* the drift is the median of the per-block slopes between every pair of blocks at every
  season position (Theil-Sen, pooled over the positions);
* the level is the median over the blocks of each block's median, moved on by the drift to
  the judged bucket's block;
* the seasonal index of a position is the median over the blocks of the value less its
  block's median;
* the noise of one bucket is the MAD of the lag-one-season differences, scaled by
  1.4826 / sqrt(2) to a standard deviation, widened by ``sqrt(1 + pi / (2 * cycles))`` for
  the error of a median of ``cycles`` values, and never below :data:`SIGMA_FLOOR`.

The expected value is the level plus the seasonal index, back on the money scale. A bucket
is an anomaly when its score (log deviation over noise: a robust z-score) is at least
``threshold`` and its money deviation at least ``min_deviation_micros``. The first
``cycles * season`` buckets are a warm-up and are never flagged. An anomaly in the window
moves none of the medians much (use an odd ``cycles``: the median of an even count averages
the middle two), so it does not distort what the next buckets are judged against; the
price is that a lasting change of level keeps being flagged until it fills about half the
window. This is the idea of Twitter's S-H-ESD (seasonal decomposition with medians, a MAD
scale) made causal and given a drift.

A noise-free periodic series is forecast exactly and never flagged, and one growing at a
constant rate nearly so (the offset bends the log a little near the floor); a steep trend
that is linear in money (doubling over the window) bends on the log scale and can be
flagged. Hourly buckets want a season of 168 wherever weekends differ from weekdays: with
24, weekend hours are judged against weekdays (on the hourly series of
bench/anomaly_detection.py, 70 false flags per 1,000 normal hours with 24, under 1 with
168). On that bench's series without anomalies, the score had a standard deviation of 1.0
on hourly buckets (3 cycles of 168) and 1.1 on daily ones (5 cycles of 7: 28 differences
estimate the noise, and their own error fattens the tails); the default threshold of 3.5
flagged 0.06% of the hourly buckets and 0.5% of the daily ones.

**Explanation** (:func:`explain`) compares an anomalous bucket's facts with a baseline (the
mean of a few normal buckets, by default those at the same season position in the cycles
before: :func:`baseline_indices`), optionally scaled to the detector's expected cost. Two
views of the deviation ``actual cost - baseline cost`` each add up to it exactly, in micros:

* *why* (the factors): cost is the product ``C = N * w * u * p * f`` of output tokens ``N``
  (volume), verified tokens per output token ``w = 1 + (drafted - accepted) / N`` (the
  acceptance factor: with k drafted tokens per step and token acceptance rate a,
  ``w = (k + 1) / (1 + k * a)``, which is the GPU work per output token under the meter's
  rule that GPU time follows scheduled tokens), GPU-seconds per verified token ``u``
  (prompt length, batching, hardware), request price per GPU-second ``p`` and the idle
  uplift ``f = C / (C - idle cost) = 1 / (1 - idle share)``. Each factor's effect is its
  Shapley value: the mean, over the 120 orders in which the five factors can switch from
  baseline to actual, of the cost change its own switch makes. Shapley values of a product
  add up to the change exactly and do not depend on an arbitrary order. Where a side has
  no output tokens, no request GPU time or no request cost, the product is undefined and
  the split is additive instead: volume takes the change in request cost, idle share the
  change in idle cost.
* *who* (each categorical dimension, e.g. team, session, model, method): a value's effect
  is the change of its cost; what a dimension does not cover (idle cost, say) is the
  value :data:`NOT_COVERED`.

The drivers come back as one list ranked by money, with one rule that keeps the list
useful: a categorical dimension whose cost shares hardly moved (all values moved together,
so it says only that everything grew) is *uninformative* and ranks after everything else,
as does :data:`NOT_COVERED`; and volume, which says that more was served but not by whom,
ranks by what is left of it after the largest same-signed move of a value in an
informative dimension. So a team's spike is headed by that team, a fall in acceptance by
acceptance, and growth everywhere by volume.

* :mod:`.values`: anomalies, bucket facts, drivers, factors, and :data:`NOT_COVERED`.
* :mod:`.detection`: :func:`detect`, :func:`expected_at`, :func:`baseline_indices`.
* :mod:`.drivers`: :func:`explain`: the factors' Shapley split, the categorical values'
  changes, and the ranking.
"""

from app.anomalies.rules.detection import (
    MAD_TO_SD,
    SIGMA_FLOOR,
    baseline_indices,
    detect,
    expected_at,
)
from app.anomalies.rules.drivers import MIX_SHARE, explain
from app.anomalies.rules.values import (
    NOT_COVERED,
    Anomaly,
    BucketFacts,
    Direction,
    Driver,
    Factor,
    verified_per_output_token,
)

__all__ = [
    "MAD_TO_SD",
    "MIX_SHARE",
    "NOT_COVERED",
    "SIGMA_FLOOR",
    "Anomaly",
    "BucketFacts",
    "Direction",
    "Driver",
    "Factor",
    "baseline_indices",
    "detect",
    "expected_at",
    "explain",
    "verified_per_output_token",
]
