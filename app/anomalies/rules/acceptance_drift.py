"""Acceptance drift: has a deployment's draft acceptance fallen from its baseline? (pure)

Page's CUSUM, one-sided (downward), on per-bucket acceptance rates (accepted / drafted
tokens of the bucket's requests). The rates are standardised by the baseline's median and
its MAD (x 1.4826), not by a binomial variance: acceptance is correlated within a request
and a draft step, so tokens are far from independent trials and a binomial bound would alarm
on noise. Each bucket adds ``-(z + k)``; the statistic is floored at 0 and alarms at ``h``.
The defaults, k = 0.5 and h = 9, are set by bench/acceptance_drift.py (a week of hourly
baseline, its median and MAD estimated from those 168 buckets): h = 5, the textbook value for
a known mean and variance, raised a false alarm in one week of five; h = 9 in one in fifty,
and still finds a fall of three points in about 15 hours and a broken draft at once.
The change is dated at the bucket after the statistic last left 0 before the alarm.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

from app.domain.errors import InvalidInput

MAD_TO_SD = 1.4826
SCALE_FLOOR = 0.01
"""A baseline that never varied is taken to vary by one point of acceptance."""
MIN_DROP = 0.01
"""The least fall of token-weighted acceptance (one point) that an alarm reports."""


@dataclass(frozen=True, slots=True)
class AcceptanceBucket:
    accepted: int
    drafted: int

    @property
    def rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted > 0 else None


@dataclass(frozen=True, slots=True)
class DriftAlarm:
    alarm_index: int
    """The bucket at whose end the statistic crossed ``h``."""
    change_index: int
    """The estimated first bucket of the lower acceptance."""
    baseline_rate: float
    recent_rate: float
    """Acceptance (token-weighted) from the change to the last bucket."""
    statistic: float


def detect_drop(
    buckets: Sequence[AcceptanceBucket],
    *,
    baseline: int,
    k: float = 0.5,
    h: float = 9.0,
    min_drafted: int = 1,
    min_drop: float = MIN_DROP,
) -> DriftAlarm | None:
    """The first alarm of a downward CUSUM after the first ``baseline`` buckets.

    Buckets that drafted fewer than ``min_drafted`` tokens carry no evidence and are skipped.
    An alarm is a real change only when the acceptance since the change (token-weighted)
    is at least ``min_drop`` below the baseline's: the CUSUM runs on the buckets' median
    and spread, and a few light buckets can carry it over ``h`` while the tokens'
    acceptance did not move ("fell from 49% to 49%"); it then keeps watching.

    Raises:
        InvalidInput: For a baseline with fewer than three usable buckets, or bad k or h.
    """
    if k < 0 or h <= 0:
        raise InvalidInput(f"k must be >= 0 and h > 0, got k={k}, h={h}")
    if not 0 < min_drop < 1:
        raise InvalidInput(f"min_drop must lie in (0, 1), got {min_drop}")
    usable = [b.rate for b in buckets[:baseline] if b.drafted >= min_drafted and b.rate is not None]
    if len(usable) < 3:
        raise InvalidInput(
            f"the baseline needs at least 3 buckets that drafted tokens, got {len(usable)}"
        )
    center = median(usable)
    scale = max(MAD_TO_SD * median(abs(r - center) for r in usable), SCALE_FLOOR)
    base_accepted = sum(b.accepted for b in buckets[:baseline])
    base_drafted = sum(b.drafted for b in buckets[:baseline])
    statistic, left_zero = 0.0, baseline
    for index in range(baseline, len(buckets)):
        bucket = buckets[index]
        rate = bucket.rate
        if bucket.drafted < min_drafted or rate is None:
            continue
        before = statistic
        statistic = max(0.0, statistic - ((rate - center) / scale + k))
        if before == 0.0 and statistic > 0.0:
            left_zero = index
        if statistic >= h:
            after = buckets[left_zero:]
            drafted = sum(b.drafted for b in after)
            recent = sum(b.accepted for b in after) / drafted if drafted else math.nan
            if not base_accepted / base_drafted - recent >= min_drop:
                continue
            return DriftAlarm(
                alarm_index=index,
                change_index=left_zero,
                baseline_rate=base_accepted / base_drafted,
                recent_rate=recent,
                statistic=statistic,
            )
    return None
