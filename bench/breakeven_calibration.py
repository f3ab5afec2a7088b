"""Does the breakeven interval mean what it says? Sweeps generated from known engines,
fitted as a user's sweep is, with the error of the estimate and how often the 90% and 95%
intervals hold the true crossing: the residual bootstrap of the fitted model alone (the
reference: what the product reported before) beside the interval reported now, in the
same run.

    python -m bench.breakeven_calibration [--seeds 15] [--bootstrap 200]

The engines: the fitted model's own form (floor + per-token cost, a constant ngram
drafter), one with a per-sequence cost, and two it cannot express: a drafter whose cost
grows with the batch, and both together. Throughput noise 2% (log-normal) on every row;
designs of 9 levels from 1 to 256 and of 6 from 1 to 32.
"""

import argparse
import math
import statistics
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq

from app.breakeven.rules.report import fit_breakeven
from app.breakeven.rules.sweep import SweepPoint

K = 4
ACCEPTANCE_LENGTH = 2.6
NOISE = 0.02
DESIGNS = {
    "9 levels 1-256": (1, 2, 4, 8, 16, 32, 64, 128, 256),
    "6 levels 1-32": (1, 2, 4, 8, 16, 32),
}


@dataclass(frozen=True, slots=True)
class Engine:
    """A known engine: step time ``floor + (per_sequence + per_token * n) * B``, plus a
    drafter cost per speculative step ``drafter * (1 + B / drafter_growth)``."""

    name: str
    floor_s: float
    per_token_s: float
    per_sequence_s: float = 0.0
    drafter_s: float = 0.004
    drafter_growth: float = math.inf

    def plain(self, batch: float) -> float:
        return batch / (self.floor_s + (self.per_sequence_s + self.per_token_s) * batch)

    def speculative(self, batch: float) -> float:
        verify = self.floor_s + (self.per_sequence_s + self.per_token_s * (K + 1)) * batch
        drafter = self.drafter_s * (1 + batch / self.drafter_growth)
        return batch * ACCEPTANCE_LENGTH / (verify + drafter)

    def crossing(self) -> float:
        return float(
            math.exp(
                brentq(
                    lambda x: math.log(self.speculative(math.exp(x)) / self.plain(math.exp(x))),
                    math.log(0.5),
                    math.log(5000.0),
                )
            )
        )


ENGINES = (
    Engine("model's own form", floor_s=0.035, per_token_s=0.0033),
    Engine("per-sequence cost", floor_s=0.035, per_token_s=0.0025, per_sequence_s=0.002),
    Engine("drafter grows with batch", floor_s=0.035, per_token_s=0.0030, drafter_growth=8),
    Engine(
        "both",
        floor_s=0.035,
        per_token_s=0.0022,
        per_sequence_s=0.002,
        drafter_s=0.003,
        drafter_growth=16,
    ),
)


def sweep(engine: Engine, levels: tuple[int, ...], seed: int) -> list[SweepPoint]:
    rng = np.random.default_rng(seed)
    points = []
    for level in levels:
        for config, method, k, rate in (
            ("none", "none", 0, engine.plain(level)),
            (f"ngram-k{K}", "ngram", K, engine.speculative(level)),
        ):
            points.append(
                SweepPoint(
                    config=config,
                    method=method,
                    k=k,
                    concurrency=level,
                    output_tokens_per_s=rate * math.exp(rng.normal(0, NOISE)),
                    mean_acceptance_length=ACCEPTANCE_LENGTH if k else math.nan,
                )
            )
    return points


@dataclass(slots=True)
class Tally:
    errors: list[float]
    local_errors: list[float]
    covered: dict[tuple[str, float], int]
    runs: int = 0

    def share(self, name: str, confidence: float) -> str:
        return f"{self.covered[(name, confidence)] / self.runs:.0%}"


def _holds(interval: tuple[float, float] | None, truth: float) -> bool:
    return interval is not None and interval[0] <= truth <= interval[1]


def calibrate(engine: Engine, levels: tuple[int, ...], seeds: int, bootstrap: int) -> Tally:
    truth = engine.crossing()
    tally = Tally(errors=[], local_errors=[], covered={})
    for seed in range(seeds):
        points = sweep(engine, levels, seed)
        for confidence in (0.90, 0.95):
            fit = fit_breakeven(
                points, bootstrap_samples=bootstrap, seed=seed, confidence=confidence
            ).primary
            if confidence == 0.95:
                estimate = fit.breakeven_concurrency
                tally.errors.append(math.inf if estimate is None else abs(estimate / truth - 1))
                local = math.inf if fit.local is None else abs(fit.local.estimate / truth - 1)
                tally.local_errors.append(local)
            for name, interval in (("bootstrap", fit.bootstrap_ci), ("reported", fit.breakeven_ci)):
                key = (name, confidence)
                tally.covered[key] = tally.covered.get(key, 0) + _holds(interval, truth)
        tally.runs += 1
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=15, help="noise seeds per engine and design")
    parser.add_argument("--bootstrap", type=int, default=200, help="bootstrap refits per fit")
    args = parser.parse_args()
    header = (
        f"{'engine':<26}{'design':<16}{'truth':>7}{'median err':>11}{'local err':>10}"
        f"{'boot 90':>9}{'boot 95':>9}{'now 90':>8}{'now 95':>8}"
    )
    print(header)
    totals: dict[tuple[str, float], list[int]] = {}
    all_errors: list[float] = []
    all_local: list[float] = []
    for engine in ENGINES:
        for design, levels in DESIGNS.items():
            tally = calibrate(engine, levels, args.seeds, args.bootstrap)
            print(
                f"{engine.name:<26}{design:<16}{engine.crossing():>7.1f}"
                f"{statistics.median(tally.errors):>11.1%}"
                f"{statistics.median(tally.local_errors):>10.1%}"
                f"{tally.share('bootstrap', 0.9):>9}{tally.share('bootstrap', 0.95):>9}"
                f"{tally.share('reported', 0.9):>8}{tally.share('reported', 0.95):>8}"
            )
            all_errors += tally.errors
            all_local += tally.local_errors
            for key, count in tally.covered.items():
                totals.setdefault(key, [0, 0])
                totals[key][0] += count
                totals[key][1] += tally.runs
    cover = {key: hits / runs for key, (hits, runs) in totals.items()}
    print(
        f"{'all':<49}{statistics.median(all_errors):>11.1%}{statistics.median(all_local):>10.1%}"
        f"{cover[('bootstrap', 0.9)]:>9.0%}{cover[('bootstrap', 0.95)]:>9.0%}"
        f"{cover[('reported', 0.9)]:>8.0%}{cover[('reported', 0.95)]:>8.0%}"
    )


if __name__ == "__main__":
    main()
