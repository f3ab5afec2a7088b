"""Speculative decoding at batch size one: the analysis of Leviathan, Kalman and Matias (2023).

Notation follows the paper (arXiv 2211.17192): ``alpha`` is the expected acceptance rate of a
drafted token (i.i.d. per position), ``k`` the number of drafted tokens per step (the paper's
gamma, vLLM's ``num_speculative_tokens``), and ``cost_ratio`` the paper's ``c``: the time of one
run of the draft model divided by the time of one run of the target model.

In vLLM's metric names, the mean acceptance length (bonus token included) is
``expected_tokens_per_step`` and the draft acceptance rate (accepted / drafted tokens) is
``(mean_acceptance_length - 1) / k``, which equals ``alpha`` only when ``k == 1``.
"""

import math

from scipy.optimize import brentq

from app.domain.errors import InvalidInput, NoBreakeven

_ALPHA_TOLERANCE = 1e-12


def _check_alpha(alpha: float) -> None:
    if not (0.0 <= alpha <= 1.0):
        raise InvalidInput(f"acceptance rate alpha must lie in [0, 1], got {alpha!r}")


def _check_k(k: int, *, minimum: int = 0) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < minimum:
        raise InvalidInput(f"k must be an integer >= {minimum}, got {k!r}")


def _check_cost_ratio(cost_ratio: float) -> None:
    if not (math.isfinite(cost_ratio) and cost_ratio >= 0.0):
        raise InvalidInput(f"cost ratio c must be finite and >= 0, got {cost_ratio!r}")


def expected_tokens_per_step(*, alpha: float, k: int) -> float:
    """Expected tokens emitted by one draft-and-verify step (paper's equation 1).

    ``E = (1 - alpha**(k + 1)) / (1 - alpha)``, with the limit ``k + 1`` at ``alpha == 1``.
    Computed as the finite sum ``1 + alpha + ... + alpha**k``, which is the same number and is
    exact at ``alpha == 1``. This is vLLM's mean acceptance length (bonus token included).

    Args:
        alpha: Expected per-token acceptance rate, in [0, 1].
        k: Drafted tokens per step (gamma); 0 means no speculation (E = 1).

    Returns:
        Expected tokens per step, in [1, k + 1].

    Raises:
        InvalidInput: If ``alpha`` is outside [0, 1] or ``k`` is negative.
    """
    _check_alpha(alpha)
    _check_k(k)
    return math.fsum(alpha**i for i in range(k + 1))


def walltime_speedup(*, alpha: float, k: int, cost_ratio: float) -> float:
    """Expected walltime improvement factor of speculative decoding (paper's theorem 3.8).

    ``S = (1 - alpha**(k + 1)) / ((1 - alpha) * (k * c + 1))``: a step costs ``k*c + 1`` target
    runs and yields ``expected_tokens_per_step`` tokens. Valid where the target's step time does
    not grow with the ``k + 1`` verified tokens (batch size one, memory-bound).

    Args:
        alpha: Expected per-token acceptance rate, in [0, 1].
        k: Drafted tokens per step (gamma), >= 0.
        cost_ratio: The paper's ``c``, draft run time over target run time, >= 0.

    Returns:
        Speedup over plain decoding; above 1.0 speculation pays.

    Raises:
        InvalidInput: If an argument is out of range.
    """
    _check_cost_ratio(cost_ratio)
    return expected_tokens_per_step(alpha=alpha, k=k) / (k * cost_ratio + 1.0)


def arithmetic_operations_factor(*, alpha: float, k: int, cost_ratio_ops: float) -> float:
    """Expected factor of increase in arithmetic operations (paper's theorem 3.11).

    ``(1 - alpha) * (k * c_hat + k + 1) / (1 - alpha**(k + 1))``, where ``c_hat`` is the draft
    model's arithmetic operations per token over the target's.

    Args:
        alpha: Expected per-token acceptance rate, in [0, 1].
        k: Drafted tokens per step (gamma), >= 0.
        cost_ratio_ops: The paper's ``c_hat``, >= 0.

    Returns:
        Operations with speculation divided by operations without; >= 1 when ``c_hat >= 0``.

    Raises:
        InvalidInput: If an argument is out of range.
    """
    _check_cost_ratio(cost_ratio_ops)
    return (k * cost_ratio_ops + k + 1) / expected_tokens_per_step(alpha=alpha, k=k)


