"""Moved to :mod:`app.domain.breakeven.sweep`.

This alias stays only until ``tests/api/conftest.py`` (another engineer's file) imports
``SweepPoint`` from there; delete it then.
"""

from app.domain.breakeven.sweep import SweepPoint

__all__ = ["SweepPoint"]
