"""Money as integer micro-units. Decimal only at the edges; never floats."""

from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation

MICROS_PER_UNIT = 1_000_000
_MICRO = Decimal("0.000001")


def decimal_to_micros(amount: Decimal) -> int:
    """Convert a decimal amount to integer micros, rounding half to even.

    Raises:
        ValueError: If ``amount`` is not finite.
    """
    if not amount.is_finite():
        raise ValueError(f"amount is not finite: {amount}")
    return int((amount * MICROS_PER_UNIT).quantize(Decimal(1), rounding=ROUND_HALF_EVEN))


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


def format_micros(micros: int) -> str:
    """Decimal string with six places, as money crosses the wire (``"12.500000"``)."""
    return str(micros_to_decimal(micros))
