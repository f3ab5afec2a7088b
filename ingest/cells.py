"""Parsing and repair of single FOCUS cell values. Pure functions, no Arrow, no I/O.

Each parser returns the normalised value and the name of the repair it made (or None).
It raises ``ValueError`` with a user-facing reason when the value cannot be repaired.
"""

import json
import re
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation

from app.domain.money import decimal_to_micros

NULL_LITERALS = frozenset({"null", "none", "nan", "n/a"})

CANONICAL_NUMBER = re.compile(r"-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE]-?\d+)?")
CANONICAL_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")
_US_DATE = re.compile(
    r"(?P<m>\d{1,2})/(?P<d>\d{1,2})/(?P<y>\d{2}|\d{4})"
    r"(?:[ T](?P<H>\d{1,2}):(?P<M>\d{2})(?::(?P<S>\d{2}))?)?"
)
_OVERFLOW_HOUR = re.compile(
    r"(?P<date>\d{4}-\d{2}-\d{2})[T ](?P<H>\d{2}):(?P<M>\d{2})(?::(?P<S>\d{2}))?(?:Z|\+00:00)?"
)
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?:\D|$))")
_CURRENCY_SYMBOLS = "$€£¥"
INT64_MAX = 2**63 - 1
PICO = Decimal("1E-12")


def null_repair(text: str) -> str | None:
    """The repair that turns ``text`` into a null, or None when the text is a real value."""
    stripped = text.strip()
    if not stripped:
        return "empty_string_as_null"
    if stripped.lower() in NULL_LITERALS:
        return "null_literal_as_null"
    return None


def parse_number(text: str) -> tuple[Decimal, str | None]:
    """Parse FOCUS numeric text, repairing quotes, currency symbols, separators and signs."""
    if CANONICAL_NUMBER.fullmatch(text):
        return Decimal(text), None
    cleaned = text.strip().strip("'\"").strip()
    repair = "quoted_number" if cleaned != text.strip() else "number_format"
    negative = cleaned.startswith("(") and cleaned.endswith(")")
    if negative:
        cleaned = cleaned[1:-1].strip()
    cleaned = cleaned.lstrip(_CURRENCY_SYMBOLS).strip()
    if cleaned.startswith("-"):
        cleaned = "-" + cleaned[1:].lstrip(_CURRENCY_SYMBOLS).strip()
    cleaned = _THOUSANDS.sub("", cleaned).replace("E+", "E").replace("e+", "e")
    if cleaned.startswith("+"):
        cleaned = cleaned[1:]
    if not CANONICAL_NUMBER.fullmatch(cleaned):
        raise ValueError("not a decimal number")
    try:
        value = Decimal(cleaned)
    except InvalidOperation:
        raise ValueError("not a decimal number") from None
    return (-value if negative else value), repair


def parse_money_micros(text: str) -> tuple[int, str | None]:
    """Parse a cost into integer micros, exactly from the decimal text (half-even at 1e-6)."""
    value, repair = parse_number(text)
    micros = decimal_to_micros(value)
    if abs(micros) > INT64_MAX:
        raise ValueError("amount out of range")
    return micros, repair


def parse_money_exact(text: str) -> tuple[Decimal, str | None]:
    """Parse a cost exactly, to the pico (12 places): digits finer than that (float noise
    in some exports) are rounded half to even and counted as a repair."""
    value, repair = parse_number(text)
    if abs(decimal_to_micros(value)) > INT64_MAX:
        raise ValueError("amount out of range")
    exact = value.quantize(PICO, rounding=ROUND_HALF_EVEN)
    if exact != value:
        repair = "rounded_to_the_pico"
    return exact, repair


