"""vLLM's spec-decode counters, read from its Prometheus text page: pure, no I/O."""

from collections.abc import Iterator
from dataclasses import dataclass, field

_SPEC_COUNTERS = {
    "vllm:spec_decode_num_drafts_total": "num_drafts",
    "vllm:spec_decode_num_draft_tokens_total": "num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens_total": "num_accepted_tokens",
}


def _samples(text: str) -> Iterator[tuple[str, float]]:
    """``(name, value)`` of each sample line of a Prometheus text page."""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "{" in line:
            name, _, rest = line.partition("{")
            rest = rest.rpartition("}")[2]  # label values may hold spaces
        else:
            name, _, rest = line.partition(" ")
        fields = rest.split()
        if fields:
            try:
                yield name, float(fields[0])
            except ValueError:
                continue


def parse_spec_decode_counters(text: str) -> dict[str, int]:
    """Sum vLLM's spec-decode counters over all label sets of a Prometheus text page.

    Returns:
        ``num_drafts``, ``num_draft_tokens`` and ``num_accepted_tokens`` (0 when absent, as
        on a server without speculation).
    """
    totals = dict.fromkeys(_SPEC_COUNTERS.values(), 0.0)
    for name, value in _samples(text):
        key = _SPEC_COUNTERS.get(name)
        if key is not None:
            totals[key] += value
    return {key: round(value) for key, value in totals.items()}


COUNTERS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")
"""vLLM's spec-decode counters the proxy checks its records against."""


def _zeros() -> dict[str, int]:
    return dict.fromkeys(COUNTERS, 0)


@dataclass
class EngineCounterCheck:
    """One replica's spec-decode counters (vLLM's ``/metrics``) against the sums of the usage
    records the proxy metered on it, so a meter that drifts from the engine is seen.

    The comparison needs a quiet moment: a baseline is taken from a scrape during which the
    replica had no request in flight and finished none, and each later quiet scrape compares
    the counters' growth since the baseline with the records finished since. A difference is
    traffic the proxy did not meter (requests sent to vLLM directly, or a record that lost
    its figures, such as a stream cut before its usage chunk). A counter that went down (the
    engine restarted) takes a new baseline.
    """

    baseline: dict[str, int] | None = None
    metered: dict[str, int] = field(default_factory=_zeros)
    drift: dict[str, int] | None = None
    """Engine growth minus metered sums at the last quiet check; None before one."""

    def record(self, *, num_drafts: int, draft_tokens: int, accepted_tokens: int) -> None:
        """Add a finished request's figures."""
        self.metered["num_drafts"] += num_drafts
        self.metered["num_draft_tokens"] += draft_tokens
        self.metered["num_accepted_tokens"] += accepted_tokens

    def observe(self, engine: dict[str, int], *, quiet: bool) -> dict[str, int] | None:
        """Compare a scrape; returns the drift when the scrape was quiet and had a baseline."""
        if not quiet:
            return None
        restarted = self.baseline is not None and any(
            engine[c] < self.baseline[c] for c in COUNTERS
        )
        if self.baseline is None or restarted:
            self.baseline, self.metered, self.drift = dict(engine), _zeros(), None
            return None
        self.drift = {c: engine[c] - self.baseline[c] - self.metered[c] for c in COUNTERS}
        return self.drift
