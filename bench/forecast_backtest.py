"""Do the spend forecast's intervals mean what they say? Daily spend generated with a known
trend, weekly seasonality and noise, forecast at several days of a month and checked
against the month's true total: how often the 80/90/95% intervals hold it, and the median
absolute % error (MdAPE) of the expected total, for the model (app.budgets.rules.forecast) beside
the naive run-rate: the month-to-date mean day times the days of the month, with a normal
interval from the month-to-date daily variance (independent days, the mean's own error
included). ``ratio`` is the model's MdAPE over the run-rate's.

    python -m bench.forecast_backtest [--series 80] [--context-days 56] [--seed 0]

Kinds of series, each with its own random level, slope (-0.4% to +1.2% of the level a
day), weekday profile (weekends 20-60% lower) and noise (4-15% of the level):

* ``iid``: linear trend + additive weekday effects + independent normal noise.
* ``ar1``: the same with AR(1) noise (phi 0.4-0.8): busy days follow busy days.
* ``level shift``: independent noise and a step of 15-40% of the level, up or down, on a
  random day from four weeks before the month to its 20th. Rows split by whether the step
  is before the as-of day (``seen``) or still ahead of it (``ahead``, which no method can
  foresee).
* ``one-off day``: independent noise and one day of 3-10 times the usual spend (a batch
  job), on a random day drawn as for the step; ``seen`` and ``ahead`` as there.
* ``multiplicative``: weekday factors and noise proportional to the trend, which the
  additive model does not express.

Each series is forecast with ``--context-days`` of history before the month and again with
none (history starts on the month's first day, as for a new scope). The as-of day is the
first day not yet known; the rows ``as of day N`` pool the kinds, and ``all but ahead``
leaves out the steps and one-off days still to come.
"""

import argparse
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from statistics import NormalDist

import numpy as np

from app.budgets.rules.forecast import forecast_spend

