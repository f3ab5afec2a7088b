"""Acceptance drift detection: the CUSUM of app/anomalies/rules/acceptance_drift.py against a
Shewhart rule (alarm on the first bucket below the baseline's mean minus 3 sd), side by side,
on generated hourly acceptance with a known change point.

    .venv/bin/python -m bench.acceptance_drift [--series 200] [--seed 0]

Each series has a week of hourly baseline at 70% (hour-to-hour noise of 3 points, as
request-clustered acceptance has) and a fall of 3, 6 or 10 points, or to 20% (a broken
draft), at a random hour of the next week. Printed per fall: how often it is found within
48 hours, and the detection delay (median and 90th percentile, hours); and, on series with
no change, false alarms per 1,000 hours.
"""

import argparse
import time

import numpy as np

from app.anomalies.rules.acceptance_drift import AcceptanceBucket, detect_drop

BASELINE_HOURS = 168
WATCH_HOURS = 168
RATE, NOISE, DRAFTED = 0.70, 0.03, 4000
FALLS = (0.03, 0.06, 0.10, 0.50)


def series(rng: np.random.Generator, change: int | None, fall: float) -> list[AcceptanceBucket]:
    hours = BASELINE_HOURS + WATCH_HOURS
    rates = rng.normal(RATE, NOISE, hours)
    if change is not None:
        rates[change:] -= fall
    rates = np.clip(rates, 0.0, 1.0)
    drafted = rng.integers(DRAFTED // 2, DRAFTED * 2, hours)
    return [
        AcceptanceBucket(accepted=round(r * d), drafted=int(d))
        for r, d in zip(rates, drafted, strict=True)
    ]


def shewhart(buckets: list[AcceptanceBucket]) -> int | None:
    base = np.array([b.accepted / b.drafted for b in buckets[:BASELINE_HOURS]])
    floor = base.mean() - 3 * base.std()
    for index in range(BASELINE_HOURS, len(buckets)):
        if buckets[index].accepted / buckets[index].drafted < floor:
            return index
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--series", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    print(f"{'fall':>12}  {'method':<9} {'found<=48h':>10}  {'delay p50':>9}  {'delay p90':>9}")
    for fall in FALLS:
        delays: dict[str, list[int]] = {"cusum": [], "shewhart": []}
        found = {"cusum": 0, "shewhart": 0}
        for _ in range(args.series):
            change = BASELINE_HOURS + int(rng.integers(0, WATCH_HOURS - 48))
            buckets = series(rng, change, fall)
            alarm = detect_drop(buckets, baseline=BASELINE_HOURS)
            hits = {
                "cusum": None if alarm is None else alarm.alarm_index,
                "shewhart": shewhart(buckets),
            }
            for name, hit in hits.items():
                if hit is not None and change <= hit <= change + 48:
                    found[name] += 1
                    delays[name].append(hit - change)
        label = f"-{fall:.0%} pts" if fall < 0.5 else "to 20%"
        for name in ("cusum", "shewhart"):
            d = np.array(delays[name]) if delays[name] else np.array([np.nan])
            print(
                f"{label:>12}  {name:<9} {found[name] / args.series:>10.0%}  "
                f"{np.nanmedian(d):>9.1f}  {np.nanpercentile(d, 90):>9.1f}"
            )
    alarms = {"cusum": 0, "shewhart": 0}
    for _ in range(args.series):
        buckets = series(rng, None, 0.0)
        alarms["cusum"] += detect_drop(buckets, baseline=BASELINE_HOURS) is not None
        alarms["shewhart"] += shewhart(buckets) is not None
    watched = args.series * WATCH_HOURS / 1000
    print(
        f"no change: series with a false alarm in {WATCH_HOURS} h: cusum "
        f"{alarms['cusum']}/{args.series} ({alarms['cusum'] / watched:.2f} per 1,000 h), "
        f"shewhart {alarms['shewhart']}/{args.series} ({alarms['shewhart'] / watched:.2f} per 1,000 h)"
    )
    print(f"{time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
