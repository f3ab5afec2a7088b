"""Sweep CSVs generated from known step-time parameters, with log-normal noise."""

import csv
import math
from pathlib import Path

import numpy as np

from app.breakeven.rules.model import (
    SpeculationModel,
    StepTimeModel,
    baseline_tokens_per_s,
    breakeven_concurrency,
    speculative_tokens_per_s,
)

# Close to what SmolLM2-135M does on two CPU cores (DESIGN.md, "Facts measured").
CPU_STEP = StepTimeModel(floor_s=0.035, per_token_s=0.0033)
NGRAM = SpeculationModel(k=4, mean_acceptance_length=2.6, drafter_overhead_s=0.004)
LEVELS = (1, 2, 4, 8, 16, 32)
HEADER = [
    "config",
    "method",
    "k",
    "concurrency",
    "output_tokens_per_s",
    "tpot_p50_s",
    "acceptance_rate",
    "mean_acceptance_length",
]


def true_breakeven(step: StepTimeModel = CPU_STEP, spec: SpeculationModel = NGRAM) -> float:
    """The breakeven the generating parameters imply."""
    return breakeven_concurrency(step, spec, low=0.5, high=1000.0)


def sweep_rows(
    step: StepTimeModel = CPU_STEP,
    spec: SpeculationModel = NGRAM,
    *,
    levels: tuple[int, ...] = LEVELS,
    noise: float = 0.0,
    repeats: int = 1,
    seed: int = 0,
) -> list[dict[str, object]]:
    """Rows of a none-vs-ngram sweep from known parameters."""
    rng = np.random.default_rng(seed)
    rows: list[dict[str, object]] = []
    for _ in range(repeats):
        for level in levels:
            plain = float(baseline_tokens_per_s(step, concurrency=level))
            fast = float(speculative_tokens_per_s(step, spec, concurrency=level))
            rows.append(
                {
                    "config": "none",
                    "method": "none",
                    "k": 0,
                    "concurrency": level,
                    "output_tokens_per_s": plain * math.exp(rng.normal(0, noise)),
                    "tpot_p50_s": level / plain,
                    "acceptance_rate": "",
                    "mean_acceptance_length": "",
                }
            )
            rows.append(
                {
                    "config": f"ngram-k{spec.k}",
                    "method": "ngram",
                    "k": spec.k,
                    "concurrency": level,
                    "output_tokens_per_s": fast * math.exp(rng.normal(0, noise)),
                    "tpot_p50_s": level / fast,
                    "acceptance_rate": (spec.mean_acceptance_length - 1) / spec.k,
                    "mean_acceptance_length": spec.mean_acceptance_length,
                }
            )
    return rows


def write_rows(path: Path, rows: list[dict[str, object]], header: list[str] | None = None) -> Path:
    """Write rows as CSV (missing keys become empty cells)."""
    columns = header or HEADER
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({c: row.get(c, "") for c in columns})
    return path
