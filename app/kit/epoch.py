"""Datetimes as integer epoch nanoseconds or microseconds, a column at a time (Arrow)."""

from collections.abc import Sequence
from datetime import datetime

import numpy as np
import pyarrow as pa


def to_ns(values: Sequence[datetime]) -> np.ndarray:
    """Datetimes (aware, or naive UTC) as int64 nanoseconds since the epoch."""
    return _epoch(values, "ns")


def to_us(values: Sequence[datetime]) -> np.ndarray:
    """Datetimes (aware, or naive UTC) as int64 microseconds since the epoch."""
    return _epoch(values, "us")


def _epoch(values: Sequence[datetime], unit: str) -> np.ndarray:
    stamps = pa.array(values, pa.timestamp(unit, tz="UTC"))
    return np.asarray(stamps.cast(pa.int64()).to_numpy(zero_copy_only=False), np.int64)
