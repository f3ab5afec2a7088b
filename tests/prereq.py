"""Missing prerequisites: skipped on a developer's machine, a failure under CI.

``make test`` (and ``.ci/run``) set ``CI=1`` and install everything the suite needs
(PostgreSQL, Chromium, the vLLM venv, the prepared model). A test that would silently skip
there hides a broken CI setup, so under CI :func:`require` fails instead.
"""

import os

import pytest

_FALSE = {"", "0", "false", "no", "off"}


def under_ci() -> bool:
    """Whether the ``CI`` environment variable is set (to anything but 0/false/no/off)."""
    return os.environ.get("CI", "").strip().lower() not in _FALSE


def require(condition: bool, reason: str) -> None:
    """Go on if ``condition`` holds; otherwise fail under CI and skip elsewhere.

    Call it inside a test or a fixture (not in a ``skipif`` marker, which cannot fail).
    """
    if condition:
        return
    if under_ci():
        pytest.fail(f"CI is missing a prerequisite: {reason}", pytrace=False)
    pytest.skip(reason)