def parse_timestamp(text: str) -> tuple[datetime, str | None]:
    """Parse a FOCUS date/time into an aware UTC datetime.

    Canonical is ``YYYY-MM-DDTHH:MM:SSZ``. Repaired: a space for ``T``, a missing ``Z``
    (read as UTC), fractions, numeric offsets (converted to UTC), a bare date, and US
    ``M/D/YY`` dates as found in spreadsheet-edited exports.
    """
    if CANONICAL_TIMESTAMP.fullmatch(text):
        try:
            return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC), None
        except ValueError:
            pass  # e.g. hour 30: see _hour_overflow
    stripped = text.strip()
    us = _US_DATE.fullmatch(stripped)
    if us:
        year = int(us["y"]) + (2000 if len(us["y"]) == 2 else 0)
        try:
            value = datetime(
                year,
                int(us["m"]),
                int(us["d"]),
                int(us["H"] or 0),
                int(us["M"] or 0),
                int(us["S"] or 0),
                tzinfo=UTC,
            )
        except ValueError:
            raise ValueError("not a valid date/time") from None
        return value, "timestamp_us_date"
    try:
        value = datetime.fromisoformat(stripped)
    except ValueError:
        return _hour_overflow(stripped)
    value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return value, "timestamp_format"


def _hour_overflow(text: str) -> tuple[datetime, str]:
    """``2023-02-01T30:00:00Z`` (found in the FOCUS spec's own examples, and in exports built
    by adding hours to a date) rolls over into the next day, as ``24:00`` does in ISO 8601."""
    match = _OVERFLOW_HOUR.fullmatch(text)
    if not match:
        raise ValueError("not an ISO 8601 date/time")
    try:
        day = datetime.strptime(match["date"], "%Y-%m-%d").replace(tzinfo=UTC)
    except ValueError:
        raise ValueError("not an ISO 8601 date/time") from None
    minute, second = int(match["M"]), int(match["S"] or 0)
    if minute > 59 or second > 59:
        raise ValueError("not an ISO 8601 date/time")
    return day + timedelta(hours=int(match["H"]), minutes=minute, seconds=second), (
        "timestamp_hour_overflow"
    )


def parse_enum(text: str, allowed: tuple[str, ...]) -> tuple[str, str | None]:
    """Match an enumerated value ignoring case, spaces, hyphens and underscores."""
    if text in allowed:
        return text, None
    key = _enum_key(text)
    for value in allowed:
        if _enum_key(value) == key:
            return value, "enum_case"
    raise ValueError(f"not one of {', '.join(allowed)}")


def _enum_key(text: str) -> str:
    return re.sub(r"[\s_-]", "", text).lower()


def parse_json_object(text: str, *, tags: bool = False) -> tuple[str, str | None]:
    """Parse a FOCUS key-value JSON object; return it as compact JSON with sorted keys.

    For ``Tags``, keys written as ``user:<key>`` become ``<key>``, so AWS-style prefixed and
    unprefixed user tags normalise the same way.

    Raises:
        ValueError: If the text is not a JSON object with scalar values.
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise ValueError("not valid JSON") from None
    return dump_json_object(value, tags=tags)


def check_nested_json_object(text: str) -> tuple[str, str | None]:
    """Check a FOCUS 1.3 JSON Object Format value (nesting allowed, e.g.
    AllocatedMethodDetails) and keep its text as written, so decimal numbers stay exact.

    Raises:
        ValueError: If the text is not a JSON object.
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise ValueError("not valid JSON") from None
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return text, None


def dump_json_object(value: object, *, tags: bool = False) -> tuple[str, str | None]:
    """Validate a parsed key-value object (flat, scalar values) and dump it canonically."""
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    if any(isinstance(v, dict | list) for v in value.values()):
        raise ValueError("not a flat JSON object (nested values)")
    repair = None
    if tags:
        renamed: dict[str, object] = {}
        for key, item in value.items():
            if key.startswith("user:"):
                repair = "tag_user_prefix"
                key = key[len("user:") :]
                if key in value:  # an unprefixed key of the same name wins
                    continue
            renamed[key] = item
        value = renamed
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False), repair
