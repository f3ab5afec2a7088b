"""Who may bill whom: what a proxy key grants the requests that present it (pure)."""

from collections.abc import Mapping
from dataclasses import dataclass, field

from app.domain.usage import SESSION_ID_MAX

UNATTRIBUTED = "(unattributed)"
"""The team of a request that presented no key, where the proxy allows that."""

RESERVED_TAG_PREFIX = "specledger."
"""Tags the proxy sets itself (which key, through a gateway or not); a client cannot."""
KEY_TAG = "specledger.key"
"""The id of the proxy key a request presented."""
STEP_TAG = "specledger.budget_step"
"""The brownout step that acted on a request (``ACTION:BUDGET``: warn or route)."""
VIA_TAG = "specledger.via"
"""How the team was decided: ``key``, ``gateway`` (the key's gateway passed it on) or
``anonymous``."""


@dataclass(frozen=True, slots=True)
class ProxyGrant:
    """What one proxy key allows: the team and cost center it bills, the tags it sets,
    the deployments it may use (None: all), and whether it is a trusted gateway."""

    key_id: int
    name: str
    team: str
    cost_center: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    deployments: frozenset[str] | None = None
    gateway: bool = False

    def may_use(self, deployment: str) -> bool:
        return self.deployments is None or deployment in self.deployments


def parse_tags(header: str | None) -> dict[str, str]:
    """Parse tags written ``k=v,k2=v2`` (the proxy's ``X-Tags`` header, a key's ``--tags``).

    Raises:
        ValueError: On an item without ``=``, an empty key, or a key or value over
            :data:`SESSION_ID_MAX` characters.
    """
    tags: dict[str, str] = {}
    if not header:
        return tags
    for item in header.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise ValueError(f"X-Tags item {item.strip()!r} is not key=value")
        if len(key) > SESSION_ID_MAX or len(value) > SESSION_ID_MAX:
            raise ValueError(f"X-Tags item {key!r} is longer than {SESSION_ID_MAX} characters")
        tags[key] = value
    return tags
