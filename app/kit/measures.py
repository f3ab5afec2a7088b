"""The measures of :mod:`app.domain.measures` as SQL over the ledger and usage tables."""

from typing import Any

from sqlalchemy import ColumnElement, case, func

from app.domain.ledger import COMPUTE_METHODS


def counted_gpu_ns(table: Any) -> ColumnElement[int]:
    """An entry's (or rollup's) GPU time: its ``gpu_ns`` on a compute-pool entry, else 0."""
    return case((table.method.in_(COMPUTE_METHODS), table.gpu_ns), else_=0)


def sum_gpu_ns(table: Any) -> ColumnElement[int]:
    """GPU time summed over ledger entries or rollups, counted once (see above)."""
    return func.coalesce(func.sum(counted_gpu_ns(table)), 0)
