"""Benchmarks: each prints its figures beside a reference run in the same process
(``python -m bench.NAME``; the figures are in docs/benchmarks.md).
"""
