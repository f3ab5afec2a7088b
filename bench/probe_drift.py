"""Probe drift detection: the CUSUM of app/probe/rules/drift.py (Page's CUSUM of
app/anomalies/rules/acceptance_drift.py with the probe's baseline and threshold) on generated series
of probe runs with a known change point.

    .venv/bin/python -m bench.probe_drift [--series 300] [--seed 0]

Each series has BASELINE_RUNS runs of baseline at 62% acceptance (1,500 drafted tokens a
run) with run-to-run noise of 0.5, 1 or 2 points (a fixed greedy probe set varies little:
on one engine at concurrency 1 its runs are identical, batch and kernel nondeterminism on
GPUs move it by a point or so), then 168 watched runs (a week of hourly probes) with a fall
of 3, 5 or 10 points, or to 20% (a broken draft), at a random run. Printed per noise and
fall: how often it is found within 48 runs, and the detection delay in runs (median, 90th
percentile), and how often the change was dated exactly or within 2 runs; and, on series
with no change, how many series of 168 runs had a false alarm.
"""

import argparse
import time

import numpy as np

from app.anomalies.rules.acceptance_drift import AcceptanceBucket
from app.probe.rules.drift import BASELINE_RUNS, PROBE_H, PROBE_K, detect_probe_drop

WATCH_RUNS = 168
RATE, DRAFTED = 0.62, 1500
NOISES = (0.005, 0.01, 0.02)
FALLS = (0.03, 0.05, 0.10, 0.42)


def series(
    rng: np.random.Generator, noise: float, change: int | None, fall: float
) -> list[AcceptanceBucket]:
    runs = BASELINE_RUNS + WATCH_RUNS
    rates = rng.normal(RATE, noise, runs)
    if change is not None:
        rates[change:] -= fall
    rates = np.clip(rates, 0.0, 1.0)
    return [AcceptanceBucket(accepted=round(r * DRAFTED), drafted=DRAFTED) for r in rates]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--series", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    print(f"baseline {BASELINE_RUNS} runs, k = {PROBE_K}, h = {PROBE_H}")
    print(
        f"{'noise':>6} {'fall':>8}  {'found<=48':>9}  {'delay p50':>9}  {'delay p90':>9}  "
        f"{'dated exactly':>13}  {'within 2':>8}"
    )
    for noise in NOISES:
        for fall in FALLS:
            delays: list[int] = []
            errors: list[int] = []
            for _ in range(args.series):
                change = BASELINE_RUNS + int(rng.integers(0, WATCH_RUNS - 48))
                alarm = detect_probe_drop(series(rng, noise, change, fall))
                if alarm is not None and change <= alarm.alarm_index <= change + 48:
                    delays.append(alarm.alarm_index - change)
                    errors.append(alarm.change_index - change)
            d = np.array(delays) if delays else np.array([np.nan])
            e = np.abs(np.array(errors)) if errors else np.array([np.nan])
            label = f"-{fall:.0%}" if fall < 0.4 else "to 20%"
            print(
                f"{noise:>6.1%} {label:>8}  {len(delays) / args.series:>9.0%}  "
                f"{np.nanmedian(d):>9.1f}  {np.nanpercentile(d, 90):>9.1f}  "
                f"{np.mean(e == 0):>13.0%}  {np.mean(e <= 2):>8.0%}"
            )
        alarms = sum(
            detect_probe_drop(series(rng, noise, None, 0.0)) is not None for _ in range(args.series)
        )
        print(
            f"{noise:>6.1%} no change: {alarms}/{args.series} series with a false alarm in "
            f"{WATCH_RUNS} runs ({alarms / (args.series * WATCH_RUNS / 1000):.2f} per 1,000 runs)"
        )
    print(f"{time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
