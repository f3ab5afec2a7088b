"""Speculative-decoding figures for requests on a TensorRT-LLM replica, from its iteration
stats: the proxy's side of :mod:`serving.engines.trtllm_iteration_stats`.

``trtllm-serve`` reports drafted and accepted tokens per iteration, not per request, and
its ``/metrics`` queue empties on each read. The meter keeps each request's interval on the
proxy's clock; each drain places the drained iterations between the previous drain and
this one (laid back from the drain by their latencies) and splits their figures over the
requests in flight during each, exactly, by largest remainder; an iteration whose estimated
span meets no request goes to the requests in flight at any time in the window. A finished request's figures are final once a drain after its finish
has been applied (:meth:`IterationSpecMeter.covers`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from serving.engines.trtllm_iteration_stats import (
    UNATTRIBUTED,
    IterationRecord,
    SpecShare,
    apportion_iterations,
    place_iterations,
    requests_active,
)

__all__ = ["IterationSpecMeter"]


@dataclass(slots=True)
class IterationSpecMeter:
    """One replica's requests and their shares of its drained iterations."""

    drained_at_ns: int
    """The last drain (the start of the next drained batch's window)."""
    intervals: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    shares: dict[str, SpecShare] = field(default_factory=dict)
    unattributed: SpecShare = field(default_factory=SpecShare)
    """Figures of iterations drained in a window in which no metered request was in flight
    (traffic sent to the engine directly)."""
    iterations: int = 0
    settle_after_ns: int = 0
    """How long after a request's finish a drain must be for its figures to count as
    final: the engine queues an iteration's stats as it ends, so the drain right at a
    finish may miss the request's last iteration."""

    def begin(self, event_id: str, *, at_ns: int) -> None:
        self.intervals[event_id] = (at_ns, None)

    def end(self, event_id: str, *, at_ns: int) -> None:
        arrived, _ = self.intervals.get(event_id, (at_ns, None))
        self.intervals[event_id] = (arrived, max(at_ns, arrived))

    def covers(self, event_id: str) -> bool:
        """Whether a drain ``settle_after_ns`` after the request finished has been applied."""
        _, finished = self.intervals.get(event_id, (0, None))
        return finished is not None and self.drained_at_ns >= finished + self.settle_after_ns

    def drain(self, records: Sequence[IterationRecord], *, at_ns: int) -> None:
        """Apply the iterations drained at ``at_ns``."""
        at_ns = max(at_ns, self.drained_at_ns)
        spans = place_iterations(records, window_start_ns=self.drained_at_ns, window_end_ns=at_ns)
        # The spans are an estimate (iterations laid back from the drain); one that meets
        # no request, in a window that had some, is misplaced rather than unmetered.
        in_window = requests_active(self.intervals, self.drained_at_ns, at_ns)
        pairs = [
            (record, requests_active(self.intervals, start, end) or in_window)
            for record, (start, end) in zip(records, spans, strict=True)
        ]
        for key, share in apportion_iterations(pairs).items():
            if key == UNATTRIBUTED:
                self.unattributed = self.unattributed + share
            else:
                self.shares[key] = self.shares.get(key, SpecShare()) + share
        self.iterations += len(records)
        self.drained_at_ns = at_ns

    def take(self, event_id: str) -> SpecShare:
        """The request's figures, forgetting it (call once its record is written)."""
        self.intervals.pop(event_id, None)
        return self.shares.pop(event_id, SpecShare())
