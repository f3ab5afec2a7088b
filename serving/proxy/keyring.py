"""The proxy's copy of the live proxy keys, checked in memory on every request.

Keys are looked up by the SHA-256 of what the client presents, in a dict the proxy reloads
from the database whenever the keys change: a cheap fingerprint (count, highest id, revoked
count) is read every ``refresh_s``, so a new key works and a revoked one stops within that
interval without a query per request. A key not found triggers an early check, unless one
began after the request arrived (so a flood of bad keys costs one check at a time), and a
key created a moment ago is not refused while the proxy waits for its next poll.
"""

from __future__ import annotations

import threading
import time

import anyio
from sqlalchemy import Engine

from app.auth.service import KEY_MARK, hash_key, keys_fingerprint, proxy_grants
from app.db import read_session
from app.domain.attribution import ProxyGrant


class KeyRing:
    """Live proxy keys by hash; :meth:`refresh` is blocking (run it in a thread)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._grants: dict[str, ProxyGrant] = {}
        self._fingerprint: tuple[object, ...] | None = None
        self._lock = threading.Lock()
        self._checked_at = float("-inf")
        """When the latest check began (monotonic seconds)."""
        self.protected_tags: frozenset[str] = frozenset()
        """Tag keys that some live key sets: a header may not set them (a budget on such a
        tag counts the requests of the keys that set it, and only those)."""
        self._miss_limiter: anyio.CapacityLimiter | None = None

    def refresh(self, *, unless_checked_since: float | None = None) -> bool:
        """Reload the grants if the keys changed (True if they did); with
        ``unless_checked_since`` (monotonic seconds), not if a check began after it."""
        with self._lock:
            if unless_checked_since is not None and self._checked_at >= unless_checked_since:
                return False
            self._checked_at = time.monotonic()
            return self._reload()

    def _reload(self) -> bool:
        with read_session(self._engine) as session:
            fingerprint = keys_fingerprint(session)
            if fingerprint == self._fingerprint:
                return False
            grants = proxy_grants(session)
            self._grants = grants
            self.protected_tags = frozenset(k for g in grants.values() for k in g.tags)
            self._fingerprint = fingerprint
            return True

    @property
    def miss_limiter(self) -> anyio.CapacityLimiter:
        """One thread at most for the checks that unknown keys trigger."""
        if self._miss_limiter is None:
            self._miss_limiter = anyio.CapacityLimiter(1)
        return self._miss_limiter

    def lookup(self, secret: str) -> ProxyGrant | None:
        """The grant of a presented key, from memory (None: unknown or revoked)."""
        return self._grants.get(hash_key(secret))


def looks_like_key(secret: str) -> bool:
    """Whether a presented credential is meant as a SpecLedger key (others may be meant for
    the model server, and pass through where anonymous use is allowed)."""
    return secret.startswith(KEY_MARK)
