"""Do cost anomalies get found, and is the driver right? Generated cost series with anomalies
injected at known buckets, judged by the detector (app.anomalies.rules: seasonal-median
decomposition with a MAD threshold, causal) beside two references over the same history:
a rolling mean +/- 3 standard deviations (no seasonality, not robust) and a seasonal mean
+/- 3 sd (the detector with means for medians: seasonal, not robust). Precision, recall and
F1 per bucket; then a low-acceptance incident and a team's spike, explained.

    python -m bench.anomaly_detection [--seeds 20] [--days 120] [--weeks 6] [--noise 0.06]

The series: daily (season 7, 5 cycles of history) and hourly (season 168, 3 cycles; and
the same hourly series judged with season 24 and 5 cycles, ``hour/24``, to show what a
season that misses the weekends costs), each
with a trend (-10% to +40% over the span), weekly seasonality (weekends at 55-70%), for the
hourly ones a daily profile (nights at about a third of the afternoon peak), and log-normal
noise (``--noise`` daily, 1.3x that hourly). Anomalies are injected after the warm-up only
(buckets before it are judged by no method): spikes (one bucket, +40% to +120%), drops (one
day or 1-3 hours, to 30-65%) and short level shifts (3-5 days or 4-12 hours, +30% to +60%
or to 50-70%). Every injected bucket counts as one positive; an event is found when any of
its buckets is flagged; ``false/1k`` is flags per 1,000 normal buckets judged. All three
methods ignore deviations under 1.00.

The incident: a deployment on autoscaled GPUs whose token acceptance rate falls from 70% to
20% for one day (k = 4, so verified tokens per output token go from 1.32 to 2.78 and GPU
time with them); the team spike: one team (30% of the tokens) serves 3x its tokens for a
day. Each is detected on the deployment's daily cost and explained against the same weekday
of the five weeks before, scaled to the detector's expected cost.
"""

import argparse
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from app.anomalies.rules import (
    BucketFacts,
    Driver,
    baseline_indices,
    detect,
    explain,
)

MIN_DEVIATION = 1_000_000
"""One currency unit: the money floor for both methods."""


@dataclass(frozen=True, slots=True)
class Case:
    """One generated series and the buckets that were made anomalous, per event."""

    costs: list[int]
    events: list[list[int]]

    @property
    def positives(self) -> set[int]:
        return {bucket for event in self.events for bucket in event}


@dataclass(frozen=True, slots=True)
class Shape:
    name: str
    season: int
    cycles: int
    buckets: int
    noise: float


