"""vLLM's spec-decode counters, read from its Prometheus text page: pure, no I/O."""

from collections.abc import Iterator

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
