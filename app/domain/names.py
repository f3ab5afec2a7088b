"""Checking a name the user typed against the names that exist, with suggestions."""

from collections.abc import Iterable
from difflib import get_close_matches


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'a' or 'b'?)`` for the known names close to ``name``, else ``""``;
    the close ones are found by difflib's ratio, so a typo or a wrong case is caught."""
    choices = sorted(set(known))
    close = get_close_matches(name, choices, n=3, cutoff=0.6)
    close += [c for c in choices if c.lower() == name.lower() and c not in close]
    if not close:
        return ""
    return " (did you mean " + " or ".join(repr(c) for c in close) + "?)"


def unknown_name(kind: str, name: str, known: Iterable[str], *, hint: str = "") -> str:
    """The message for an unknown ``kind`` called ``name``: the close known names, or the
    known ones when there are few, and what to do (``hint``)."""
    choices = sorted(set(known))
    message = f"unknown {kind} {name!r}" + did_you_mean(name, choices)
    if not choices:
        message += f"; there is no {kind} yet"
    elif len(choices) <= 8 and not did_you_mean(name, choices):
        message += f"; known: {', '.join(choices)}"
    return message + (f"; {hint}" if hint else "")