def _inject(
    rng: np.random.Generator, clean: np.ndarray, start: int, hourly: bool
) -> tuple[np.ndarray, list[list[int]]]:
    """Anomalies at non-overlapping places after ``start``, about one per 15 buckets daily
    and one per 60 hourly."""
    values = clean.copy()
    events: list[list[int]] = []
    taken = np.zeros(len(values), dtype=bool)
    wanted = max(1, (len(values) - start) // (60 if hourly else 15))
    attempts = 0
    while len(events) < wanted and attempts < 1000:
        attempts += 1
        kind = rng.choice(["spike", "drop", "shift"])
        if kind == "spike":
            length, factor = 1, 1 + rng.uniform(0.4, 1.2)
        elif kind == "drop":
            length = int(rng.integers(1, 4)) if hourly else 1
            factor = rng.uniform(0.3, 0.65)
        else:
            length = int(rng.integers(4, 13)) if hourly else int(rng.integers(3, 6))
            factor = 1 + rng.uniform(0.3, 0.6) if rng.random() < 0.5 else rng.uniform(0.5, 0.7)
        first = int(rng.integers(start, len(values) - length + 1))
        guard = slice(max(first - 2, 0), first + length + 2)
        if taken[guard].any():
            continue
        taken[first : first + length] = True
        values[first : first + length] *= factor
        events.append(list(range(first, first + length)))
    return values, events


def generate(shape: Shape, seed: int) -> Case:
    rng = np.random.default_rng(seed)
    hourly = shape.season > 7
    t = np.arange(shape.buckets, dtype=np.float64)
    trend = 1 + rng.uniform(-0.1, 0.4) * t / shape.buckets
    weekend = rng.uniform(0.55, 0.7)
    if hourly:
        day, hour = t // 24, t % 24
        profile = 0.35 + 0.65 * np.clip(np.sin((hour - 6) / 16 * math.pi), 0, None)
        weekly = np.where(day % 7 >= 5, weekend, 1.0)
        level = rng.uniform(20, 60) * 1e6 * profile * weekly
    else:
        weekly = np.where(t % 7 >= 5, weekend, 1.0)
        level = rng.uniform(400, 1500) * 1e6 * weekly
    clean = level * trend * np.exp(rng.normal(0, shape.noise, shape.buckets))
    values, events = _inject(rng, clean, shape.cycles * shape.season, hourly)
    return Case(costs=[round(v) for v in values], events=events)


def rolling_reference(series: Sequence[int], *, history: int, sigmas: float = 3.0) -> set[int]:
    """Flags of the reference: the previous ``history`` buckets' mean +/- ``sigmas`` sd."""
    values = np.asarray(series, dtype=np.float64)
    flagged = set()
    for index in range(history, len(values)):
        window = values[index - history : index]
        deviation = values[index] - window.mean()
        if abs(deviation) > sigmas * window.std(ddof=1) and abs(deviation) >= MIN_DEVIATION:
            flagged.add(index)
    return flagged


def seasonal_mean_reference(
    series: Sequence[int], *, season: int, cycles: int, sigmas: float = 3.0
) -> set[int]:
    """Flags of a second reference, seasonal but not robust: the mean of the same season
    position over the previous cycles moved on by the mean drift, +/- ``sigmas`` times the
    standard deviation of the lag-one-season differences over sqrt(2), widened for the
    error of a mean of ``cycles`` values. It is the detector with means for medians and a
    standard deviation for the MAD, on the money scale."""
    values = np.asarray(series, dtype=np.float64)
    span = cycles * season
    flagged = set()
    for index in range(span, len(values)):
        window = values[index - span : index].reshape(cycles, season)
        diffs = np.diff(window, axis=0)
        drift = float(diffs.mean())
        expected = float(np.mean(window[:, 0] + drift * (cycles - np.arange(cycles))))
        sd = float(diffs.std(ddof=1)) / math.sqrt(2) * math.sqrt(1 + 1 / cycles)
        deviation = values[index] - expected
        if abs(deviation) > sigmas * sd and abs(deviation) >= MIN_DEVIATION:
            flagged.add(index)
    return flagged


@dataclass(slots=True)
class Score:
    tp: int = 0
    fp: int = 0
    fn: int = 0
    negatives: int = 0
    events: int = 0
    events_found: int = 0

    def add(self, case: Case, flagged: set[int], *, judged_from: int) -> None:
        positives = case.positives
        self.negatives += len(case.costs) - judged_from - len(positives)
        self.tp += len(flagged & positives)
        self.fp += len(flagged - positives)
        self.fn += len(positives - flagged)
        self.events += len(case.events)
        self.events_found += sum(1 for event in case.events if flagged & set(event))

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 0.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0

    @property
    def false_alarms_per_1k(self) -> float:
        """Flags per 1,000 normal buckets judged."""
        return 1000 * self.fp / self.negatives if self.negatives else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


METHODS = ("seasonal median + MAD", "seasonal mean +/- 3 sd", "rolling mean +/- 3 sd")


def evaluate(shape: Shape, seeds: int, threshold: float) -> dict[str, Score]:
    scores = {name: Score() for name in METHODS}
    for seed in range(seeds):
        case = generate(shape, seed)
        found = detect(
            case.costs,
            season=shape.season,
            cycles=shape.cycles,
            threshold=threshold,
            min_deviation_micros=MIN_DEVIATION,
        )
        span = shape.cycles * shape.season
        scores[METHODS[0]].add(case, {a.index for a in found}, judged_from=span)
        scores[METHODS[1]].add(
            case,
            seasonal_mean_reference(case.costs, season=shape.season, cycles=shape.cycles),
            judged_from=span,
        )
        scores[METHODS[2]].add(case, rolling_reference(case.costs, history=span), judged_from=span)
    return scores


# --- the incident and the team spike ------------------------------------------------------

K = 4
PRICE_PER_GPU_S = 4.0 / 3600 * 1e6
"""Micros per GPU-second ($4 a GPU-hour)."""
GPU_S_PER_VERIFIED_TOKEN = 0.002
TEAMS = {"search": 0.5, "ads": 0.3, "chat": 0.2}


def day_facts(
    rng: np.random.Generator,
    day: int,
    *,
    acceptance: float = 0.70,
    team_boost: Mapping[str, float] | None = None,
) -> BucketFacts:
    """One day of an autoscaled deployment: GPU time follows the verified tokens, idle
    stays about 15% of GPU time."""
    weekly = 0.6 if day % 7 >= 5 else 1.0
    tokens_by_team = {
        team: share * 200e6 * weekly * (1 + 0.002 * day) * math.exp(rng.normal(0, 0.04))
        for team, share in TEAMS.items()
    }
    for team, boost in (team_boost or {}).items():
        tokens_by_team[team] *= boost
    rate = min(max(acceptance + rng.normal(0, 0.01), 0.01), 0.99)
    verified_per_token = (K + 1) / (1 + K * rate)
    gpu_by_team = {
        team: tokens * verified_per_token * GPU_S_PER_VERIFIED_TOKEN
        for team, tokens in tokens_by_team.items()
    }
    request_gpu = sum(gpu_by_team.values())
    idle_gpu = request_gpu * rng.uniform(0.14, 0.19) / 0.85
    output = round(sum(tokens_by_team.values()))
    steps = output / (1 + K * rate)
    draft = round(K * steps)
    cost_by_team = {team: round(g * PRICE_PER_GPU_S) for team, g in gpu_by_team.items()}
    idle_cost = round(idle_gpu * PRICE_PER_GPU_S)
    return BucketFacts(
        cost_micros=sum(cost_by_team.values()) + idle_cost,
        idle_cost_micros=idle_cost,
        by_dimension={
            "team": cost_by_team,
            "model": {"llama-3.1-8b": sum(cost_by_team.values())},
            "method": {"draft_model": sum(cost_by_team.values())},
        },
        output_tokens=output,
        request_gpu_seconds=request_gpu,
        idle_gpu_seconds=idle_gpu,
        draft_tokens=draft,
        accepted_tokens=min(round(draft * rate), draft),
    )


def scenario(
    name: str, day: int, make: Callable[[np.random.Generator, int], BucketFacts], seed: int
) -> tuple[bool, list[Driver]]:
    rng = np.random.default_rng(seed)
    facts = [make(rng, d) for d in range(day + 7)]
    found = {
        a.index: a
        for a in detect(
            [f.cost_micros for f in facts], season=7, min_deviation_micros=MIN_DEVIATION
        )
    }
    anomaly = found.get(day)
    base = [facts[i] for i in baseline_indices(day, season=7) if i not in found]
    drivers = explain(
        facts[day], base, expected_micros=anomaly.expected_micros if anomaly else None
    )
    status = (
        f"detected ({anomaly.direction}, score {anomaly.score:.1f}, "
        f"{anomaly.deviation_micros / 1e6:+,.2f} against {anomaly.expected_micros / 1e6:,.2f} "
        "expected)"
        if anomaly
        else "NOT detected"
    )
    print(f"\n{name}: day {day} {status}; other flags: {sorted(set(found) - {day}) or 'none'}")
    for driver in drivers[:4]:
        print(f"  {driver.dimension:<11}{driver.description}")
    return anomaly is not None, drivers


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=20, help="generated series per shape")
    parser.add_argument("--days", type=int, default=120, help="length of the daily series")
    parser.add_argument("--weeks", type=int, default=6, help="length of the hourly series")
    parser.add_argument("--noise", type=float, default=0.06, help="log-normal noise, daily")
    parser.add_argument("--threshold", type=float, default=3.5, help="the detector's z-score")
    args = parser.parse_args()
    started = time.perf_counter()
    shapes = (
        Shape("daily", season=7, cycles=5, buckets=args.days, noise=args.noise),
        Shape("hourly", season=168, cycles=3, buckets=args.weeks * 168, noise=1.3 * args.noise),
        # The same hourly series judged with a daily season: weekends look like drops.
        Shape("hour/24", season=24, cycles=5, buckets=args.weeks * 168, noise=1.3 * args.noise),
    )
    print(
        f"{'series':<8}{'method':<30}{'precision':>10}{'recall':>8}{'F1':>7}"
        f"{'flags':>7}{'false/1k':>9}{'events found':>14}"
    )
    for shape in shapes:
        scores = evaluate(shape, args.seeds, args.threshold)
        for label, score in scores.items():
            print(
                f"{shape.name:<8}{label:<30}{score.precision:>10.2f}{score.recall:>8.2f}"
                f"{score.f1:>7.2f}{score.tp + score.fp:>7}{score.false_alarms_per_1k:>9.1f}"
                f"{f'{score.events_found}/{score.events}':>14}"
            )
        ratios = ", ".join(
            f"{scores[METHODS[0]].f1 / scores[name].f1 if scores[name].f1 else math.inf:.2f}"
            f" vs {name.split(' +/-')[0]}"
            for name in METHODS[1:]
        )
        print(f"{shape.name:<8}{'F1 ratio of the method':<30}{ratios}")

    incident_day, spike_day = 63, 66  # weekdays after the 35-day warm-up
    detected, drivers = scenario(
        "low-acceptance incident (acceptance 70% -> 20% for a day)",
        incident_day,
        lambda rng, d: day_facts(rng, d, acceptance=0.20 if d == incident_day else 0.70),
        seed=1,
    )
    top = drivers[0].dimension
    print(
        f"  -> detected: {detected}; top driver: {top} ({'OK' if top == 'acceptance' else 'WRONG'})"
    )
    detected, drivers = scenario(
        "team spike (ads serves 3x its tokens for a day)",
        spike_day,
        lambda rng, d: day_facts(rng, d, team_boost={"ads": 3.0} if d == spike_day else None),
        seed=2,
    )
    top_pair = (drivers[0].dimension, drivers[0].value)
    ok = top_pair == ("team", "ads")
    print(f"  -> detected: {detected}; top driver: {top_pair} ({'OK' if ok else 'WRONG'})")
    print(f"\n{time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
