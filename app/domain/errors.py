"""Errors raised by pure domain code. They carry no HTTP or CLI meaning."""


class DomainError(Exception):
    """Base class for rule violations detected by pure code."""


class EmptyAllocationBasis(DomainError):
    """An amount had to be split but no key had a positive weight."""


class NoBreakeven(DomainError):
    """Two cost or throughput curves do not cross in the range asked about."""


class InvalidInput(DomainError):
    """Input data cannot be used as given (too few points, NaN, negative values...)."""