def acceptance_breakeven(*, k: int, cost_ratio: float) -> float:
    """Smallest acceptance rate alpha at which speculation breaks even (speedup = 1).

    Solves ``walltime_speedup(alpha, k, c) = 1``, i.e. ``alpha + alpha**2 + ... + alpha**k =
    k * c``, with ``scipy.optimize.brentq``. The left side rises from 0 to ``k`` on [0, 1], so a
    root in [0, 1) exists exactly when ``c < 1``. With ``c == 0`` the answer is 0.0: a free
    drafter never slows decoding down.

    Args:
        k: Drafted tokens per step (gamma), >= 1.
        cost_ratio: The paper's ``c``, >= 0.

    Returns:
        The breakeven acceptance rate alpha*, in [0, 1).

    Raises:
        InvalidInput: If ``k < 1`` or ``cost_ratio`` is negative or not finite.
        NoBreakeven: If ``cost_ratio >= 1``: no acceptance rate in [0, 1) makes speculation pay.
    """
    _check_k(k, minimum=1)
    _check_cost_ratio(cost_ratio)
    if cost_ratio == 0.0:
        return 0.0
    if cost_ratio >= 1.0:
        raise NoBreakeven(f"cost ratio c={cost_ratio} >= 1: speculation with k={k} never pays")

    def excess(alpha: float) -> float:
        return math.fsum(alpha**i for i in range(1, k + 1)) - k * cost_ratio

    return float(brentq(excess, 0.0, 1.0, xtol=1e-14))


def optimal_k(*, alpha: float, cost_ratio: float, max_k: int = 32) -> int:
    """Number of drafted tokens that maximizes the walltime speedup (paper's section 3.5).

    Args:
        alpha: Expected per-token acceptance rate, in [0, 1].
        cost_ratio: The paper's ``c``, >= 0.
        max_k: Largest k considered, >= 0.

    Returns:
        The best k in ``0..max_k``; 0 means speculation does not pay. Ties go to the smaller k.

    Raises:
        InvalidInput: If an argument is out of range.
    """
    _check_k(max_k)
    speedups = [walltime_speedup(alpha=alpha, k=k, cost_ratio=cost_ratio) for k in range(max_k + 1)]
    best = max(speedups)
    return next(k for k, s in enumerate(speedups) if s >= best * (1.0 - 1e-12))


def alpha_from_acceptance_length(*, mean_acceptance_length: float, k: int) -> float:
    """Acceptance rate alpha implied by a measured mean acceptance length, inverting equation 1.

    Assumes i.i.d. acceptance per position, as the paper does. Measured lengths are averages over
    requests, so the implied alpha is the one whose capped geometric law has the same mean.

    Args:
        mean_acceptance_length: Tokens per step including the bonus token, in [1, k + 1].
        k: Drafted tokens per step, >= 1.

    Returns:
        alpha in [0, 1]: 0.0 at length 1, 1.0 at length ``k + 1``.

    Raises:
        InvalidInput: If ``k < 1`` or the length is not finite or outside [1, k + 1].
    """
    _check_k(k, minimum=1)
    length = mean_acceptance_length
    if not math.isfinite(length) or not (1.0 - 1e-9 <= length <= k + 1 + 1e-9):
        raise InvalidInput(
            f"mean acceptance length must lie in [1, {k + 1}] for k={k}, got {length!r}"
        )
    if length <= 1.0 + _ALPHA_TOLERANCE:
        return 0.0
    if length >= k + 1 - _ALPHA_TOLERANCE:
        return 1.0

    def excess(alpha: float) -> float:
        return math.fsum(alpha**i for i in range(k + 1)) - length

    return float(brentq(excess, 0.0, 1.0, xtol=1e-14))


def draft_acceptance_rate(*, mean_acceptance_length: float, k: int) -> float:
    """vLLM's draft acceptance rate (accepted / drafted tokens) from the mean acceptance length.

    Args:
        mean_acceptance_length: Tokens per step including the bonus token, in [1, k + 1].
        k: Drafted tokens per step, >= 1.

    Returns:
        ``(mean_acceptance_length - 1) / k``, in [0, 1].

    Raises:
        InvalidInput: If ``k < 1``.
    """
    _check_k(k, minimum=1)
    return (mean_acceptance_length - 1.0) / k