LEVELS = (0.8, 0.9, 0.95)
AS_OF_DAYS = (4, 8, 15, 22, 28)
"""Day of the month of ``as_of``: 3, 7, 14, 21 and 27 days of the month known."""
KINDS = ("iid", "ar1", "level shift", "one-off day", "multiplicative")
EVENT_KINDS = ("level shift", "one-off day")
MONTHS = tuple(date(2025 + m // 12, m % 12 + 1, 1) for m in range(24))
"""Months to draw from: their lengths and first weekdays differ."""


@dataclass(frozen=True, slots=True)
class Series:
    """Daily spend in micros from ``first_day`` to the month's last day."""

    kind: str
    first_day: date
    month_start: date
    month_end: date
    """Exclusive."""
    spend: tuple[int, ...]
    event_day: date | None = None
    """The day a ``level shift`` series steps to its new level, or a ``one-off day``."""

    def month_total(self) -> int:
        return sum(self.spend[(self.month_start - self.first_day).days :])

    def known(self, as_of: date, *, context: bool) -> tuple[date, tuple[int, ...]]:
        """First day and daily spend of the history up to ``as_of``."""
        first = self.first_day if context else self.month_start
        start = (first - self.first_day).days
        return first, self.spend[start : (as_of - self.first_day).days]


def generate(kind: str, rng: np.random.Generator, *, context_days: int) -> Series:
    """One series of ``kind`` (see the module's list) with random parameters, covering
    ``context_days`` before a random month and the month itself."""
    month_start = MONTHS[int(rng.integers(len(MONTHS)))]
    month_end = date(month_start.year + month_start.month // 12, month_start.month % 12 + 1, 1)
    first_day = month_start - timedelta(days=context_days)
    days = (month_end - first_day).days
    t = np.arange(days, dtype=np.float64)
    weekday = (first_day.weekday() + np.arange(days)) % 7
    base = float(rng.uniform(50, 5_000)) * 1e6
    profile = np.concatenate([rng.uniform(-0.08, 0.08, 5), rng.uniform(-0.6, -0.2, 2)])
    level = base + float(rng.uniform(-0.004, 0.012)) * base * (t - context_days)
    cv = float(rng.uniform(0.04, 0.15))
    noise = rng.normal(0.0, 1.0, days)
    event = context_days + int(rng.integers(-28, 20))
    if kind == "ar1":
        phi = float(rng.uniform(0.4, 0.8))
        for i in range(1, days):
            noise[i] = phi * noise[i - 1] + noise[i] * np.sqrt(1 - phi * phi)
    if kind == "level shift":
        size = float(rng.uniform(0.15, 0.4)) * float(rng.choice([-1.0, 1.0]))
        level = level + np.where(t >= event, size * base, 0.0)
    if kind == "multiplicative":
        spend = np.maximum(level, 0.1 * base) * (1 + profile[weekday]) * (1 + cv * noise)
    else:
        spend = level + base * (profile[weekday] + cv * noise)
    if kind == "one-off day":
        spend[event] *= float(rng.uniform(3, 10))
    return Series(
        kind=kind,
        first_day=first_day,
        month_start=month_start,
        month_end=month_end,
        spend=tuple(int(v) for v in np.round(np.maximum(spend, 0.0))),
        event_day=first_day + timedelta(days=event) if kind in EVENT_KINDS else None,
    )


@dataclass(frozen=True, slots=True)
class Outcome:
    """A method's expected month total and its intervals, by level."""

    expected: int
    intervals: dict[float, tuple[int, int]]


def model_forecast(series: Series, as_of: date, *, context: bool) -> Outcome:
    first, history = series.known(as_of, context=context)
    intervals: dict[float, tuple[int, int]] = {}
    expected = 0
    for level in LEVELS:
        forecast = forecast_spend(
            history,
            first_day=first,
            period_start=series.month_start,
            period_end=series.month_end,
            level=level,
        )
        expected = forecast.expected_total_micros
        intervals[level] = (forecast.lower_total_micros, forecast.upper_total_micros)
    return Outcome(expected, intervals)


def run_rate(series: Series, as_of: date) -> Outcome:
    """The reference: needs at least two days of the month."""
    known = np.array(series.known(as_of, context=False)[1], dtype=np.float64)
    n, remaining = len(known), (series.month_end - as_of).days
    actual, mean, sd = float(known.sum()), float(known.mean()), float(known.std(ddof=1))
    expected = actual + mean * remaining
    spread = sd * np.sqrt(remaining * (1 + remaining / n))
    intervals = {}
    for level in LEVELS:
        half = NormalDist().inv_cdf(0.5 + level / 2) * spread
        intervals[level] = (round(max(expected - half, actual)), round(expected + half))
    return Outcome(round(expected), intervals)


@dataclass(slots=True)
class Tally:
    runs: int = 0
    errors: list[float] = field(default_factory=list)
    covered: dict[float, int] = field(default_factory=lambda: dict.fromkeys(LEVELS, 0))

    def add(self, outcome: Outcome, truth: int) -> None:
        self.runs += 1
        self.errors.append(abs(outcome.expected - truth) / max(truth, 1))
        for level, (low, high) in outcome.intervals.items():
            self.covered[level] += low <= truth <= high

    def coverage(self, level: float) -> float:
        return self.covered[level] / self.runs

    def cells(self) -> str:
        shares = "".join(f"{self.coverage(level):>6.0%}" for level in LEVELS)
        return f"{shares}{statistics.median(self.errors):>8.1%}"


@dataclass(slots=True)
class Row:
    model: Tally = field(default_factory=Tally)
    reference: Tally = field(default_factory=Tally)

    def line(self, label: str) -> str:
        reference_error = statistics.median(self.reference.errors)
        ratio = statistics.median(self.model.errors) / reference_error if reference_error else 0
        return (
            f"{label:<20}{self.model.runs:>6}{self.model.cells()}  "
            f"{self.reference.cells()}{ratio:>7.2f}"
        )


def header() -> str:
    levels = "".join(f"{level:>6.0%}" for level in LEVELS)
    return (
        f"{'':<26}{'model: coverage, MdAPE':<32}{'run-rate: coverage, MdAPE':<32}\n"
        f"{'':<20}{'runs':>6}{levels}{'MdAPE':>8}  {levels}{'MdAPE':>8}{'ratio':>7}"
    )


def labels(series: Series, day: int) -> list[str]:
    """The rows one forecast counts in."""
    as_of = series.month_start + timedelta(days=day - 1)
    ahead = series.event_day is not None and series.event_day >= as_of
    kind = series.kind
    if series.event_day is not None:
        kind = f"{kind} ({'ahead' if ahead else 'seen'})"
    return [kind, f"as of day {day}", "all"] + ([] if ahead else ["all but ahead"])


def backtest(series: Sequence[Series], *, context: bool) -> dict[str, Row]:
    rows: dict[str, Row] = {}
    for item in series:
        truth = item.month_total()
        for day in AS_OF_DAYS:
            as_of = item.month_start + timedelta(days=day - 1)
            model = model_forecast(item, as_of, context=context)
            reference = run_rate(item, as_of)
            for label in labels(item, day):
                row = rows.setdefault(label, Row())
                row.model.add(model, truth)
                row.reference.add(reference, truth)
    return rows


ROW_ORDER = (
    "iid",
    "ar1",
    "level shift (seen)",
    "level shift (ahead)",
    "one-off day (seen)",
    "one-off day (ahead)",
    "multiplicative",
    *(f"as of day {day}" for day in AS_OF_DAYS),
    "all but ahead",
    "all",
)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--series", type=int, default=80, help="series per kind (80)")
    parser.add_argument(
        "--context-days", type=int, default=56, help="history before the month, in days (56)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated series (0)")
    args = parser.parse_args()
    if args.series < 1 or args.context_days < 0:
        parser.error("--series must be >= 1 and --context-days >= 0")
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    series = [
        generate(kind, rng, context_days=args.context_days)
        for kind in KINDS
        for _ in range(args.series)
    ]
    for context in (True, False) if args.context_days else (False,):
        title = f"{args.context_days} days before the month" if context else "no days before it"
        print(f"\nHistory: {title}. {args.series} series per kind, as of days {AS_OF_DAYS}.")
        print(header())
        rows = backtest(series, context=context)
        for label in ROW_ORDER:
            if label in rows:
                print(rows[label].line(label))
    print(f"\n{time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
