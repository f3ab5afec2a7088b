"""Money as integer micro-units, exact to the pico. Decimal only at the edges; never floats.

A bill carries amounts finer than a micro (request-priced services, amortised fees: ten or
more decimal places). Every stored amount is therefore two integers: ``micros``, the amount
rounded half to even to the micro (what is shown, and what sums of shares are split on),
and a ``residual`` in picos (10**-12), what the exact amount is beyond that:
``exact picos = micros * 10**6 + residual``. Totals that are compared with the bill or
invoiced add both; rounding happens once, where money is shown.
"""

from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation

MICROS_PER_UNIT = 1_000_000
PICOS_PER_MICRO = 1_000_000
PICOS_PER_UNIT = MICROS_PER_UNIT * PICOS_PER_MICRO
_MICRO = Decimal("0.000001")
_PICO = Decimal("0.000000000001")


def decimal_to_micros(amount: Decimal) -> int:
    """Convert a decimal amount to integer micros, rounding half to even.

    Raises:
        ValueError: If ``amount`` is not finite.
    """
    if not amount.is_finite():
        raise ValueError(f"amount is not finite: {amount}")
    return int((amount * MICROS_PER_UNIT).quantize(Decimal(1), rounding=ROUND_HALF_EVEN))


def decimal_to_picos(amount: Decimal) -> int:
    """Convert a decimal amount to integer picos, rounding half to even (a bill's amounts
    have at most 12 decimal places; finer digits are float noise).

    Raises:
        ValueError: If ``amount`` is not finite.
    """
    if not amount.is_finite():
        raise ValueError(f"amount is not finite: {amount}")
    return int((amount * PICOS_PER_UNIT).quantize(Decimal(1), rounding=ROUND_HALF_EVEN))


def split_picos(picos: int) -> tuple[int, int]:
    """``(micros, residual)`` of an exact amount in picos: micros rounded half to even, and
    the picos beyond them (``picos == micros * 10**6 + residual``)."""
    micros = decimal_to_micros(Decimal(picos).scaleb(-12))
    return micros, picos - micros * PICOS_PER_MICRO


def exact_picos(micros: int, residual: int) -> int:
    """The exact amount in picos of a stored ``(micros, residual)`` pair."""
    return micros * PICOS_PER_MICRO + residual


def residual_column(column: str) -> str:
    """The name of the residual column beside an amount column: ``billed_cost_micros`` ->
    ``billed_cost_residual_picos``, ``billed`` -> ``billed_residual_picos``."""
    return f"{column.removesuffix('_micros')}_residual_picos"


def parse_micros(text: str) -> int:
    """Parse decimal text (``"12.5"``, ``"-3"``, ``"35.2E-7"``) into micros exactly.

    Raises:
        ValueError: If the text is not a finite decimal number.
    """
    try:
        amount = Decimal(text.strip())
    except InvalidOperation:
        raise ValueError(f"not a decimal number: {text!r}") from None
    return decimal_to_micros(amount)


def micros_to_decimal(micros: int) -> Decimal:
    """Exact decimal value of an amount in micros."""
    return Decimal(micros).scaleb(-6).quantize(_MICRO)


def picos_to_decimal(picos: int) -> Decimal:
    """Exact decimal value of an amount in picos."""
    return Decimal(picos).scaleb(-12).quantize(_PICO)


def format_micros(micros: int) -> str:
    """Decimal string with six places, as money crosses the wire (``"12.500000"``)."""
    return str(micros_to_decimal(micros))


def format_picos(picos: int) -> str:
    """Decimal string of an exact amount: six places, more where the amount has them
    (``"20.520226728990"`` -> ``"20.52022672899"``, ``"12.5"`` -> ``"12.500000"``)."""
    text = format(picos_to_decimal(picos), "f")
    whole, _, places = text.partition(".")
    return f"{whole}.{places.rstrip('0').ljust(6, '0')}"
